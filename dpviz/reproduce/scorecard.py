"""Running the scorecard on a task: train what the chosen claims need (finished runs answer from the store,
so a stopped scorecard resumes) and read each claim's row; or read the rows that are already complete.
A claim that cannot be read on the task gets a row that says why instead of a verdict."""

from __future__ import annotations

import re

import threading
from typing import Callable

import numpy as np

from dpviz.config import RunConfig
from dpviz.errors import Cancelled
from dpviz.reproduce.claims import PAPERS, PRIVATE_NOTE, REGISTRY, SEED_FILES, Claim, at_scale
from dpviz.reproduce.verdicts import NOT_READ, mean_std


def plan(claims, seeds, task: str = "default", changes: dict | None = None,
         scale: str = "small") -> dict[str, dict[str, list[RunConfig]]]:
    """claim id → group → its runs' configs on ``task`` at ``scale`` (`claims.SCALES`; claims it cannot read
    there left out); ``changes``: fields set on every run after the size's (e.g. a tiny size for a smoke
    test, or the device)."""
    def sized(cfg):
        cfg = at_scale(cfg, task, scale)
        return cfg.replace(**changes) if changes else cfg

    return {c.id: {g: [sized(cfg) for cfg in cfgs] for g, cfgs in c.configs(task, tuple(seeds)).items()}
            for c in claims if c.why_not(task, scale) is None}


def _header(claim: Claim, task: str, scale: str = "small") -> dict:
    return {"id": claim.id, "task": task, "scale": scale, "seed": claim.seed, "seed_file": SEED_FILES[claim.seed],
            "paper": PAPERS[claim.seed][0], "claim": claim.sentence, "preset": claim.experiment(task, scale)}


def unreadable_row(claim: Claim, task: str, scale: str = "small") -> dict:
    """The row of a claim ``task`` cannot read at ``scale``: why, in place of a verdict."""
    return {**_header(claim, task, scale), "verdict": NOT_READ, "reading": claim.why_not(task, scale), "measured": {},
            "private_statistics": claim.private, "seeds": 0, "run_ids": {}}


ONE_SEED = ("From one seed there is no spread to judge a difference by: this verdict is not a reading "
            "(run 2 seeds or more, 3 for a mean ± std).")


def row(claim: Claim, store, groups: dict[str, list[dict]], task: str = "default", scale: str = "small") -> dict:
    """The scorecard row of ``claim`` from its runs' summaries (JSON-ready)."""
    m = claim.measure(store, groups)
    verdict, reading = claim.judge(m)
    n_seeds = len(next(iter(groups.values()), []))
    if n_seeds < 2:  # no spread to compare a difference with: any difference decides the verdict
        reading += f" {ONE_SEED}"
    stats = {g: _stat(v) for g, v in m.get("groups", {}).items()}
    if "curves" in m:
        stats = {f"ε={e} p={p:g}": _stat(v) for e, c in m["curves"].items() for p, v in sorted(c.items())}
    if "dips" in m:
        stats = {f"{g} kNN dip": _stat(v) for g, v in m["dips"].items()}
    if "dominant" in m:
        stats = {"decelerator dominant (share)": {"mean": float(np.mean([d == "decelerator" for d in m["dominant"]]
                                                                          or [0.0])), "std": 0.0}}
    return {**_header(claim, task, scale), "verdict": verdict, "reading": reading, "measured": stats, "private_statistics": claim.private,
            **({"note": PRIVATE_NOTE} if claim.private else {}), "seeds": n_seeds,
            "run_ids": {g: [s["run_id"] for s in runs] for g, runs in groups.items()}, **curves(m),
            "measurement": _plain(m)}


def _plain(m: dict) -> dict:
    """``m`` as JSON keeps it (numpy numbers and arrays as plain ones, keys as text), so the row's verdict can be
    judged again from the row alone (`dpviz.studies.scorecard.rejudge`)."""
    import json

    return json.loads(json.dumps(m, default=lambda o: o.tolist() if hasattr(o, "tolist") else float(o)))


def _stat(values) -> dict:
    """Mean and std of a group's per-seed values, with the values themselves (seed order), so a reading can
    recompute a spread or test a difference from a row."""
    return {**dict(zip(("mean", "std"), mean_std(values))), "values": [float(v) for v in values]}


def curves(m: dict) -> dict:
    """What a claim's figure draws, averaged over seeds (JSON-ready, so a results file draws it too):
    ``knn``: group → [[step, mean kNN accuracy]] (the dip); ``depth``: group → mean log₁₀ D_l per layer (the
    law)."""
    out = {}
    if "series" in m:  # group → per seed {step: kNN accuracy}; seeds share their checkpoint steps
        out["knn"] = {g: [[int(st), float(np.mean([r[st] for r in runs if st in r]))] for st in sorted(runs[0])]
                      for g, runs in m["series"].items()}
    if "depth" in m:  # group → per seed [D_l per layer]
        out["depth"] = {g: [float(v) for v in np.mean(np.log10(np.maximum(np.array(fz, dtype=float), 1e-300)), 0)]
                        for g, fz in m["depth"].items()}
    return out


