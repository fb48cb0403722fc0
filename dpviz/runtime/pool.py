"""The worker pool that trains many configurations: sweeps and tunings, the proxy searches behind "auto"
learning rates, the reproduction scorecard and the dashboard's launches.

Why processes: on a CPU one run does not keep its cores busy (a batch of 64 does not keep two cores
busy), and torch's thread count is one setting per process, so runs sharing a process cannot each have
their share. N processes of ``cores ÷ N`` threads train more runs an hour than one process on every core
(``bench/bench_workers.py``), and a worker killed (kill -9) takes only its own run with it: the store and
the queue outlive it.

How threads are divided: `threads_per_worker` (cores ÷ workers, at least one) is the one rule. Every pool
worker, every rank of a torchrun child (`torchrun`) and each of the dashboard's `JobManager` threads (where
it runs more than one) trains with that many torch threads, so workers × threads ≤ cores (oversubscribed
OpenMP threads crawl).

Every worker runs `serve`: take the next item from one queue, train it, until the queue is empty. There
are two small sources of "next item", because two kinds of queue must exist:

* `Items`, a list of configurations (the scorecard): a counter the workers share hands out the next one.
  Its workers are children of this process, which watches them (progress, cancel).
* an Optuna study (`dpviz.sweeps.trials.Trials`): the study's storage is the queue (``Study.ask``),
  because workers on other machines, a relaunch after a kill and the dashboard's workers (which outlive
  its server) all take from it. Its workers are programs of their own (``python -m dpviz worker``).

`run` starts the workers (`start`), serves in this process too where asked, and waits. The pool imports
nothing of dpviz: what trains an item is passed in, so studies and the "auto" policy sit above it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import socket
import subprocess
import sys
import time
from typing import Callable

POLL_S = 1.0  # how often a watching process looks for answers and a cancel


def threads_per_worker(workers: int) -> int:
    """torch threads per worker so that threads × workers ≤ cores."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def thread_env(threads: int) -> dict:
    """The environment that gives a child process ``threads`` OpenMP/BLAS threads from its start."""
    return {k: str(threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def local_workers(requested: int | None, waiting: int) -> tuple[int, str | None]:
    """Worker processes for ``waiting`` items: min(requested, waiting, cores), and a note when capped."""
    cores = os.cpu_count() or 1
    n = max(1, min(requested or cores, waiting, cores))
    if requested is None or n >= requested or not waiting:  # nothing to run: nothing worth a note
        return n, None
    return n, (f"dpviz: note: {n} worker{'s' * (n > 1)} instead of {requested} "
               f"({waiting} trial{'s' * (waiting != 1)} to run on {cores} cores)")


class Source:
    """A queue of items and what trains one; ``command`` None: its workers are spawned children."""

    answers = None  # a queue of (item, error or None) a watching process reads (`Items`)

    def open(self) -> None:
        """Once per worker, before its first item."""

    def take(self):
        """The next item, or None when the queue is empty."""
        raise NotImplementedError

    def run(self, item):
        """Train ``item``; its summary."""
        raise NotImplementedError

    def command(self, threads: int) -> list[str] | None:
        """The argv of a worker program with ``threads`` threads, or None."""
        return None


class Items(Source):
    """A list as the queue: a counter shared by the workers hands each the next item; ``train(item)`` (a
    module-level function, as spawned children receive it by name) trains one. An item that fails is
    answered with its error and the worker goes on."""

    def __init__(self, items: list, train: Callable):
        ctx = mp.get_context("spawn")
        self.items, self.train = list(items), train
        self.next = ctx.Value("i", 0)
        self.answers = ctx.Queue()

    def take(self):
        with self.next.get_lock():
            i = self.next.value
            self.next.value = i + 1
        return i if i < len(self.items) else None

    def run(self, i):
        try:
            out = self.train(self.items[i])
        except Exception as e:  # noqa: BLE001 - answered; whoever reads the store finds the run missing
            self.answers.put((i, f"{type(e).__name__}: {e}"))
            return None
        self.answers.put((i, None))
        return out


def serve(source: Source, *, threads: int | None = None, limit: int | None = None) -> list:
    """What every worker runs: ``source``'s items one after another until none is left (or ``limit`` ran);
    their results. ``threads``: set this process's torch threads first (None: leave them)."""
    if threads:
        set_threads(threads)
    source.open()
    done = []
    while limit is None or len(done) < limit:
        item = source.take()
        if item is None:
            break
        done.append(source.run(item))
    return done


def start(source: Source, workers: int, threads: int | None = None) -> list:
    """``workers`` processes serving ``source``, each with ``threads`` torch threads (default: their share of
    the cores): programs of their own where the source names one, else spawned children (torch and its
    threads are not fork-safe) that end with this process."""
    threads = threads or threads_per_worker(workers)
    if workers < 1:
        return []
    argv = source.command(threads)
    if argv is not None:
        env = {**os.environ, **thread_env(threads)}
        return [subprocess.Popen(argv, env=env) for _ in range(workers)]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=serve, args=(source,), kwargs={"threads": threads}, daemon=True)
             for _ in range(workers)]
    for p in procs:
        p.start()
    return procs


def run(source: Source, *, workers: int, here: bool = True, progress: Callable | None = None,
        cancel=None) -> int:
    """Serve ``source`` with ``workers`` processes and wait for them; returns how many failed.

    Args:
        source: the queue and what trains an item.
        workers: processes in all, each with `threads_per_worker` (workers) torch threads.
        here: this process is one of them (a sweep pays one process start-up fewer, ≈ 3 s of imports);
            False: it only watches, so that it reports progress and stops the workers on ``cancel``.
        progress: called with (items answered, error or None) as the workers answer (`Items`).
        cancel: a `threading.Event`; set, the workers are stopped (their runs are left interrupted).
    """
    threads = threads_per_worker(workers)
    procs = start(source, workers - here, threads)
    failed = 0
    if here:
        set_threads(threads)
        try:
            serve(source)
        except Exception:  # noqa: BLE001 - the source recorded it (a failed trial); a relaunch resumes it
            failed = 1
    return failed + _wait(procs, source.answers, progress, cancel)


def _alive(p) -> bool:
    return p.poll() is None if isinstance(p, subprocess.Popen) else p.is_alive()


def _exit_code(p) -> int:
    if isinstance(p, subprocess.Popen):
        return p.wait()
    p.join()
    return p.exitcode


def _wait(procs: list, answers, progress, cancel) -> int:
    """Wait for ``procs``, reading ``answers`` (if any) for ``progress`` and stopping them on ``cancel``;
    how many failed."""
    heard = 0
    while answers is not None or cancel is not None:  # else nothing to watch: just wait below
        if not any(_alive(p) for p in procs) and (answers is None or answers.empty()):
            break
        if cancel is not None and cancel.is_set():
            for p in procs:
                if _alive(p):
                    p.terminate()
            break
        if answers is None:
            time.sleep(POLL_S)
            continue
        try:
            _, error = answers.get(timeout=POLL_S)
        except queue.Empty:
            continue
        heard += 1
        if progress:
            progress(heard, error)
    return sum(1 for p in procs if _exit_code(p))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(argv: list[str], processes: int, env: dict | None = None) -> subprocess.Popen:
    """The one launcher of a torchrun child: ``python -m torch.distributed.run --nproc-per-node N … argv``
    with each rank's threads from `threads_per_worker` (N), its output piped, in a process group of its own (so
    that it and its ranks can be signalled as one group)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes),
           "--master-port", str(_free_port()), *argv]
    env = {**os.environ, **thread_env(threads_per_worker(processes)), **(env or {})}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
