"""`run(cfg)`: resolve "auto" learning rates (policy), then execute the concrete run (`dpviz.training.execute`).

The public entry of a run for Python, the command line, the dashboard and every study; `lookup` is the
one resolve-then-look-up that cached answers, the scorecard and the audit pages share.
"""

from __future__ import annotations

import threading
from typing import Callable

from dpviz.config import RunConfig
from dpviz.runtime.imports import IMPORTS
from dpviz.store import Store


def training_modules():
    """The modules a run trains with, imported under one lock (`dpviz.runtime.imports.IMPORTS`, which also
    guards the accountants' own import and a first ``import opacus``): two threads' first imports at once
    fail on Python's per-module locks. Opacus itself is not among them: the default run never uses it."""
    with IMPORTS:
        from dpviz.training import calibration
        from dpviz.training import distributed
        from dpviz.training import execute
    return calibration, distributed, execute


def preview(cfg: RunConfig) -> dict:
    """What ``cfg`` implies before launch (σ, q, each phase's steps), checked as a run would check it but with
    nothing trained: `dpviz.training.calibration.preview`, for the forms and the command line. Neither torch
    nor `IMPORTS` is taken: the form shows it as the user edits, never behind a run's first import of torch."""
    from dpviz.training import calibration

    return calibration.preview(cfg)


def resolved(cfg: RunConfig, store: Store, *, search_ok: bool = True, validate=None, search_progress=None,
             cancel=None, rates: str = "search") -> tuple[RunConfig, dict]:
    """``cfg`` with its "auto" rates resolved on a public proxy (no private record is read), and the
    summary's ``auto`` entry; ``cfg`` keeps "auto" fields where ``search_ok`` is False and a search must train."""
    if not cfg.auto:
        return cfg, {}
    from dpviz import autotune

    fields = cfg.auto
    out, resolution = autotune.resolve(cfg, cache_dir=store.root, search_ok=search_ok, validate=validate,
                                       progress=search_progress, cancel=cancel, rates=rates)
    return out, {"auto": {"fields": list(fields), **resolution.as_dict()}}


def lookup(cfg: RunConfig, store: Store) -> tuple[RunConfig, dict, dict | None]:
    """Resolve, then look up by hash, training nothing and importing no torch: (the resolved config, its
    ``auto`` entry, the finished stored run or None). The config keeps "auto" where a search must train."""
    cfg, auto = resolved(cfg, store, search_ok=False)
    return cfg, auto, None if cfg.auto else store.find_finished(cfg.hash())


def cached(cfg: RunConfig, *, cache_dir=None, store: Store | None = None, kind: str = "user") -> dict | None:
    """The summary ``run(cfg)`` would answer from the store, or None when it would train — without
    importing torch (the command line answers a cached run in well under a second). As ``run``, it
    answers ``kind``'s request: a stored search run that answers it becomes ``kind``'s (`Store.claim`)."""
    store = store or Store(cache_dir)
    _, auto, hit = lookup(cfg, store)
    if hit:
        store.claim(hit["run_id"], kind, current=hit["kind"])
    return {**hit["summary"], **auto, "cached": True} if hit else None


