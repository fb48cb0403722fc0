"""`run(cfg)`: resolve "auto" learning rates (policy), then execute the concrete run (`dpviz.training.execute`).

The public entry of a run for Python, the command line, the dashboard and every study; `lookup` is the
one resolve-then-look-up that cached answers, the scorecard and the audit pages share.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Callable

from dpviz.config import RunConfig
from dpviz.runtime.imports import IMPORTS
from dpviz.store import Store


class PrivacyBudgetWarning(Warning):
    """A forced run (``run(..., force=True)``) spends its configuration's privacy budget again: another run of the
    same configuration is stored, or trained while it did. A warning, not a log line: it is the caller's own
    choice that causes it, one they can change (leave ``force`` out), and Python shows it by default; a filter
    turns it into an error where no budget may be spent twice. A category of its own, not a `UserWarning`: the
    filters that quiet libraries' UserWarnings (dpviz's own around Opacus's accountants among them) leave it
    shown."""


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


def check(cfg: RunConfig) -> bool:
    """What a run refuses before its σ is calibrated, from the catalogue alone (`dpviz.training.calibration.check`):
    True where all of it was checked, False for a folder of the user's data (checked as the run loads it)."""
    from dpviz.training import calibration

    return calibration.check(cfg)


def bands_trade(cfg: RunConfig, prev: dict, plain: dict) -> dict:
    """What BandMF's bands cost and buy at ``cfg``'s budget (`dpviz.training.calibration.bands_trade`), from its
    `preview` and the `preview` of the same config under DP-SGD."""
    from dpviz.training import calibration

    return calibration.bands_trade(cfg, prev, plain)


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
        on_resume: Callable[[str, int], None] | None = None, on_force: Callable[[str], None] | None = None,
        auto_checkpoints: bool | None = None) -> dict:
    """Run ``cfg`` (or return the stored result of an identical finished run): resolve, then execute.

    Args:
        cfg: the run's configuration; learning rates left on "auto" are resolved on a public proxy
            first (`dpviz.autotune`), and the summary's ``auto`` entry says what they became and from where.
        cache_dir: store location (default ``cache/`` or ``$DPVIZ_CACHE_DIR``).
        store: an open `Store` (overrides ``cache_dir``).
        force: train even if an identical run is stored, or trains now (and spend the budget again).
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
        on_force: where a forced private run says that it spends the budget again (`Forced`): called with the
            sentence; default: a `PrivacyBudgetWarning`.
        auto_checkpoints: as `dpviz.training.execute.run` (None: as ``kind`` says).

    Returns:
        the run's summary, with ``cached`` telling whether it came from the store.

    A configuration trains at most once at a time and, once finished, is answered from the store: its
    privacy budget is spent once. ``force`` trains it again and spends the budget again on the same data, and
    says so (``on_force``) once another run of it is stored or training, when this run starts or as it ends.

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
    forced = Forced(store, cfg, on_force or _warn) if force and cfg.private and (world is None or world.rank == 0) \
        else None
    try:
        return execute.run(cfg, store=store, force=force, extra=auto, progress=progress, cancel=cancel,
                           on_start=forced.started(on_start) if forced else on_start, on_checkpoint=on_checkpoint,
                           ahead=ahead, kind=kind, resume=resume, on_wait=on_wait, on_resume=on_resume,
                           auto_checkpoints=auto_checkpoints)
    finally:
        if forced:
            forced.ended()


class Forced:
    """What a forced private run says about the budget it spends again, whatever the path and the timing: when
    it starts, if another run of its configuration is stored or training; else as it ends, if another (forced)
    run of it started meanwhile. The store's transaction that claims the run (`Store.start_run`) lets a forced
    run through whatever it finds, so two forced runs started together both train; each says so here."""

    def __init__(self, store: Store, cfg: RunConfig, say: Callable[[str], None]):
        self.store, self.cfg, self.say = store, cfg, say
        self.run_id: str | None = None
        self.said = False

    def started(self, on_start: Callable[[str], None] | None) -> Callable[[str], None]:
        def started(run_id: str) -> None:
            self.run_id = run_id
            self._check(ending=False)
            if on_start is not None:
                on_start(run_id)
        return started

    def ended(self) -> None:
        if self.run_id is not None and not self.said:
            self._check(ending=True)

    def _check(self, ending: bool) -> None:
        others = [r for r in self.store.trainings().get(self.cfg.hash(), []) if r != self.run_id]
        if not others:
            return
        other = others[0]
        cost = f"spends its privacy budget (ε = {self.cfg.epsilon:g}) again on the same private data"
        if ending:
            text = f"run {other} of this configuration trained while forced run {self.run_id} did; {self.run_id} {cost}"
        elif self.store.known(other)["status"] == "finished":
            text = f"this configuration is stored already (run {other}); training it again (run {self.run_id}) {cost}"
        else:
            text = (f"run {other} of this configuration is training now; a second run ({self.run_id}) trains beside "
                    f"it and {cost}")
        self.said = True
        self.say(text)


def _warn(text: str) -> None:
    """A `PrivacyBudgetWarning` attributed to the caller's line (the first frame outside dpviz)."""
    warnings.warn(text, PrivacyBudgetWarning, stacklevel=_outside_dpviz())


def _outside_dpviz() -> int:
    """The ``stacklevel`` of the innermost frame outside the dpviz package, as seen from `_warn`'s caller."""
    here, frame, level = os.path.dirname(os.path.abspath(__file__)), sys._getframe(2), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here + os.sep):
        frame, level = frame.f_back, level + 1
    return level


def summary_of(run: dict, store: Store | None = None) -> dict:
    """The summary of a stored run. An unfinished private run also gets, given the ``store``,
    ``epsilon_recorded``: [step, ε] of its last recorded step. What it released after that step was
    not recorded, so the guarantee for an interrupted run is its budget, ``config["epsilon"]``."""
    base = run["summary"] or {"run_id": run["run_id"], "config": run["config"],
                              "config_hash": run["config_hash"], "test_accuracy": None,
                              "epsilon_spent": None}
    out = {**base, "kind": run.get("kind", "user"), "status": run["status"], "step": run["step"],
           "total_steps": run["total_steps"], "error": run["error"], "config_hash": run["config_hash"]}
    if run.get("summary_hash") == "unhashed":  # stored before summaries were hashed: an edit cannot be told
        out["summary_hash"] = "unhashed"
    if run["summary"] is None and store is not None:
        eps = [(k, v) for k, v in store.metrics(run["run_id"], "epsilon").get("epsilon", []) if v is not None]
        out["epsilon_recorded"] = list(max(eps)) if eps else None
    return out
