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
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable, TypeVar

from dpviz.errors import Cancelled
from dpviz.runtime.threads import DaemonPool

T = TypeVar("T")
POLL_S = 0.2  # how often a waiting caller looks at its cancel event
_workers: dict[str, DaemonPool] = {}
_lock = threading.Lock()


def key(device) -> str | None:
    """The worker a device's work goes to ("cuda:0"), or None where work runs in the caller's thread (CPU)."""
    import torch

    d = torch.device(device)
    if d.type != "cuda":
        return None
    return f"cuda:{d.index if d.index is not None else torch.cuda.current_device()}"


def worker(device) -> DaemonPool | None:
    """The device's worker: a pool of one daemon thread, started on first use (None on a CPU). Daemon: a
    process asked to stop does not wait for a run; the store's take-over finds it interrupted."""
    k = key(device)
    if k is None:
        return None
    with _lock:
        if k not in _workers:
            _workers[k] = DaemonPool(1, f"dpviz-device-{k}")
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
    if w is None or threading.current_thread() in w.threads:
        return fn(*args, **kwargs)
    if w.busy and on_queue is not None:
        on_queue()
    future = w.submit(fn, *args, **kwargs)
    while True:
        try:
            return future.result(timeout=POLL_S)
        except FutureTimeout:
            if cancel_queued is not None and cancel_queued.is_set() and future.cancel():
                raise Cancelled() from None