def run(claims=None, *, task: str = "default", seeds=(0, 1, 2), changes: dict | None = None, cache_dir=None,
        progress: Callable | None = None, cancel=None, workers: int = 1, scale: str = "small",
        stop_after: float | None = None, on_note: Callable[[str], None] | None = None) -> list[dict]:
    """Train what the chosen claims need on ``task`` (finished runs answer from the cache) and return their rows.

    Args:
        claims: claim ids (default: all of `CLAIMS`).
        task: a task of `dpviz.tasks`.
        seeds: the seeds of every experiment (≥ 3 for a mean ± std).
        changes: fields set on every run (a smaller size to try the scorecard); rows read with the same.
        cache_dir: the store.
        progress: called with (runs done, runs in all, the claim id being run).
        cancel: a `threading.Event`; set, the scorecard stops after the current run (rows so far).
        workers: processes that train the runs first (`train`; 1: this process trains them).
        scale: the size (`claims.SCALES`): small, or a larger one the scale-sensitive claims are read at.
        stop_after: seconds after which the pass stops (None: never): the run in flight stops at its next
            step, stored cancelled with the snapshot of its last checkpoint, and the rows so far are returned.
            Every run resumes a stopped run of its configuration from its snapshot (`dpviz.training.resume`),
            so a pass cut into pieces (a time-limited job each) trains each step once. A run with no snapshot
            yet trains on to its first one before it stops (stopped earlier, the next piece would start it over
            and no piece would get further); ``on_note`` hears that said (default: a note on stderr).
        on_note: called with a sentence where ``stop_after`` waits for a run's first checkpoint.

    Every run the pass would train is checked first as it would be before training (`calibration.preview`):
    a run no configuration could take is a `ConfigError` before any of them trains.
    """
    from dpviz.runner import run as run_one
    from dpviz.store import Store
    from dpviz.sweeps import distinct_schedules
    from dpviz.training import calibration

    chosen = [REGISTRY[c] for c in (claims or REGISTRY)]
    todo = plan(chosen, seeds, task, changes, scale)  # a bad change is refused before the store opens (or is made)
    store = Store(cache_dir)
    total = sum(len(v) for g in todo.values() for v in g.values())
    if progress:
        progress(0, total, "checking")
    for cfg in distinct_schedules(pending(todo, store)):  # the whole pass, before any of it trains
        calibration.preview(cfg)
    deadline = None if stop_after is None else Deadline(stop_after, cancel or threading.Event(), store,
                                                        on_note or _say)
    cancel = deadline.cancel if deadline else cancel
    if workers > 1:
        train(pending(todo, store), workers=workers, cache_dir=store.root, progress=progress, cancel=cancel)
    done, rows, memo = 0, [], {}
    for claim in chosen:
        if claim.id not in todo:
            rows.append(unreadable_row(claim, task, scale))
            continue
        groups = {}
        for g, cfgs in todo[claim.id].items():
            groups[g] = []
            for cfg in cfgs:
                if cancel is not None and cancel.is_set() or deadline and deadline.due:
                    return rows
                key = cfg.to_json()
                try:
                    memo[key] = memo.get(key) or run_one(cfg, store=store, cancel=cancel, resume=True,
                                                         **(deadline.watch() if deadline else {}))
                except Cancelled:
                    return rows
                finally:
                    if deadline:
                        deadline.between()
                groups[g].append(memo[key])
                done += 1
                if progress:
                    progress(done, total, claim.id)
        rows.append(row(claim, store, groups, task, scale))
    return rows


class Deadline:
    """``stop_after`` of a pass: once the time is up, ``cancel`` is set, but not while the run in flight has no
    snapshot newer than where it started: stopped then, the next pass would go on from where this one began
    (or start over), and a pass shorter than a run's first checkpoint would never get further, leaving a stopped
    run each time. That run trains on to its next checkpoint first, and ``note`` says so once."""

    def __init__(self, seconds: float, cancel: threading.Event, store, note: Callable[[str], None]):
        self.cancel, self.store, self.note = cancel, store, note
        self.due, self.asked, self.run_id, self.saved = False, False, None, False
        self._lock = threading.Lock()
        timer = threading.Timer(seconds, self._expire)
        timer.daemon = True
        timer.start()

    def watch(self) -> dict:
        """The hooks of the run about to be asked for (`dpviz.runner.run`'s ``on_start``, ``on_checkpoint``)."""
        with self._lock:
            self.asked, self.run_id, self.saved = True, None, False
        return {"on_start": self._started, "on_checkpoint": self._checkpoint}

    def between(self) -> None:
        """The run asked for has returned (or stopped): the pass may stop at once."""
        with self._lock:
            self.asked = False
            self._stop()

    def _expire(self) -> None:
        with self._lock:
            self.due = True
            if not self._stop():
                self.note(f"stop-after: the time is up, but run {self.run_id or 'starting now'} has no checkpoint to "
                          "go on from yet; it trains on to its next checkpoint, then the pass stops (stopped now, "
                          "the next pass would start it over)")

    def _started(self, run_id: str) -> None:
        with self._lock:
            self.run_id = run_id

    def _checkpoint(self, run_id: str, step: int) -> None:
        with self._lock:
            self.saved = self.saved or (step > 0 and self.store.has_resume(run_id))
            self._stop()

    def _stop(self) -> bool:
        """Set ``cancel`` where the time is up and nothing would be lost; whether it is set."""
        if self.due and (not self.asked or self.saved):
            self.cancel.set()
        return self.cancel.is_set()


