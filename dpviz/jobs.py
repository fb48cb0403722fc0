"""Background runs: `JobManager` trains submitted configs in a thread pool, with progress, status and cancel.

Each `submit` becomes a `Job` (queued → running → finished, failed or cancelled) that a pool thread
trains through `runner.run`; its ``phase`` says what it waits for — queued (behind the workers), preparing,
searching (the public proxy search for "auto" rates, trial k of n), training (step of total) — and
`JobManager.state` turns it into one line and a fraction for pages: one worker per 2 cores by default, torch threads split so that workers ×
threads ≤ cores. With ``analyses=True`` every new checkpoint's background analyses are queued beside the
training (`queue_analyses`): feature analyses in one thread, curvature in another, so neither delays
training or the other; a failed analysis is stored as a run event and never fails the run.

The dashboard holds one `JobManager` per server (`dashboard.state.job_manager`); benches and tests make
their own. The command line does not use one: ``python -m dpviz run`` trains in its own thread and leaves
the analyses to a detached ``analyze all`` process. Threads only call library code and write to the
store; readers (pages) poll `Job` fields or the store.
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from .config import RunConfig
from .errors import Cancelled, StoreError
from .runner import run
from .store import Store


@dataclass
class Job:
    """One submitted run as seen from outside its thread."""

    job_id: int
    cfg: RunConfig
    status: str = "queued"  # queued, running, finished, failed, cancelled
    phase: str = "queued"  # queued, preparing, searching, training, then the final status
    search: tuple[int, int] | None = None  # (k, n): trial k of n of the learning-rate search
    run_id: str | None = None
    step: int = 0
    total_steps: int | None = None
    last: dict = field(default_factory=dict)
    summary: dict | None = None
    error: str | None = None
    processes: int = 1  # > 1: one run over this many local processes (torchrun, `dpviz.distributed`)
    joined: int = 0  # later submits of the same config that joined this job instead of training it again
    cached: bool = False  # answered from the store: an identical run had finished before
    cancel_event: threading.Event = field(default_factory=threading.Event, repr=False)
    future: Future | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.status in ("finished", "failed", "cancelled")

    def cancel(self) -> None:
        """Stop the job: a queued one never starts, a search stops between trials, training at the next step."""
        self.cancel_event.set()
        if self.future is not None and self.future.cancel():  # still queued: no thread will report it
            self.status = self.phase = "cancelled"

    def wait(self, timeout: float | None = None) -> dict | None:
        """Block until the job ends; return its summary (re-raising its error)."""
        self.future.result(timeout)
        return self.summary


class JobManager:
    """Runs submitted configs in a pool of threads (default: one per 2 cores)."""

    def __init__(self, cache_dir=None, max_workers: int | None = None, analyses: bool = True):
        """Args: analyses: queue every new checkpoint's background analyses (False: the caller runs them)."""
        self.store = Store(cache_dir)
        self.analyses = analyses
        workers = max_workers or max(1, (os.cpu_count() or 2) // 2)
        # torch threads × workers ≤ cores (oversubscribed OpenMP crawls); set by the first job, so that
        # a registry that only lists jobs (the dashboard's first page) never imports torch
        self.torch_threads = max(1, (os.cpu_count() or 1) // workers) if workers > 1 else None
        self.max_workers = workers  # runs that train at once
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="dpviz-job")
        # Analyses of new checkpoints run beside training, one at a time, never blocking it.
        self.analysis_pool = ThreadPoolExecutor(1, thread_name_prefix="dpviz-analysis")
        self.curvature_pool = ThreadPoolExecutor(1, thread_name_prefix="dpviz-curvature")
        self.jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)

    def submit(self, cfg: RunConfig, *, force: bool = False, processes: int = 1) -> Job:
        """Queue ``cfg``, or join the job of the same config that is queued, training or finished here
        (its ``joined`` counts the joins): one configuration never trains twice at once, which would spend
        its ε twice. ``force`` always queues a new job; ``processes`` > 1 trains it as one run over that many
        local processes."""
        if not force and (same := self.same(cfg)) is not None:
            same.joined += 1
            return same
        job = Job(next(self._ids), cfg, processes=max(1, int(processes)))
        self.jobs[job.job_id] = job
        job.future = self.pool.submit(self._work, job, force)
        return job

    def same(self, cfg: RunConfig) -> Job | None:
        """The newest job of ``cfg`` that is queued, running, or finished with its run still in the store."""
        for job in sorted(self.jobs.values(), key=lambda j: -j.job_id):
            if job.cfg != cfg or job.status in ("failed", "cancelled"):
                continue
            if not job.done or (job.run_id and self._finished(job.run_id)):
                return job
        return None

    def _finished(self, run_id: str) -> bool:
        try:
            return self.store.get_run(run_id)["status"] == "finished"
        except StoreError:  # deleted since: launching it again trains it again
            return False

    def state(self, job: Job) -> dict:
        """What ``job`` waits for, as {"phase", "text", "fraction"}: queued (its place in the queue), preparing,
        searching learning rates (trial k of n), training (step of total), or how it ended."""
        if job.phase == "queued":
            waiting = sorted(j.job_id for j in self.jobs.values() if j.phase == "queued")
            k = waiting.index(job.job_id) + 1 if job.job_id in waiting else 1
            text = (f"queued ({k} of {len(waiting)} waiting; {self.max_workers} run"
                    f"{'s' * (self.max_workers > 1)} at a time)")
            return {"phase": "queued", "text": text, "fraction": 0.0}
        if job.phase == "preparing":
            return {"phase": "preparing", "text": "preparing (data, backbone, noise calibration)", "fraction": 0.0}
        if job.phase == "searching":
            k, n = job.search
            return {"phase": "searching", "text": f"searching learning rates on public data ({k} of {n})",
                    "fraction": (k - 1) / n if n else 0.0}
        frac = min(job.step / job.total_steps, 1.0) if job.total_steps else 0.0
        if job.phase == "training":
            return {"phase": "training", "text": f"training (step {job.step} of {job.total_steps or '?'})",
                    "fraction": frac}
        text = "finished (answered from the store: this configuration had trained before)" if job.cached else job.status
        return {"phase": job.phase, "text": text, "fraction": 1.0 if job.status == "finished" else frac}

    def _work(self, job: Job, force: bool) -> None:
        if job.cancel_event.is_set():  # cancelled while queued
            job.status = job.phase = "cancelled"
            return
        job.phase = "preparing"
        if self.torch_threads:
            import torch

            torch.set_num_threads(self.torch_threads)

        def progress(step, total, last):
            job.step, job.total_steps, job.last = step, total, last

        def started(run_id):
            job.run_id, job.status, job.phase = run_id, "running", "training"

        def searching(k, n):
            job.search, job.phase = (k, n), "searching"

        try:
            if job.processes > 1:
                from . import processes

                job.summary = processes.run(job, self.store, force=force, search_progress=searching,
                                            started=started)
            else:
                job.summary = run(job.cfg, store=self.store, force=force, progress=progress,
                                  cancel=job.cancel_event, on_start=started,
                                  on_checkpoint=self._unattended if self.analyses else None,
                                  search_progress=searching)
            job.status, job.cached = "finished", bool(job.summary.get("cached"))
            if job.cached:  # no step reported: the row shows what the stored run reached
                job.step = job.total_steps = job.summary.get("total_steps") or 0
                job.last = {k: job.summary.get(k) for k in ("test_accuracy", "epsilon_spent")}
        except Cancelled:
            job.status = "cancelled"
        except BaseException as e:
            job.status, job.error = "failed", str(e)
            raise
        finally:
            job.phase = job.status

    def _unattended(self, run_id: str, step: int):
        return self.queue_analyses(run_id, step, unattended_only=True)

    def queue_analyses(self, run_id: str, step: int, unattended_only: bool = False) -> tuple[Future, Future]:
        """Queue a checkpoint's background analyses: feature analyses in the analysis thread,
        curvature (seconds per checkpoint) in its own thread so it never delays the feature views.
        ``unattended_only``: a training run's new checkpoint, nobody asked (`service.unattended`).
        Returns both futures (features, curvature): a page waits on them to stop polling."""
        from .analyses.service import analyze_checkpoint

        def work(kind):
            try:
                analyze_checkpoint(self.store, run_id, step, kind=kind, unattended_only=unattended_only)
            except Exception as e:  # noqa: BLE001 - an analysis failure must not touch the run
                self.store.event(run_id, "analysis-failed", f"step {step}: {type(e).__name__}: {e}")

        try:
            curvature = self.curvature_pool.submit(work, "model")
            return self.analysis_pool.submit(work, "features"), curvature
        except RuntimeError:  # pools shut down (the server stopping): the run itself must not fail for it;
            done = Future()   # a page computes a missing analysis on demand later
            done.set_result(None)
            return done, done

    def cancel(self, job_id: int) -> None:
        self.jobs[job_id].cancel()

    def active(self) -> list[Job]:
        return [j for j in self.jobs.values() if not j.done]

    def shutdown(self, cancel: bool = True) -> None:
        if cancel:
            for j in self.active():
                j.cancel()
        self.pool.shutdown(wait=True)  # cancelled runs stop at their next step
        # queued analyses are dropped when cancelling (pages recompute a missing one on demand); the one
        # running finishes, so no cache entry is half written
        self.analysis_pool.shutdown(wait=True, cancel_futures=cancel)
        self.curvature_pool.shutdown(wait=True, cancel_futures=cancel)
