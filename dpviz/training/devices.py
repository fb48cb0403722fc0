"""One long-lived worker thread per accelerator: the GPU work of every run, search trial and analysis of a
process runs on it.

PyTorch caches cuDNN's execution plans per shape *and per thread* (pytorch#104701), and cuDNN ≥ 9.10 builds
a plan for each new convolution shape at run time (seconds for a depthwise layer; NVIDIA/cudnn-frontend#1066).
A dashboard job runs in a new pool thread, so each of its runs would pay every plan again. Submitting the
work to one thread per device keeps the plans (and cuBLAS handles, the caching allocator's streams) of the
first run for every later one of the server, the command line's rate search and its run, and the analyses.

On a CPU nothing is cached per thread, and runs may go side by side on the cores: `on_device` calls the
function in the calling thread there. A call made on the worker itself (a search trial inside a run's
resolve, an analysis a run starts) runs inline, so the worker never waits for itself.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, TypeVar

from dpviz.errors import Cancelled

T = TypeVar("T")
POLL_S = 0.2  # how often a waiting caller looks at its cancel event
_workers: dict[str, "_Worker"] = {}
_lock = threading.Lock()


class _Worker:
    """A daemon thread running submitted functions one after another (daemon: a process asked to stop does
    not wait for a run; the store's take-over finds an interrupted run)."""

    def __init__(self, device: str):
        self.device, self._items, self._ready = device, [], threading.Condition()
        self.busy = False
        self.thread = threading.Thread(target=self._loop, name=f"dpviz-device-{device}", daemon=True)
        self.thread.start()

    def submit(self, fn: Callable, args, kwargs) -> Future:
        future = Future()
        with self._ready:
            self._items.append((future, fn, args, kwargs))
            self._ready.notify()
        return future

    def _loop(self) -> None:
        while True:
            with self._ready:
                while not self._items:
                    self._ready.wait()
                future, fn, args, kwargs = self._items.pop(0)
            if not future.set_running_or_notify_cancel():  # cancelled while queued
                continue
            self.busy = True
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - the future carries it to the caller
                future.set_exception(e)
            finally:
                self.busy = False


def key(device) -> str | None:
    """The worker a device's work goes to ("cuda:0"), or None where work runs in the caller's thread (CPU)."""
    import torch

    d = torch.device(device)
    if d.type != "cuda":
        return None
    return f"cuda:{d.index if d.index is not None else torch.cuda.current_device()}"


def worker(device) -> _Worker | None:
    """The device's worker thread, started on first use (None on a CPU)."""
    k = key(device)
    if k is None:
        return None
    with _lock:
        if k not in _workers:
            _workers[k] = _Worker(k)
        return _workers[k]


def on_device(device, fn: Callable[..., T], /, *args, cancel_queued: threading.Event | None = None,
              on_queue: Callable[[], None] | None = None, **kwargs) -> T:
    """``fn(*args, **kwargs)`` on ``device``'s worker thread, waiting for its result (its error re-raised).

    Args:
        device: "cpu", "cuda", "cuda:1", a `torch.device`: on a CPU ``fn`` runs here, in this thread.
        cancel_queued: while ``fn`` is still queued behind other work, setting it withdraws the call (`Cancelled`);
            once it runs, ``fn`` itself must look at the event (the training loop does, at every step).
        on_queue: called once if the worker is busy with other work when this call arrives.
    """
    w = worker(device)
    if w is None or threading.current_thread() is w.thread:
        return fn(*args, **kwargs)
    if w.busy and on_queue is not None:
        on_queue()
    future = w.submit(fn, args, kwargs)
    while True:
        try:
            return future.result(timeout=POLL_S)
        except FutureTimeout:
            if cancel_queued is not None and cancel_queued.is_set() and future.cancel():
                raise Cancelled() from None