def run(cfg: RunConfig, *, cache_dir=None, store: Store | None = None, force: bool = False,
        progress: Callable | None = None, cancel: threading.Event | None = None,
        on_start: Callable[[str], None] | None = None,
        on_checkpoint: Callable[[str, int], None] | None = None, ahead=None,
        search_progress: Callable[[int, int], None] | None = None, kind: str = "user",
        resume: bool | str = "interrupted", on_wait: Callable[[str], None] | None = None, rates: str = "search",
        on_resume: Callable[[str, int], None] | None = None) -> dict:
    """Run ``cfg`` (or return the stored result of an identical finished run): resolve, then execute.

    Args:
        cfg: the run's configuration; learning rates left on "auto" are resolved on a public proxy
            first (`dpviz.autotune`), and the summary's ``auto`` entry says what they became and from where.
        cache_dir: store location (default ``cache/`` or ``$DPVIZ_CACHE_DIR``).
        store: an open `Store` (overrides ``cache_dir``).
        force: train even if an identical run is stored.
        progress: called as ``progress(step, total_steps, last_metrics)``.
        cancel: an event that stops the run at the next step.
        on_start: called with the new run's id once it is stored.
        on_checkpoint: called as ``on_checkpoint(run_id, step)`` after each feature checkpoint.
        ahead: σ and the ε curve being computed in parallel (`dpviz.training.ahead.start`), if any.
        search_progress: called as ``search_progress(k, n)`` before the k-th of n trials of a proxy
            search for "auto" rates trains (a search is cancelled between trials by ``cancel``).
        kind: who launched it, as stored (`dpviz.store.KINDS`): "user" (a person) or "trial" (a study's
            trial); a proxy search's trials are "search" (`dpviz.autotune`, through `dpviz.training.execute.run`).
        resume: "interrupted" (the default): a run of ``cfg`` whose process stopped or died goes on from its
            last checkpoint, where it has one, instead of a second run training from step 0 (also one this
            request waited for); True: any stopped run (interrupted, cancelled, failed); False: start over.
            A resumed run spends the same ε as an uninterrupted one, on any number of processes
            (`dpviz.training.resume`); ``on_resume(run id, step)`` is called when one goes on.
        on_wait: called with a run id when another thread or process is training the same configuration:
            this request waits for it rather than train it a second time (`Store.start_run`), and its
            summary answers (``waited_for``); if it stops unfinished, this request trains.
        rates: "search" (an "auto" setting off the shipped grid is searched on public data) or "grid" (the
            nearest shipped grid entry's rates, no search; the ``auto`` entry's note says how far it is).

    Returns:
        the run's summary, with ``cached`` telling whether it came from the store.

    A configuration trains at most once at a time and, once finished, is answered from the store: its
    privacy budget is spent once. ``force`` trains it again and spends the budget again on the same data.

    Raises:
        ConfigError: bad input; nothing is stored in that case.
        Cancelled: ``cancel`` was set; the run is stored as cancelled.
    """
    calibration, distributed, execute = training_modules()  # torch: only when something trains

    store = store or Store(cache_dir)
    world = distributed.current()
    if world is None or world.rank == 0:  # a distributed run's rates: rank 0 resolves (it may search) for all
        cfg, auto = resolved(cfg, store, validate=calibration.preview, search_progress=search_progress, cancel=cancel,
                             rates=rates)
    if world is not None:
        d, auto = world.share((cfg.to_dict(), auto) if world.rank == 0 else None)
        cfg = RunConfig.from_dict(d)
    return execute.run(cfg, store=store, force=force, extra=auto, progress=progress, cancel=cancel,
                       on_start=on_start, on_checkpoint=on_checkpoint, ahead=ahead, kind=kind,
                       resume=resume, on_wait=on_wait, on_resume=on_resume)


def summary_of(run: dict, store: Store | None = None) -> dict:
    """The summary of a stored run. An unfinished private run also gets, given the ``store``,
    ``epsilon_recorded``: [step, ε] of its last recorded step. What it released after that step was
    not recorded, so the guarantee for an interrupted run is its budget, ``config["epsilon"]``."""
    base = run["summary"] or {"run_id": run["run_id"], "config": run["config"],
                              "config_hash": run["config_hash"], "test_accuracy": None,
                              "epsilon_spent": None}
    out = {**base, "kind": run.get("kind", "user"), "status": run["status"], "step": run["step"],
           "total_steps": run["total_steps"], "error": run["error"], "config_hash": run["config_hash"]}
    if run["summary"] is None and store is not None:
        eps = [(k, v) for k, v in store.metrics(run["run_id"], "epsilon").get("epsilon", []) if v is not None]
        out["epsilon_recorded"] = list(max(eps)) if eps else None
    return out
