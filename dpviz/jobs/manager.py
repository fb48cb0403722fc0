"""Background runs: `JobManager` trains submitted configs in a thread pool, with progress, status and cancel.

Each `submit` becomes a `Job` (queued → running → finished, failed or cancelled) that a pool thread
trains through `runner.run`; its ``phase`` says what it waits for — queued (behind the workers), preparing,
searching (the public proxy search for "auto" rates, trial k of n), training (step of total) — and
`JobManager.state` turns it into one line and a fraction for pages: one worker per 2 cores by default. The
cores are shared among the jobs training now (`pool.threads_per_worker`, the worker pool's rule): a job
alone trains on every core, two at once on half each, and a job takes its new share at its next step when
another starts or ends. Threads, not the pool's processes: a
job's progress, phase and cancel event are fields the server's pages read and set, in its memory; a run
over several processes is a torchrun child (`processes`, through the pool's one torchrun launcher).
A page's own background work (an audit, a sweep of audits, the scorecard, a private search, the theory
overlay) runs the same way (`run_task`): on the manager's task threads, counted among the work that shares
the cores. So every piece of work a server runs takes one of two carriers of one design (`dpviz.runtime`):
these threads, where a page reads the progress in memory, and the worker pool's processes, where many runs
train from one queue (sweeps, searches, the scorecard's runs).
With ``analyses=True`` every new checkpoint's background analyses are queued beside the training
(`queue_analyses`): feature analyses in one thread, curvature in another, so neither delays
training or the other; a failed analysis is stored as a run event and never fails the run.

The dashboard holds one `JobManager` per server (`dashboard.state.job_manager`); benches and tests make
their own. The command line does not use one: ``python -m dpviz run`` trains in its own thread and leaves
the analyses to a detached ``analyze all`` process. Threads only call library code and write to the
store; readers (pages) poll `Job` fields or the store.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field

from dpviz.config import RunConfig
from dpviz.errors import Cancelled, StoreError
from dpviz.jobs import eta
from dpviz.runtime import pool
from dpviz.runtime.pool import threads_per_worker
from dpviz.runtime.threads import DaemonPool, end_process
from dpviz.runner import run, training_modules
from dpviz.store import Store


STOP_WAIT_S = 5.0  # how long a stopping process waits for its runs to reach a step boundary
TASK_THREADS = 5  # a server's page tasks at once: an audit, a sweep of audits, the scorecard, a private search
#                   and the theory overlay (a sixth waits for one to end)


@dataclass
class Job:
    """One submitted run as seen from outside its thread."""

    job_id: int
    cfg: RunConfig
    status: str = "queued"  # queued, running, finished, failed, cancelled
    phase: str = "queued"  # queued, preparing, searching, waiting, training, then the final status
    search: tuple[int, int] | None = None  # (k, n): trial k of n of the learning-rate search
    search_step: tuple[int, int] | None = None  # (s, S): step s of the current trial's S
    trial_started: float | None = None  # time.time() when the current trial began
    run_id: str | None = None
    step: int = 0
    total_steps: int | None = None
    last: dict = field(default_factory=dict)
    since: float | None = None  # time.time() of the latest progress: what the first step has taken so far
    pace: "eta.Pace | None" = field(default=None, repr=False)  # its measured pace, phase by phase (`dpviz.jobs.eta`)
    summary: dict | None = None
    error: str | None = None
    processes: int = 1  # > 1: one run over this many local processes (torchrun, `dpviz.training.distributed`)
    joined: int = 0  # later submits of the same config that joined this job instead of training it again
    cached: bool = False  # answered from the store: an identical run had finished before
    waited: bool = False  # answered by an identical run another process was training (it waited for it)
    threads: int = 0  # torch CPU threads its training uses now (its share of the cores: `_share_cores`)
    threads_seen: set = field(default_factory=set, repr=False)  # every count it trained with
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


@dataclass
class Task:
    """A page's background work (an audit, the scorecard, a private search…) on the job manager's threads.

    ``done``, ``total`` and ``label`` are its progress; ``threads`` its share of the cores now (it counts among
    the work training, as a job does); ``future`` carries its result or its error."""

    name: str
    cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    done: int = 0
    total: int = 0
    label: str | None = None
    threads: int = 0
    threads_seen: set = field(default_factory=set, repr=False)
    future: Future | None = field(default=None, repr=False)


class _Searching:
    """A job's search progress: ``(k, n)`` before trial k of n, ``.step(s, S)`` after each of its steps."""

    def __init__(self, job: Job, on_step=None):
        self.job, self.on_step = job, on_step

    def __call__(self, k: int, n: int) -> None:
        self.job.search, self.job.phase, self.job.search_step = (k, n), "searching", None
        self.job.trial_started = time.time()

    def step(self, s: int, total: int) -> None:
        self.job.search_step = (s, total)
        if self.on_step is not None:
            self.on_step()


