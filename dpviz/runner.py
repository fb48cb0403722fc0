"""`run(cfg)`: answer from the cache or train, and keep the store consistent."""

from __future__ import annotations

import threading
import time
import traceback
from typing import Callable

from . import engine, trainer
from .config import RunConfig
from .engine import Cancelled
from .store import Store


def run(cfg: RunConfig, *, cache_dir=None, store: Store | None = None, force: bool = False,
        progress: Callable | None = None, cancel: threading.Event | None = None,
        on_start: Callable[[str], None] | None = None,
        on_checkpoint: Callable[[str, int], None] | None = None) -> dict:
    """Run ``cfg`` (or return the stored result of an identical finished run).

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

    Returns:
        the run's summary, with ``cached`` telling whether it came from the store.

    Raises:
        ConfigError: bad input; nothing is stored in that case.
        Cancelled: ``cancel`` was set; the run is stored as cancelled.
    """
    store = store or Store(cache_dir)
    auto = {}
    if cfg.auto:  # learning rates chosen on a public proxy first: no private record is read
        from . import autotune

        fields = cfg.auto
        cfg, resolution = autotune.resolve(cfg, cache_dir=store.root, validate=engine.preview)
        auto = {"auto": {"fields": list(fields), **resolution.as_dict()}}
    h = cfg.hash()
    if not force and (hit := store.find_finished(h)):
        if on_start:
            on_start(hit["run_id"])
        return {**hit["summary"], **auto, "cached": True}  # this request's resolution
    prep = engine.prepare(cfg, cache_dir=store.root)  # every input error is raised here
    run_id = store.create_run(h, cfg.to_json(), prep.total_steps)
    store.update_run(run_id, started=time.time())
    if on_start:
        on_start(run_id)
    try:
        summary = trainer.train(prep, store=store, run_id=run_id, progress=progress, cancel=cancel,
                                on_checkpoint=on_checkpoint)
    except Cancelled:
        store.finish_run(run_id, "cancelled", error="cancelled by the user")
        raise
    except BaseException as e:
        store.finish_run(run_id, "failed", error=f"{type(e).__name__}: {e}")
        store.event(run_id, "traceback", traceback.format_exc())
        raise
    summary = {**summary, **auto}  # stored: `show --json` says where "auto" rates came from
    store.finish_run(run_id, "finished", summary=summary)
    return {**summary, "cached": False}


def summary_of(run: dict) -> dict:
    """The summary of a stored run; unfinished runs get their config and status."""
    base = run["summary"] or {"run_id": run["run_id"], "config": run["config"],
                              "config_hash": run["config_hash"], "test_accuracy": None,
                              "epsilon_spent": None}
    return {**base, "status": run["status"], "step": run["step"], "total_steps": run["total_steps"],
            "error": run["error"]}
