"""Running a study: plan its runs on a task, train each configuration once (the store answers the rest), read
each finished run's numbers into its results file, and stop between runs when asked.

A stopped study resumes: the results file says which (cell, seed, configuration) are read already, the store
holds the runs finished and the snapshot of a run stopped mid-way (`dpviz.training.resume`). With
``keep="results"`` a finished run's step files are pruned once its numbers are read
(`dpviz.store.Store.prune_files`), so what a study needs from one piece to the next is its results file and
the store's database plus the unfinished run's snapshot: tens of MiB, not the GiB of every checkpoint.
"""

from __future__ import annotations

import json
import shlex
import sys
import threading

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from dpviz.errors import Cancelled, ConfigError
from dpviz.studies import results as _results
from dpviz.studies.base import Study

if TYPE_CHECKING:  # a plugin registers a study while dpviz itself is importing: no config import at the top
    from dpviz.config import RunConfig

KEEP = ("all", "results")
"""What a study keeps of a finished run: ``all`` (its checkpoints' features and weights, for the pages), or
``results`` (its row, summary and metrics; the step files pruned once its numbers are read)."""


@dataclass(frozen=True)
class Item:
    """One run of a study: its cell, its seed, its configuration."""

    cell: dict
    seed: int
    config: RunConfig


def _sized(task: str, scale: str | None, fields: dict) -> dict:
    """``fields`` at the scorecard's size ``scale`` of ``task`` (None: the task's own size): the size's data and
    epochs, and a checkpoint interval ``every`` times longer where the size says so."""
    if not scale:
        return fields
    from dpviz.reproduce import SCALES, size_fields

    if scale not in SCALES:
        raise ConfigError("scale", f"one of {', '.join(SCALES)}", scale)
    if scale != "small" and task not in SCALES[scale]:
        raise ConfigError("scale", f"a size {task} has (it has: small"
                          + "".join(f", {s}" for s in SCALES if s != "small" and task in SCALES[s]) + ")", scale)
    every = SCALES[scale].get(task, {}).get("every", 1)
    out = {**fields, **size_fields(task, scale)}
    if out.get("checkpoint_every", 0) > 0:
        out["checkpoint_every"] *= every
    return out


def plan(study: Study, *, task: str = "default", scale: str | None = None, seeds=(0, 1, 2),
         sets: dict | None = None, vary: dict | None = None) -> list[Item]:
    """Every run of ``study`` on ``task``: seeds outermost (a study cut short leaves whole seeds), then cells.
    ``sets``: fields set on every run, last (a user's data folder, the device, a smaller size); a field no
    `RunConfig` has, or a value it refuses, is one `ConfigError` before anything trains."""
    from dpviz import tasks

    tasks.task(task, "task")
    if not seeds:
        raise ConfigError("seeds", "at least one seed", "none")
    cells = study.cells(vary)
    varied = {k for cell in cells for k in study.fields(cell)}
    if clash := sorted(varied & set(sets or {})):
        raise ConfigError("set", f"fields no axis of this study sets ({', '.join(clash)} vary from cell to cell: "
                          f"--vary AXIS=V1,V2 picks their values)", clash[0])
    out = []
    for seed in seeds:
        for cell in cells:
            fields = _sized(task, scale, {**study.base, **study.fields(cell)})
            cfg = tasks.config(task, **{**fields, "seed": int(seed), **(sets or {})})
            out.append(Item(cell, int(seed), _tested_less(cfg, task, scale, sets)))
    return out


def _tested_less(cfg: RunConfig, task: str, scale: str | None, sets: dict | None) -> RunConfig:
    """A run of a larger size tested ``every`` times less often than at small, as the scorecard's are
    (`dpviz.reproduce.at_scale`), so a study and the scorecard share runs there, and a long run does not spend
    a third of its time on test passes; an ``eval_every`` the user set stays."""
    from dpviz.reproduce.claims import ONLY_PHASE_ENDS, SCALES

    every = SCALES.get(scale or "small", {}).get(task, {}).get("every", 1)
    if every == 1 or "eval_every" in (sets or {}) or cfg.eval_every >= ONLY_PHASE_ENDS:
        return cfg
    return cfg.replace(eval_every=cfg.eval_every * every)