def time_left(pace: eta.Pace | None, now: float | None = None) -> str | None:
    """The time a run has left at its measured ``pace`` (`dpviz.jobs.eta`): "about …" as `duration` writes it, "at
    least …" where a later phase's pace is not known yet; None before the current phase is measured (no
    promise before a measurement)."""
    est = pace.left(time.time() if now is None else now) if pace is not None else None
    if est is None:
        return None
    return f"about {duration(est.seconds)}" if est.complete else f"at least {duration(est.seconds)}"


def duration(seconds: float) -> str:
    """``seconds`` as a person reads a wait: "40 s", "3 min 20 s", "1 h 05 min"."""
    s = max(0, round(seconds))
    if s < 1:
        return "under 1 s"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class JobManager:
    """Runs submitted configs in a pool of threads (default: one per 2 cores)."""

    def __init__(self, cache_dir=None, max_workers: int | None = None, analyses: bool = True):
        """Args: analyses: queue every new checkpoint's background analyses (False: the caller runs them)."""
        self.store = Store(cache_dir)
        self.analyses = analyses
        workers = max_workers or max(1, (os.cpu_count() or 2) // 2)
        self.max_workers = workers  # runs that train at once
        self._training = 0  # jobs in `_work` now: they share the cores (`_share_cores`)
        self._lock = threading.Lock()
        self.job_threads = DaemonPool(workers, "dpviz-job")
        # Analyses of new checkpoints run beside training, one at a time, never blocking it.
        # At the lowest priority, and on one core while anything trains (`background`): a page's analysis
        # beside a training run made its steps four times slower.
        self.analysis_pool = DaemonPool(1, "dpviz-analysis", nice=19)
        self.curvature_pool = DaemonPool(1, "dpviz-curvature", nice=19)
        self.task_threads = DaemonPool(TASK_THREADS, "dpviz-task")  # the pages' tasks (`run_task`)
        self.jobs: dict[int, Job] = {}
        self.tasks: list[Task] = []
        self._ids = itertools.count(1)
        # when the process ends (a server stopped by SIGTERM or Ctrl-C: its main thread returns), before
        # Python joins threads: runs in flight are stored interrupted, resumable, within seconds
        getattr(threading, "_register_atexit", lambda f: None)(self._at_exit)

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
        job.future = self.job_threads.submit(self._work, job, force)
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
        return self._status(run_id) == "finished"  # deleted since (None): launching it again trains it again

    def state(self, job: Job) -> dict:
        """What ``job`` waits for, as {"phase", "text", "fraction"}: queued (its place in the queue), preparing,
        searching learning rates (trial k of n), training (step of total), cancelling, or how it ended."""
        if job.cancel_event.is_set() and not job.done:  # acknowledged at once; the run stops at its next step
            return {"phase": "cancelling", "text": "cancelling… (the run or search trial stops at its next step)",
                    "fraction": min(job.step / job.total_steps, 1.0) if job.total_steps else 0.0}
        if job.phase == "queued":
            waiting = sorted(j.job_id for j in self.jobs.values() if j.phase == "queued")
            k = waiting.index(job.job_id) + 1 if job.job_id in waiting else 1
            text = (f"queued ({k} of {len(waiting)} waiting; {self.max_workers} run"
                    f"{'s' * (self.max_workers > 1)} at a time)")
            return {"phase": "queued", "text": text, "fraction": 0.0}
        if job.phase == "preparing":
            return {"phase": "preparing", "text": "preparing (data, backbone, noise calibration)", "fraction": 0.0}
        if job.phase == "waiting":
            return {"phase": "waiting", "text": f"waiting: another process trains this configuration (run "
                    f"{job.run_id}); its result answers this launch", "fraction": 0.0}
        if job.phase == "searching":
            k, n = job.search
            text = f"searching learning rates on public data: trial {k} of {n}"
            if job.search_step and job.search_step[0] and job.trial_started:  # measured, not promised
                s, total = job.search_step
                per_step = (time.time() - job.trial_started) / s
                left = per_step * ((total - s) + (n - k) * total)
                text += f", step {s} of {total}, about {duration(left)} left"
            return {"phase": "searching", "text": text, "fraction": (k - 1) / n if n else 0.0}
        frac = min(job.step / job.total_steps, 1.0) if job.total_steps else 0.0
        if job.phase == "training" and not job.step and job.last.get("pass"):  # a pass over the data: counted
            what, done, total, spent = job.last["pass"]
            left = f", about {duration(spent / done * (total - done))} left" if done and done < total else ""
            return {"phase": "training", "text": f"before the first step: {what}, {done:,} of {total:,}{left}",
                    "fraction": 0.0}
        if job.phase == "training" and not job.step:  # a real backbone's first pass takes a while: say so
            took = f": {duration(time.time() - job.since)} so far" if job.since else ""
            return {"phase": "training", "text": "first step (the first forward and backward load and warm up "
                    f"the model; a pretrained backbone takes longest){took}", "fraction": 0.0}
        if job.phase == "training":
            left = time_left(job.pace)
            return {"phase": "training", "text": f"training (step {job.step} of {job.total_steps}"
                    f"{f', {left} left' if left else ''})", "fraction": frac}
        text = ("finished (trained once, by another process this launch waited for)" if job.waited else
                "finished (answered from the store: this configuration had trained before)") if job.cached else job.status
        return {"phase": job.phase, "text": text, "fraction": 1.0 if job.status == "finished" else frac}

    def _work(self, job: Job, force: bool) -> None:
        if job.cancel_event.is_set():  # cancelled while queued
            job.status = job.phase = "cancelled"
            return
        job.phase = "preparing"
        training_modules()  # before torch's threads are set: the first import of torch is here
        with self._lock:
            self._training += 1
        try:
            self._share_cores(job)
            self._train(job, force)
        finally:
            with self._lock:
                self._training -= 1

    def run_task(self, name: str, work, *, on_progress=None, cancel: threading.Event | None = None) -> Task:
        """Run a page's ``work(progress, cancel)`` on this manager's task threads, as a job runs: it counts among
        the work training now, so it and the jobs share the cores by one rule (`_share_cores`), and it takes
        its share again at every ``progress(done, total, label)`` it reports (``on_progress`` hears each)."""
        task = Task(name, cancel=cancel or threading.Event())
        self.tasks.append(task)
        task.future = self.task_threads.submit(self._task, task, work, on_progress)
        return task

    def _task(self, task: Task, work, on_progress):
        def progress(done, total, label=None):
            self._share_cores(task)
            task.done, task.total, task.label = done, total, label
            if on_progress is not None:
                on_progress(done, total, label)

        with self._lock:
            self._training += 1
        try:
            self._share_cores(task)
            return work(progress, task.cancel)
        finally:
            with self._lock:
                self._training -= 1

    def _share_cores(self, job: Job | Task) -> None:
        """Give ``job``'s thread its share of the cores, cores ÷ the jobs training now: every core alone, half
        each for two. Called in the job's own thread at its start and at every step or pass it reports:
        torch's CPU thread count is a setting of the calling thread (OpenMP's), so each job sets its own."""
        want = pool.threads_per_worker(max(1, self._training))
        if job.threads != want:
            import torch

            torch.set_num_threads(want)
            job.threads = torch.get_num_threads()
            job.threads_seen.add(job.threads)

    def _train(self, job: Job, force: bool) -> None:
        def progress(step, total, last):
            self._share_cores(job)
            job.step, job.total_steps, job.last, job.since = step, total, last, time.time()
            if job.pace is None and last.get("plan"):  # the pace is measured from the first step on
                job.pace = eta.Pace(phases=[tuple(p) for p in last["plan"]], eval_every=job.cfg.eval_every,
                                    prior=eta.prior(self.store, job.cfg))
            if job.pace is not None:
                job.pace.observe(step, job.since)

        def started(run_id):
            job.run_id, job.status, job.phase, job.since = run_id, "running", "training", time.time()

        searching = _Searching(job, lambda: self._share_cores(job))

        def waiting(run_id):
            job.run_id, job.phase = run_id, "waiting"

        try:
            if job.processes > 1:
                from dpviz.jobs import processes

                job.summary = processes.run(job, self.store, force=force, search_progress=searching,
                                            started=started)
            else:
                job.summary = run(job.cfg, store=self.store, force=force, progress=progress,
                                  cancel=job.cancel_event, on_start=started,
                                  on_checkpoint=self._unattended if self.analyses else None,
                                  search_progress=searching, on_wait=waiting)
            job.status, job.cached = "finished", bool(job.summary.get("cached"))
            job.waited = bool(job.summary.get("waited_for"))
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

    def background(self, pool: DaemonPool, fn, *args, **kwargs) -> Future:
        """Submit ``fn`` to an analysis ``pool``: it runs on one torch thread while any job or task trains
        (checked as it starts), on every core otherwise, so training keeps the cores it was given."""
        def work():
            import torch

            torch.set_num_threads(1 if self._training else threads_per_worker(1))
            return fn(*args, **kwargs)

        return pool.submit(work)

    def _unattended(self, run_id: str, step: int):
        return self.queue_analyses(run_id, step, unattended_only=True)

    def queue_analyses(self, run_id: str, step: int, unattended_only: bool = False) -> tuple[Future, Future]:
        """Queue a checkpoint's background analyses: feature analyses in the analysis thread,
        curvature (seconds per checkpoint) in its own thread so it never delays the feature views.
        ``unattended_only``: a training run's new checkpoint, nobody asked (`service.unattended`).
        Returns both futures (features, curvature): a page waits on them to stop polling."""
        from dpviz.analyses.service import analyze_checkpoint

        def work(kind):
            try:
                analyze_checkpoint(self.store, run_id, step, kind=kind, unattended_only=unattended_only)
            except Exception as e:  # noqa: BLE001 - an analysis failure must not touch the run
                self.store.event(run_id, "analysis-failed", f"step {step}: {type(e).__name__}: {e}")

        try:
            curvature = self.background(self.curvature_pool, work, "model")
            return self.background(self.analysis_pool, work, "features"), curvature
        except RuntimeError:  # pools shut down (the server stopping): the run itself must not fail for it;
            done = Future()   # a page computes a missing analysis on demand later
            done.set_result(None)
            return done, done

    def interrupt(self, timeout: float = STOP_WAIT_S) -> list[str]:
        """Stop every job as a process that is asked to end does: queued ones never start, training stops at
        its next step (waiting at most ``timeout`` seconds), and each run in flight is stored ``interrupted``
        — resumable from its last checkpoint with ``python -m dpviz run --resume`` — not cancelled by a user.
        Returns the interrupted run ids."""
        active = self.active()
        for job in active:
            job.cancel()
        wait_for([j.future for j in active if j.future is not None], timeout=timeout)
        out = []
        for job in active:
            if job.run_id and self.store.interrupt_stopped(job.run_id, "the server running it stopped before it "
                                                           "finished; `python -m dpviz run --resume` goes on from "
                                                           "its last checkpoint"):
                out.append(job.run_id)
        return out

    def _at_exit(self) -> None:
        """The process ends: runs in flight stored interrupted; in the dashboard's server (started by
        ``streamlit run``), a last plain line and an exit that no thread still in torch can turn into an
        abort (`threads.end_process`)."""
        stopped = self.interrupt()
        if "streamlit.web.bootstrap" in sys.modules:  # the server, not a test or notebook that made a manager
            said = (f"; {len(stopped)} run{'s' * (len(stopped) > 1)} stored interrupted ({', '.join(stopped)}): "
                    "`python -m dpviz run --resume` goes on from the last checkpoint" if stopped else "")
            end_process(f"dpviz: the dashboard stopped{said}.")

    def _status(self, run_id: str) -> str | None:
        try:
            return self.store.get_run(run_id)["status"]
        except StoreError:
            return None

    def cancel(self, job_id: int) -> None:
        self.jobs[job_id].cancel()

    def active(self) -> list[Job]:
        return [j for j in self.jobs.values() if not j.done]

    def shutdown(self, cancel: bool = True) -> None:
        if cancel:
            for j in self.active():
                j.cancel()
            for t in self.tasks:
                t.cancel.set()
        self.job_threads.shutdown(wait=True)  # cancelled runs stop at their next step
        # queued analyses are dropped when cancelling (pages recompute a missing one on demand); the one
        # running finishes, so no cache entry is half written
        self.analysis_pool.shutdown(wait=True, cancel_futures=cancel)
        self.curvature_pool.shutdown(wait=True, cancel_futures=cancel)
        self.task_threads.shutdown(wait=False, cancel_futures=cancel)
