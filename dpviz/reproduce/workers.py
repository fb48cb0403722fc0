"""Training a scorecard's runs in worker processes (``reproduce --workers N``).

Each worker takes the next run from one shared queue, so runs of very different lengths (an LP-FFT run
at p = 1 is a tenth of one at p = 0) spread evenly, and runs with ``threads_per_worker(N)`` torch threads:
on a small CPU, N single-threaded processes train more runs an hour than one process on N threads (a
batch of 64 does not keep two cores busy). The workers only fill the store; the scorecard then reads every
row from it as one process would, so a run a worker could not finish trains again there (and its error is
raised there), and a stopped pass resumes from the store either way.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import queue
from typing import Callable

from dpviz.config import RunConfig


def _work(todo, done, cache_dir: str, threads: int) -> None:
    import torch

    from dpviz.runner import run
    from dpviz.store import Store

    torch.set_num_threads(threads)
    store = Store(cache_dir)
    while (key := todo.get()) is not None:  # None: the queue's end, one per worker
        try:
            run(RunConfig.from_dict(json.loads(key)), store=store)
            done.put((key, None))
        except Exception as e:  # the scorecard's own pass trains it again and raises there
            done.put((key, f"{type(e).__name__}: {e}"))


def train(configs: list[RunConfig], *, workers: int, cache_dir, progress: Callable | None = None,
          cancel=None) -> int:
    """Train ``configs`` in ``workers`` processes (at most one per core and per run) into the store at
    ``cache_dir``; return how many finished.

    Args:
        configs: distinct runs (`scorecard.pending`).
        workers: processes asked for.
        cache_dir: the store's folder.
        progress: called with (runs done, runs in all, "N workers").
        cancel: a `threading.Event`; set, the workers are stopped (their runs are left interrupted).
    """
    from dpviz.sweeps.trials import local_workers, threads_per_worker

    n, _ = local_workers(workers, len(configs))
    ctx = mp.get_context("spawn")  # torch and its threads are not fork-safe
    todo, done = ctx.Queue(), ctx.Queue()
    for item in [cfg.to_json() for cfg in configs] + [None] * n:
        todo.put(item)
    procs = [ctx.Process(target=_work, args=(todo, done, str(cache_dir), threads_per_worker(n)), daemon=True)
             for _ in range(n)]
    for p in procs:
        p.start()
    finished = answered = 0
    while (answered < len(configs) and any(p.is_alive() for p in procs)) or not done.empty():
        if cancel is not None and cancel.is_set():
            break
        try:
            _, error = done.get(timeout=1.0)
        except queue.Empty:
            continue
        answered += 1
        finished += error is None
        if progress:
            progress(answered, len(configs), f"{n} worker{'s' * (n > 1)}")
    for p in procs:
        if p.is_alive():
            p.terminate()
        p.join()
    return finished