def set_words(sets: dict | None) -> str:
    """`` --set FIELD=VALUE …`` as the command line takes fields set on every run ("" for none)."""
    if not sets:
        return ""
    return " --set " + " ".join(shlex.quote(f"{k}={v if isinstance(v, str) else json.dumps(v)}")
                                for k, v in sets.items())


def command_line(study: str, task: str, scale, seeds, sets, vary, keep) -> str:
    """The command that runs this study again, as the command line takes it."""
    out = f"python -m dpviz study run {study} --task {task}"
    out += f" --scale {scale}" if scale else ""
    out += " --seeds " + " ".join(str(s) for s in seeds)
    out += set_words(sets)
    if vary:
        out += " --vary " + " ".join(f"{k}=" + ",".join(_results._show(x) for x in v) for k, v in vary.items())
    return out + (f" --keep {keep}" if keep != "all" else "")


def run(study: Study, *, task: str = "default", scale: str | None = None, seeds=(0, 1, 2),
        sets: dict | None = None, vary: dict | None = None, cache_dir=None, keep: str = "all",
        stop_after: float | None = None, progress: Callable | None = None, cancel: threading.Event | None = None,
        on_note: Callable[[str], None] | None = None, command: str | None = None,
        rates: str = "grid") -> _results.Results:
    """Run ``study`` on ``task`` and return its results (written to ``<store>/studies/`` after every run).

    Args:
        study: a study (`dpviz.studies.get` finds a registered one by name).
        task: a task of `dpviz.tasks`; a user's own data is ``sets={"dataset": …, "data_dir": …}``.
        scale: the scorecard's size of the task (`dpviz.reproduce.SCALES`), or None for the task's own.
        seeds: the seeds of every cell (≥ 3 for a mean ± sd the readings can judge by).
        sets: fields set on every run (after the study's and the size's).
        vary: axis → values, in place of the study's defaults.
        cache_dir: the store.
        keep: "all", or "results" to prune each finished run's step files once its numbers are read.
        stop_after: seconds after which the study stops between runs (a run in flight trains on to its first
            checkpoint first, so the next piece goes on from it: `dpviz.reproduce.scorecard.Deadline`).
        progress: called with (runs done, runs in all, what is running).
        cancel: a `threading.Event`; set, the study stops after the run in flight stops.
        on_note: hears a cell that cannot run on this task, and the deadline's notes (default: stderr).
        command: how this study was asked for, for its provenance (default: the command line that ran it).
        rates: how "auto" rates resolve: "grid" (the nearest shipped grid entry, no search) or "search".
    """
    from dpviz.reproduce.scorecard import Deadline
    from dpviz.runner import run as run_one
    from dpviz.store import Store
    from dpviz.training import calibration

    if keep not in KEEP:
        raise ConfigError("keep", f"one of {', '.join(KEEP)}", keep)
    items = plan(study, task=task, scale=scale, seeds=seeds, sets=sets, vary=vary)
    note = on_note or _say
    refused = _check(items, calibration, note)
    store = Store(cache_dir)
    res = _results.load(study.name, task, scale, sets, store_root=store.root, shipped=False)
    res.axes = {k: list(v) for k, v in study.axis_values(vary).items()}
    res.seeds = sorted({*res.seeds, *map(int, seeds)})
    command = command or command_line(study.name, task, scale, seeds, sets, vary, keep)
    todo = [it for it in items if it.config.hash() not in refused]
    res.refused = {_results.cell_key(it.cell): refused[it.config.hash()] for it in items
                   if it.config.hash() in refused}
    total, done = len(todo), 0
    deadline = None if stop_after is None else Deadline(stop_after, cancel or threading.Event(), store, note)
    cancel = deadline.cancel if deadline else cancel
    hashes = [it.config.hash() for it in todo]
    last = {h: i for i, h in enumerate(hashes)}  # config hash → the last item that reads its run
    trained: dict[str, str] = {}  # config hash → the run this study trained, pruned after the last cell reading it
    for i, (it, h) in enumerate(zip(todo, hashes)):
        if res.done(it.cell, it.seed, h):
            done += 1
            continue
        if progress:
            progress(done, total, _label(study, it))
        if cancel is not None and cancel.is_set() or deadline and deadline.due:
            break
        hooks = deadline.watch() if deadline else {}  # a cell that is more than one run finishes before a stop
        try:
            summary = (study.execute(it.cell, it.config, store, cancel) if study.execute else
                       run_one(it.config, store=store, cancel=cancel, resume=True, rates=rates, **hooks))
        except Cancelled:
            break
        finally:
            if deadline:
                deadline.between()
        if summary.get("status", "finished") != "finished":
            break
        values = study.measure(store, summary, it.config)
        res.add(it.cell, it.seed, run_id=summary["run_id"], config=h, values=values)
        res.provenance = _results.provenance(command, store, res.run_ids(), before=res.provenance)
        res = _results.save(res, store.root, private=[m.name for m in study.measures if m.private])
        if keep == "results" and _trained_here(summary, store):
            trained[h] = summary["run_id"]
        if h in trained and last[h] == i:
            store.prune_files(trained.pop(h))  # cells of one run (a study's kinds) read it before it goes
        done += 1
    if progress:
        progress(done, total, "done" if done == total else "stopped")
    return res


