"""How dpviz's processes wait for their CPU threads, so that a run keeps its speed on a shared machine.

PyTorch's CPU kernels run on OpenMP threads (libgomp in the Linux wheels). Between two parallel regions
libgomp lets each thread spin, by default for 300,000 turns, before it sleeps: on an idle machine that
saves a wake-up, but as soon as the cores are shared — other programs, dpviz's own concurrent runs,
analysis threads, search workers — spinning threads take the cores their siblings need, and a run slows
5–20× instead of the 2× a fair share costs (``bench/bench_contention.py``). dpviz sets a short spin
(``GOMP_SPINCOUNT=1000``) in its own environment at import, before torch loads, so every process it starts
(torchrun ranks, detached analyses, sweep and scorecard workers) inherits it. A value the user set wins;
the variable must be set before torch is first imported, so a notebook that imports torch before dpviz
keeps libgomp's default (set it in the shell, or ``%env GOMP_SPINCOUNT=1000`` first).

`DaemonPool` is dpviz's pool of Python threads: the dashboard's job threads and each GPU's one worker
(`dpviz.training.devices`). `end_process` ends a process whose daemon threads may still be inside torch.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from concurrent.futures import Future

SPIN = {"GOMP_SPINCOUNT": "1000"}
"""libgomp's spin before a waiting thread sleeps (its default: 300000): measured in the README's contention
table, it keeps an idle run's speed and two runs on two cores each near a fair share."""


def set_wait_policy(environ=None) -> dict:
    """Set dpviz's OpenMP wait policy in ``environ`` (default: this process's) where the user set none.

    Returns:
        {variable: value} of what this call set (empty when the user's own values stand, or when torch is
        already imported and the setting would come too late for this process).
    """
    environ = os.environ if environ is None else environ
    if environ is os.environ and "torch" in sys.modules:
        return {}
    chosen = {k: v for k, v in SPIN.items() if k not in environ}
    environ.update(chosen)
    return chosen


class DaemonPool:
    """A fixed pool of daemon threads with `concurrent.futures` futures. Daemon, so that a process asked to
    stop never waits minutes for a run still loading its backbone: `JobManager.interrupt` stores its runs as
    interrupted first (ThreadPoolExecutor's threads are joined at exit, whatever they are doing)."""

    def __init__(self, workers: int, name: str, nice: int = 0):
        """``nice``: the threads' scheduling priority on Linux (19: the lowest), so background work yields
        the cores to training in the same process; 0 leaves it as the process's."""
        self.nice = nice
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self.busy = 0  # items running now
        self.threads = [threading.Thread(target=self._loop, name=f"{name}_{i}", daemon=True) for i in range(workers)]
        for t in self.threads:
            t.start()

    def submit(self, fn, *args, **kwargs) -> Future:
        if self._closed:
            raise RuntimeError("cannot submit to a pool that was shut down")
        future = Future()
        self._queue.put((future, fn, args, kwargs))
        return future

    def _loop(self) -> None:
        if self.nice and hasattr(os, "setpriority"):
            try:  # Linux schedules threads one by one: this thread (and the OpenMP threads it starts) only
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
            except OSError:
                pass
        while (item := self._queue.get()) is not None:
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():  # False: cancelled while queued
                self.busy += 1
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as e:  # noqa: BLE001 - the future carries it to whoever waits
                    future.set_exception(e)
                finally:
                    self.busy -= 1

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self._closed = True
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in self.threads:
            self._queue.put(None)
        if wait:
            for t in self.threads:
                t.join()


def end_process(line: str, code: int = 0) -> None:
    """End this process now, after its Python exit handlers, with ``line`` as its last words on stderr.

    A daemon thread still inside torch (an analysis of a checkpoint, a job past its last step) when the
    interpreter finalises makes C++'s static destructors meet a live ``std::thread``: the process aborts with
    "terminate called without an active exception" and status −6, which reads as a crash. Skipping those
    destructors (``os._exit``) after every Python exit handler has run (kaleido's browser stopped, logs
    flushed) ends it cleanly; the store's writes are already committed.
    """
    import atexit
    import logging

    atexit._run_exitfuncs()
    logging.shutdown()
    print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code)

