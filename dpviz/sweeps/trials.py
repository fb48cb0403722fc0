"""Running a study's trials: the study as the worker pool's queue, the trials a killed worker left behind.

A worker takes a waiting trial with `Study.ask` and then writes its ``owner`` (`store.process_token`)
into it: two journal writes, so a worker killed between them leaves a RUNNING trial with no owner.
Every worker therefore registers its token in the study first (user attribute ``worker <token>``).
A RUNNING trial is an **orphan** when its owner is dead (a zombie counts as dead), or when it has no
owner and no other registered worker on this host is alive — or it has had none for
`OWNERLESS_GRACE_S` (workers on other machines cannot be checked from here). `recover` fails
orphans with the public `Study.tell` and enqueues every grid point that is neither finished nor
taken, so a relaunch runs each lost point again; a point whose run finished in the dpviz store before
the kill is then answered from the store by its config hash, not retrained.
"""

from __future__ import annotations

import math
import socket
import sys
import time
from datetime import datetime
from typing import Callable

import optuna

from dpviz.config import RunConfig
from dpviz.runtime import pool
from dpviz.store import Store, owner_alive, process_token

TS = optuna.trial.TrialState
REGISTERED = "worker "
OWNERLESS_GRACE_S = 120
"""A RUNNING trial without an owner for this long is an orphan whoever is registered (an owner is
written milliseconds after the ask)."""


def _eps(v) -> float:
    return math.inf if str(v).lower() in ("inf", "none") else float(v)


def params_of(t: optuna.trial.FrozenTrial) -> dict:
    """A trial's point: its parameters, or while it waits or runs, the ones it was enqueued with."""
    return t.params or t.system_attrs.get("fixed_params", {})


def point_key(params: dict, keys) -> tuple:
    return tuple(str(params.get(k)) for k in keys)


def config_of(study: optuna.Study, trial: optuna.Trial) -> RunConfig:
    base = RunConfig.from_dict(study.user_attrs["base"])
    space = study.user_attrs["space"]
    if study.user_attrs["kind"] != "tune":  # grid studies: every trial is an enqueued point
        values = {k: trial.suggest_categorical(k, v) for k, v in space.items()}
        return base.replace(**{k: (_eps(v) if k == "epsilon" else v) for k, v in values.items()})
    return base.replace(**{k: _suggest(trial, k, v) for k, v in space.items()})


def _suggest(trial: optuna.Trial, name: str, spec: list):
    lo, hi = spec
    if isinstance(lo, int) and isinstance(hi, int):
        return trial.suggest_int(name, lo, hi, log=hi / max(lo, 1) > 8)
    return trial.suggest_float(name, lo, hi, log=True)


def _here(owner: str) -> bool:
    return owner.split(":", 1)[0] == socket.gethostname()


def orphans(study: optuna.Study, me: str | None = None) -> list[optuna.trial.FrozenTrial]:
    """RUNNING trials whose worker is gone (see the module docstring); ``me`` is the caller's own token."""
    running = study.get_trials(deepcopy=False, states=(TS.RUNNING,))
    if not running:
        return []
    workers = [k[len(REGISTERED):] for k in study.user_attrs if k.startswith(REGISTERED)]
    others_live = any(owner_alive(w) for w in workers if w != me)
    out = []
    for t in running:
        owner = t.user_attrs.get("owner")
        if owner:
            lost = not owner_alive(owner)
        else:
            age = (datetime.now() - (t.datetime_start or datetime.now())).total_seconds()
            lost = not others_live or age > OWNERLESS_GRACE_S
        if lost:
            out.append(t)
    return out


def recover(study: optuna.Study) -> int:
    """Fail the orphans, then enqueue every grid point neither finished nor taken; returns the orphans."""
    lost = orphans(study, process_token())
    for t in lost:
        study.tell(t.number, state=TS.FAIL, skip_if_finished=True)  # another recoverer may be first
    points = study.user_attrs.get("points")
    if points is not None:
        enqueue_missing(study, points)
    return len(lost)


def enqueue_missing(study: optuna.Study, points: list[dict]) -> int:
    keys = sorted({k for p in points for k in p})
    taken = {point_key(params_of(t), keys) for t in study.get_trials(deepcopy=False)
             if t.state in (TS.COMPLETE, TS.RUNNING, TS.WAITING)}
    n = 0
    for p in points:
        if point_key(p, keys) not in taken:
            study.enqueue_trial(p)
            taken.add(point_key(p, keys))
            n += 1
    return n