def _trained_here(summary: dict, store) -> bool:
    """Whether this study trained the run it read (not a run of the user's, or of another process, that the store
    answered with): only those does ``keep="results"`` prune."""
    return not summary.get("cached") and not summary.get("waited_for") and summary["run_id"] in {
        r["run_id"] for r in store.list_runs()}


def _check(items: list[Item], calibration, note) -> dict[str, str]:
    """Every run checked as it would be before training (`calibration.preview`); a configuration that cannot
    take this task (BandMF's b·q > 1 on a small batch) leaves out every cell that runs it, and is said:
    config hash → why."""
    refused, seen = {}, set()
    for it in items:
        h = it.config.hash()
        if h in seen:
            continue
        seen.add(h)
        try:
            calibration.preview(it.config)
        except ConfigError as e:
            refused[h] = str(e)
            note(f"{_cell_text(it.cell)} cannot run on this task: {e}")
    return refused


def _cell_text(cell: dict) -> str:
    return ", ".join(f"{k} = {_results._show(v)}" for k, v in cell.items())


def _label(study: Study, it: Item) -> str:
    return f"{study.name}: " + ", ".join(f"{k} {v}" for k, v in study.columns(it.cell).items()) + f", seed {it.seed}"


def stored(study: Study, *, task: str = "default", scale: str | None = None, sets: dict | None = None,
           cache_dir=None, shipped: bool = True) -> _results.Results:
    """The results of ``study`` read so far (the store's cells, then the shipped ones), training nothing."""
    from dpviz.store import Store

    _sized(task, scale, {})  # a size the task does not have: one line naming scale
    return _results.load(study.name, task, scale, sets, store_root=Store(cache_dir).root, shipped=shipped)


def counts(study: Study, *, task: str = "default", scale: str | None = None, seeds=(0, 1, 2),
           sets: dict | None = None, vary: dict | None = None, cache_dir=None) -> tuple[int, int]:
    """(runs read, runs in all) of the study as asked, from its results file: what a page shows before it runs."""
    from dpviz.store import Store

    items = plan(study, task=task, scale=scale, seeds=seeds, sets=sets, vary=vary)
    res = _results.load(study.name, task, scale, sets, store_root=Store(cache_dir).root, shipped=False)
    return sum(res.done(it.cell, it.seed, it.config.hash()) for it in items), len(items)


def _say(text: str) -> None:
    print(f"dpviz: note: {text}", file=sys.stderr, flush=True)


