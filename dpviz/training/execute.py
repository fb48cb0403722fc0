"""Run one concrete configuration: prepare → train → persist, the one path every trained run takes.

"Concrete" means every field is a value: a config with learning rates on "auto" is refused here
(choosing them trains other runs on public data, which is policy: `dpviz.autotune`, above this core,
and `dpviz.runner.run` resolves before it executes). `run` answers a configuration that is already
stored from the store and trains it otherwise; `train_unstored` trains without storing anything (an
audit's run, which is not the user's).

The store is passed in, never imported: the run core sits below the store in dpviz's layers.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any, Callable

from dpviz.training import devices
from dpviz.training import distributed
from dpviz.training import prepare
from dpviz.training import resume as resuming
from dpviz.training import loop
from dpviz.config import RunConfig
from dpviz.errors import Cancelled, ConfigError


def _concrete(cfg: RunConfig) -> None:
    if cfg.auto:
        raise ConfigError(cfg.auto[0], 'a number: this path runs concrete configs (dpviz.run resolves "auto" first)',
                          "auto")


def run(cfg: RunConfig, *, store, force: bool = False, extra: dict | None = None, progress: Callable | None = None,
        cancel: threading.Event | None = None, on_start: Callable[[str], None] | None = None,
        on_checkpoint: Callable[[str, int], None] | None = None, ahead=None, kind: str = "user",
        resume: bool | str = resuming.TAKE_OVER, on_wait: Callable[[str], None] | None = None,
        on_resume: Callable[[str, int], None] | None = None, auto_checkpoints: bool | None = None) -> dict:
    """The stored summary of ``cfg`` (``cached``: True), or train it, store it and return its summary.

    Args:
        cfg: a concrete configuration.
        store: the `dpviz.store.Store` that answers and keeps it.
        force: train even if an identical run is stored.
        extra: fields added to the stored summary (e.g. where "auto" rates came from).
        progress, cancel, on_start, on_checkpoint, ahead, on_wait, on_resume: as `dpviz.runner.run`.
        resume: as `dpviz.runner.run`.
        kind: who asks (`dpviz.store.KINDS`): "user", "trial" (a user's study) or "search" (an "auto"
            proxy search). The cache answers by config hash whatever the stored run's kind; a stored
            search run that answers a user or a study becomes theirs (`Store.claim`).
        auto_checkpoints: whether ``checkpoint_every`` = 0 gives the automatic checkpoints (each with a snapshot
            to go on from) or the start and the end only; None: as ``kind`` says, the start and the end only for
            a search run (nobody looks at a proxy search's trials, and one cut short is cheap to train again).

    Raises:
        ConfigError: bad input; nothing is stored then.
        Cancelled: ``cancel`` was set; the run is stored as cancelled.
    """
    _concrete(cfg)
    if (world := distributed.current()) is not None:
        return _run_distributed(cfg, world, store=store, force=force, extra=extra, progress=progress, cancel=cancel,
                                on_start=on_start, kind=kind, resume=resume, on_wait=on_wait, on_resume=on_resume)
    if not force and (hit := store.find_finished(cfg.hash())):
        return _answer(store, hit, kind, extra, on_start)
    prep = prepare.prepare(cfg, cache_dir=store.root, ahead=ahead)  # every input error is raised here
    run_id, state, answer = _claim(store, cfg, prep, kind, resume, force, extra, cancel=cancel, on_wait=on_wait,
                                   on_start=on_start, on_resume=on_resume)
    if answer:  # another request trained it meanwhile: its stored run answers this one
        return answer
    return _train_stored(prep, store, run_id, state, extra, progress=progress, cancel=cancel, on_start=on_start,
                         on_checkpoint=on_checkpoint,
                         auto_checkpoints=kind != "search" if auto_checkpoints is None else auto_checkpoints)


def _answer(store, hit: dict, kind: str, extra: dict | None, on_start=None, **more) -> dict:
    """The stored finished run ``hit`` as the answer to a request of ``kind`` (a search run becomes theirs)."""
    store.claim(hit["run_id"], kind, current=hit["kind"])
    if on_start:
        on_start(hit["run_id"])
    return {**hit["summary"], **(extra or {}), **more, "cached": True}


def _train_stored(prep, store, run_id: str, state, extra: dict | None, *, on_start=None, failed_note: str = "",
                  **train) -> dict:
    """Train ``run_id`` (from ``state`` when resumed) and store how it ended: finished with its summary (plus
    ``extra``: e.g. where "auto" rates came from), cancelled, or failed with the error (and ``failed_note``)."""
    if on_start:
        on_start(run_id)
    def queued():
        store.event(run_id, "queued", f"waiting for {devices.key(prep.device)}: another run or analysis is on it")

    try:  # on the device's one worker thread: the plans a GPU built for earlier runs serve this one
        summary = devices.on_device(prep.device, loop.train, prep, store=store, run_id=run_id, state=state,
                                    cancel_queued=train.get("cancel"), on_queue=queued, **train)
    except (Cancelled, KeyboardInterrupt):  # a second Ctrl-C on the command line interrupts at once
        store.finish_run(run_id, "cancelled", error="cancelled by the user")
        raise
    except BaseException as e:
        store.finish_run(run_id, "failed", error=f"{type(e).__name__}: {e}{failed_note}")
        store.event(run_id, "traceback", traceback.format_exc())
        raise
    summary = {**summary, **(extra or {})}
    store.finish_run(run_id, "finished", summary=summary)
    store.drop_resume(run_id)
    return {**summary, "cached": False}


def _claim(store, cfg: RunConfig, prep, kind: str, resume, force: bool, extra: dict | None, *, cancel=None,
           on_wait=None, on_start=None, on_resume=None) -> tuple[str | None, dict | None, dict | None]:
    """The run this request trains, claimed for ``cfg`` in the store (`Store.start_run`): (run id, the snapshot
    it goes on from or None, None). While another thread or process trains ``cfg``, wait for it (``on_wait(its
    run id)`` once); if it finishes, (None, None, its summary answering this request, with ``waited_for``); if
    it stops, claim again.

    ``resume``: True: go on with a stopped run of ``cfg`` from its last checkpoint where there is one (its
    snapshot); two resumes at once resume it once, the second waits. `resume.TAKE_OVER`: only an interrupted
    one (a run whose process stopped), and the run this request waited for however it stopped. An interrupted
    run (or the one waited for) with no snapshot yet trains again from step 0 as the same run where its seed
    draws the same steps (`resume.replays`). False: a new run from step 0.
    ``force``: a new run, whatever is stored or live. ``on_resume(run id, step)`` is called when a stopped run
    goes on.

    Raises:
        ConfigError: the stopped run's snapshot does not fit ``prep`` (its training records or schedule changed:
            `resume.mismatch`); raised before anything is stored, so the stopped run can still go on later."""
    waited = None
    while True:
        statuses = resuming.STOPPED if resume is True else (resuming.TAKE_OVER,)
        found = _stopped(store, cfg, statuses, prep, waited) if resume and not force else None
        reopen = (found[0], found[1]["step"] if found[1] else 0) if found else None
        run_id, other = store.start_run(cfg.hash(), cfg.to_json(), prep.total_steps, kind=kind, reopen=reopen,
                                        force=force)
        if run_id:
            store.update_run(run_id, started=time.time())
            going_on = found is not None and found[0] == run_id
            if going_on and on_resume is not None:
                on_resume(run_id, reopen[1])
            return run_id, found[1] if going_on else None, None
        if (hit := store.find_finished(cfg.hash())) is not None:
            return None, None, _answer(store, hit, kind, extra, on_start, **({"waited_for": waited} if waited else {}))
        if waited != other and on_wait:
            on_wait(other)
        waited = other
        store.wait_run(other, cancel=cancel)


def _stopped(store, cfg: RunConfig, statuses, prep, waited: str | None = None):
    """`resume.stopped` for ``cfg``: also the run this request ``waited`` for, however it stopped, and a stopped
    run with no snapshot from step 0 where ``cfg`` `resume.replays` its steps (None where it has none to go on
    from). Its refusal stands unless a run of ``cfg`` is live (one started with --fresh on the changed data, say)
    or finished while this request waited for it: `Store.start_run` then has this request wait for that run, or
    answers it with that run."""
    try:
        return resuming.stopped(store, cfg.hash(), statuses, prep, waited_for=waited, restart=resuming.replays(cfg))
    except ConfigError:
        if store.live_runs(cfg.hash()) or store.find_finished(cfg.hash()):
            return None
        raise


def _run_distributed(cfg: RunConfig, world, *, store, force, extra, progress, cancel, on_start, kind,
                     resume=resuming.TAKE_OVER, on_wait=None, on_resume=None) -> dict:
    """`run` as one rank of a distributed run (`dpviz.training.distributed`): rank 0 answers from the store or creates
    the run and alone writes it; every rank prepares (rank 0 first: it fills the caches the others read) and
    trains in step. Rank 0's summary records the world size and the backend; the others return theirs."""
    hit = None if force or world.rank else store.find_finished(cfg.hash())
    hit = world.share(hit and {**hit["summary"], **(extra or {}), "cached": True})
    if hit:
        return hit
    if world.rank:
        world.barrier()
    try:
        prep = prepare.prepare(cfg, cache_dir=store.root)
    finally:
        if not world.rank:
            world.barrier()
    run_id, state, answer = (None, None, None) if world.rank else _claim(store, cfg, prep, kind, resume, force, extra,
                                                                         cancel=cancel, on_wait=on_wait,
                                                                         on_resume=on_resume)
    if answer := world.share(answer):  # rank 0 waited for the same configuration's run: it answers every rank
        return answer
    run_id, resumed = world.share((run_id, state is not None))
    if world.rank:  # the snapshot from the store's file (rank 0 alone writes it; every rank reads it)
        state = store.load_resume(run_id) if resumed else None
        return loop.train(prep, store=None, run_id=run_id, auto_checkpoints=kind != "search", state=state)
    return _train_stored(prep, store, run_id, state, {**(extra or {}), "world_size": world.size,
                                                      "backend": world.backend},
                         on_start=on_start, progress=progress, cancel=cancel, auto_checkpoints=kind != "search",
                         failed_note=f" (rank 0 of {world.size}; a collective fails when another rank died)")


def train_unstored(cfg: RunConfig, *, cache_dir, canaries: Callable[[Any], Any] | None = None,
                   progress: Callable | None = None, cancel: threading.Event | None = None):
    """Train ``cfg`` and keep nothing in a store: returns (summary, the prepared run with its trained model).

    ``cache_dir``: where the pretrained backbones are cached. ``canaries``: an audit's canaries (see
    `prepare.prepare`).
    """
    _concrete(cfg)
    prep = prepare.prepare(cfg, cache_dir=cache_dir, canaries=canaries)
    return devices.on_device(prep.device, loop.train, prep, store=None, run_id="unstored", progress=progress,
                             cancel=cancel, cancel_queued=cancel), prep