def held_elsewhere(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """RUNNING trials that another live process on this host (or a worker not yet owning it) holds."""
    lost = {t.number for t in orphans(study, process_token())}
    return [t for t in study.get_trials(deepcopy=False, states=(TS.RUNNING,))
            if t.number not in lost and _here(t.user_attrs.get("owner") or socket.gethostname())]


def _spent(study: optuna.Study) -> bool:
    """A search's trial budget is spent (shared by all workers)."""
    return len(study.get_trials(deepcopy=False, states=(TS.COMPLETE, TS.RUNNING))) >= study.user_attrs["n_trials"]


def _next_trial(study: optuna.Study, me: str) -> optuna.Trial | None | bool:
    """The next trial to run, None when there is none, False when the popped one was not to run."""
    grid = study.user_attrs["kind"] != "tune"
    if (grid and not study.get_trials(deepcopy=False, states=(TS.WAITING,))) or (not grid and _spent(study)):
        return None
    trial = study.ask()
    trial.set_user_attr("owner", me)  # at once: until then only the registry tells it from an orphan
    if not grid:
        return trial
    frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
    if "fixed_params" not in frozen.system_attrs:  # another worker took the last point
        study.tell(trial, state=TS.FAIL)
        return None
    keys, mine = sorted(frozen.system_attrs["fixed_params"]), params_of(frozen)
    if any(t.number < trial.number and t.state in (TS.COMPLETE, TS.RUNNING)
           and point_key(params_of(t), keys) == point_key(mine, keys) for t in study.get_trials(deepcopy=False)):
        trial.set_user_attr("duplicate", True)  # two relaunches enqueued it at once: the older trial runs it
        study.tell(trial, state=TS.FAIL)
        return False
    return trial


class Trials(pool.Source):
    """A study as the pool's queue (`dpviz.runtime.pool`): the next trial is the next `Study.ask` in its
    storage, so workers here, on other machines and after a relaunch share one queue. Its workers are
    ``python -m dpviz worker`` programs, which train with `dpviz.runner.run` (a user's study)."""

    def __init__(self, study: optuna.Study, *, run: Callable | None, cache_dir=None, kind: str = "trial",
                 storage_url=None):
        self.study, self.train, self.cache_dir, self.kind, self.storage_url = study, run, cache_dir, kind, storage_url

    def command(self, threads: int) -> list[str]:
        return [sys.executable, "-m", "dpviz", *(["--cache-dir", str(self.cache_dir)] if self.cache_dir else []),
                "worker", "--study", self.study.study_name, "--threads", str(threads),
                *(["--storage", self.storage_url] if self.storage_url else [])]

    def open(self) -> None:
        """Register this worker before any ask (see the module docstring), then recover orphans."""
        self.store, self.me = Store(self.cache_dir), process_token()
        if REGISTERED + self.me not in self.study.user_attrs:
            self.study.set_user_attr(REGISTERED + self.me, time.time())
        recover(self.study)

    def take(self) -> optuna.Trial | None:
        while (trial := _next_trial(self.study, self.me)) is False:
            pass
        return trial

    def run(self, trial: optuna.Trial) -> dict:
        return _run_trial(self.study, trial, self.store, self.train, self.kind)


def work(study: optuna.Study, *, run: Callable, cache_dir=None, max_trials: int | None = None,
         kind: str = "trial") -> list[dict]:
    """Run trials of ``study`` in this process until none is waiting (or the search's budget is
    spent, or ``max_trials`` ran); orphans are recovered first.

    ``run(cfg, store=store)`` trains (or answers from the store) one trial's config and returns its
    summary: `dpviz.runner.run` for a user's study, `dpviz.training.execute.run` for a proxy search of `auto`
    (passed in, so studies sit below the runner and the policy that uses them). ``kind``: what the stored
    runs are (`dpviz.store.KINDS`), passed to ``run``: "trial", or "search" for a proxy search."""
    return pool.serve(Trials(study, run=run, cache_dir=cache_dir, kind=kind), limit=max_trials)


def _run_trial(study: optuna.Study, trial: optuna.Trial, store: Store, run: Callable, kind: str) -> dict:
    try:
        s = run(config_of(study, trial), store=store, kind=kind)
    except Exception as e:
        trial.set_user_attr("error", f"{type(e).__name__}: {e}")
        study.tell(trial, state=TS.FAIL, skip_if_finished=True)
        raise
    trial.set_user_attr("summary", {k: s.get(k) for k in ("run_id", "test_accuracy", "test_loss", "epsilon_spent",
                                                          "cached", "trainable_fraction", "private", "delta",
                                                          "phases")})  # the last three: what the trial cost
    study.tell(trial, s["test_accuracy"], skip_if_finished=True)  # failed as an orphan meanwhile: the store keeps it
    return s


def start_workers(study: optuna.Study, *, workers: int, cache_dir=None, storage_url=None,
                  threads: int | None = None) -> list:
    """``workers`` worker programs on ``study`` that outlive this process (the dashboard's launch); the
    Popen objects."""
    return pool.start(Trials(study, run=None, cache_dir=cache_dir, storage_url=storage_url), workers, threads)


def run_local(study: optuna.Study, *, run: Callable, workers: int, cache_dir=None, storage_url=None,
              poll_s: float = 2.0) -> int:
    """Run ``study`` here in the pool's ``workers`` processes (this one among them); then recover what they
    left and wait for trials other live processes on this host hold. Returns how many workers failed."""
    failed = pool.run(Trials(study, run=run, cache_dir=cache_dir, storage_url=storage_url), workers=workers)
    return failed or _settle(study, run, cache_dir, poll_s)


def _settle(study: optuna.Study, run: Callable, cache_dir, poll_s: float) -> int:
    """Run what waits (a worker killed meanwhile left it) until nothing waits or runs on this host."""
    said = False
    while True:
        try:
            if work(study, run=run, cache_dir=cache_dir):
                continue
        except Exception:  # noqa: BLE001 - the trial is marked failed in the study; a relaunch resumes it
            return 1
        held = held_elsewhere(study)
        if not held:
            return 0
        if not said:
            print(f"dpviz: note: waiting for {len(held)} trial(s) that other processes on this host run",
                  file=sys.stderr)
            said = True
        time.sleep(poll_s)