def _say(text: str) -> None:
    """A note of the pass on stderr, as dpviz's command line says its notes (a timer thread says it: a warning
    there could meet another thread's filters, `warnings.catch_warnings` being process-wide)."""
    import sys

    print(f"dpviz: note: {text}", file=sys.stderr)


def train(configs: list[RunConfig], *, workers: int, cache_dir, progress: Callable | None = None,
          cancel=None) -> int:
    """Train ``configs`` in the worker pool (`dpviz.runtime.pool`: at most one process per core and per run, each
    taking the next run from one queue, so runs of very different lengths spread evenly) into the store at
    ``cache_dir``; return how many finished.

    This process only watches (progress, cancel). The workers only fill the store; the scorecard then
    reads every row from it as one process would, so a run a worker could not finish trains again there
    (and its error is raised there), and a stopped pass resumes from the store either way.

    Args:
        configs: distinct runs (`pending`).
        workers: processes asked for.
        cache_dir: the store's folder.
        progress: called with (runs done, runs in all, "N workers").
        cancel: a `threading.Event`; set, the workers are stopped (their runs are left interrupted).
    """
    from functools import partial

    from dpviz.runtime import pool
    from dpviz.runner import run as run_one

    if not configs:
        return 0
    n, _ = pool.local_workers(workers, len(configs))
    label, finished = f"{n} worker{'s' * (n > 1)}", 0

    def heard(answered: int, error: str | None) -> None:
        nonlocal finished
        finished += error is None
        if progress:
            progress(answered, len(configs), label)

    pool.run(pool.Items(configs, partial(run_one, cache_dir=str(cache_dir), resume=True)), workers=n, here=False,
             progress=heard, cancel=cancel)
    return finished


def variant(changes: dict | None) -> str:
    """A name for the fields a scorecard changes on every run ("" for none; the device is no part of a run's
    hash and is left out): "bandmf-b2" for mechanism bandmf with 2 bands (bandmf-momentum-b2 likewise), else
    "field-value" words."""
    c = {k: v for k, v in (changes or {}).items() if k != "device"}
    mechanism = c.pop("mechanism", "dp-sgd")
    words = [f"{mechanism}-b{c.pop('bands', 1)}"] if mechanism != "dp-sgd" else []
    words += [f"{k}-{v}" for k, v in sorted(c.items())]
    return "_".join(re.sub(r"[^\w.-]", "", w) for w in words)


def stored_rows(claims=None, *, task: str = "default", seeds=(0, 1, 2), changes: dict | None = None,
                cache_dir=None, scale: str = "small") -> list[dict]:
    """The rows on ``task`` at ``scale`` whose runs are all finished in the store (and those of claims it
    cannot read), training nothing (for pages)."""
    from dpviz.store import Store

    store = Store(cache_dir)
    chosen = [REGISTRY[c] for c in (claims or REGISTRY)]
    todo = plan(chosen, seeds, task, changes, scale)
    out = []
    for claim in chosen:
        if claim.id not in todo:
            out.append(unreadable_row(claim, task, scale))
            continue
        groups = {}
        for g, cfgs in todo[claim.id].items():
            hits = [_finished(store, cfg) for cfg in cfgs]
            if any(h is None for h in hits):
                break
            groups[g] = hits
        else:
            try:
                out.append(row(claim, store, groups, task, scale))
            except Exception:  # an analysis not computable yet (e.g. a checkpoint being written)
                continue
    return out


def pending(todo: dict[str, dict[str, list[RunConfig]]], store) -> list[RunConfig]:
    """The distinct runs of a plan (claim → group → configs) not yet finished in ``store``, in plan order
    (runs several claims share appear once)."""
    seen = {cfg.to_json(): cfg for groups in todo.values() for cfgs in groups.values() for cfg in cfgs}
    return [cfg for cfg in seen.values() if _finished(store, cfg) is None]


def _finished(store, cfg: RunConfig) -> dict | None:
    from dpviz.runner import lookup

    hit = lookup(cfg, store)[2]
    return {**hit["summary"], "run_id": hit["run_id"]} if hit else None
