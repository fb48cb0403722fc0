"""One worker thread per device: every run, search trial and analysis of a process on it; and the per-sample
depthwise rule each device uses."""

import threading
import time

import pytest
import torch
from torch import nn

from dpviz.errors import Cancelled
from dpviz.jobs import JobManager
from dpviz.privacy import bk_rules
from dpviz.training import devices


@pytest.fixture
def cpu_worker(monkeypatch):
    """The CPU treated as a device with a worker (as CUDA is), so that the wiring runs here."""
    monkeypatch.setattr(devices, "key", lambda device: "cpu-worker")
    monkeypatch.setattr(devices, "_workers", {})
    return devices


def test_calls_from_any_thread_run_on_the_one_worker_and_errors_come_back(cpu_worker):
    names = []
    threads = [threading.Thread(target=lambda: names.append(
        devices.on_device("cpu", lambda: threading.current_thread().name))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(names)) == 1 and names[0].startswith("dpviz-device-")
    assert devices.on_device("cpu", lambda: devices.on_device("cpu", lambda: 7)) == 7  # inline on the worker
    with pytest.raises(ZeroDivisionError):
        devices.on_device("cpu", lambda: 1 / 0)


def test_a_queued_call_is_withdrawn_by_its_cancel_event_and_told_it_waits(cpu_worker):
    release, started = threading.Event(), threading.Event()

    def busy():
        started.set()
        release.wait(10)

    blocker = threading.Thread(target=lambda: devices.on_device("cpu", busy))
    blocker.start()
    started.wait(5)
    cancel, told, ran = threading.Event(), [], []
    threading.Timer(0.3, cancel.set).start()
    t0 = time.perf_counter()
    with pytest.raises(Cancelled):
        devices.on_device("cpu", lambda: ran.append(1), cancel_queued=cancel, on_queue=lambda: told.append(1))
    assert time.perf_counter() - t0 < 5 and told == [1]
    release.set()
    blocker.join(5)
    assert devices.on_device("cpu", lambda: 3) == 3 and ran == []  # the withdrawn call never ran


def test_a_cpu_runs_in_the_callers_thread():
    assert devices.key("cpu") is None
    assert devices.on_device("cpu", lambda: threading.current_thread()) is threading.current_thread()


@pytest.mark.slow
def test_two_dashboard_jobs_train_on_the_same_device_thread(cpu_worker, cache_dir, fast_cfg):
    jm = JobManager(cache_dir, max_workers=2, analyses=False)
    seen = {}

    def on(job_id):
        return lambda *a: seen.setdefault(job_id, threading.current_thread().name)

    jobs = [jm.submit(fast_cfg(strategy="fft", lr_ft=0.01, seed=s)) for s in (0, 1)]
    import dpviz.training.loop as loop
    real = loop.Loop.record

    def record(self, st, lr, final):
        seen.setdefault(self.run_id, threading.current_thread().name)
        return real(self, st, lr, final)

    loop.Loop.record = record
    try:
        for j in jobs:
            j.wait(120)
    finally:
        loop.Loop.record = real
    assert len(seen) == 2 and len(set(seen.values())) == 1
    assert next(iter(seen.values())).startswith("dpviz-device-")
    jm.shutdown()


@pytest.mark.parametrize("stride,dilation,padding,mult", [(1, 1, 1, 1), (2, 1, 1, 1), (1, 2, 2, 1), (2, 1, 0, 2)])
def test_depthwise_shifted_products_equal_the_grouped_convolution(stride, dilation, padding, mult):
    torch.manual_seed(0)
    layer = nn.Conv2d(3, 3 * mult, 3, stride=stride, padding=padding, dilation=dilation, groups=3).double()
    a = torch.randn(4, 3, 9, 9, dtype=torch.float64)
    g = torch.randn_like(layer(a))
    shifted = bk_rules.depthwise_shifted(layer, a, g)  # (B, k, 9)
    ref = torch.stack([torch.autograd.grad((layer(a[i:i + 1]) * g[i:i + 1]).sum(), layer.weight)[0]
                       for i in range(4)]).flatten(2)  # per-example autograd: (B, k, 1·3·3)
    assert torch.allclose(shifted, ref, atol=1e-10)
    n2, ps = bk_rules.conv_norm2(layer, a, g)  # the rule the CPU picks
    assert bk_rules.DEPTHWISE["cpu"] == "shifted" and torch.allclose(n2, ref.pow(2).sum((1, 2)))
