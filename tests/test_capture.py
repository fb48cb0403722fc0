"""Captured private steps (`dpviz.training.capture`): when a phase is captured, and that a captured step is the
eager step, on this CPU (the decision, the step's buffers and order, the fall back to eager) and on a GPU (the
CUDA graphs themselves; CI has none: `bench/gpu_call.sh` runs them)."""

import copy

import pytest
import torch
from torch import nn

from dpviz import strategies
from dpviz.config import RunConfig
from dpviz.models import Classifier, build_backbone
from dpviz.privacy import bandmf
from dpviz.privacy.dpsgd import Stepper, private_step
from dpviz.training import capture

CUDA = torch.cuda.is_available()


class PluginBlock(nn.Module):  # a layer from outside the packages whose forwards dpviz knows
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x)


def _cnn(device="cpu"):
    torch.manual_seed(0)
    return Classifier(build_backbone("cnn", channels=1, size=16), 10).to(device)


def _why(**over):
    model = over.pop("model", None) or _cnn()
    stepper = over.pop("stepper", None) or Stepper(model, "bk")
    args = dict(device="cuda", stepper=stepper, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                strategy=strategies.get("fft")(RunConfig()), padded=True, environ={})
    return capture.why_eager(**{**args, **over})


def test_a_padded_bookkeeping_phase_on_cuda_is_captured_and_each_obstacle_says_why_not():
    assert _why() is None
    assert _why(optimizer=torch.optim.Adam(_cnn().parameters())) is None  # captured; Adam updates after the replay
    said = {
        "cpu": _why(device="cpu"), "off": _why(environ={"DPVIZ_CAPTURE": "off"}), "drawn": _why(padded=False),
        "hooks": _why(stepper=Stepper(_cnn(), "hooks")), "fp16": _why(precision="fp16"),
        "canaries": _why(canaries=object()), "world": _why(world=object()),
        "sparse": _why(strategy=strategies.get("sparse")(RunConfig(strategy="sparse"))),
        "plugin": _why(model=nn.Sequential(PluginBlock(), nn.Linear(3, 2))),
        "head": _why(model=nn.Linear(4, 3)),
        "dropout": _why(model=nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.1))),
    }
    assert all(said.values()), [k for k, v in said.items() if not v]
    assert "CPU" in said["cpu"] and "DPVIZ_CAPTURE=off" in said["off"] and "batch_shapes 0" in said["drawn"]
    assert "hooks" in said["hooks"] and "test_capture" in said["plugin"] and "sparse" in said["sparse"]
    assert "dropout" in said["dropout"] and _why(model=nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.0))) is None


def _pair(correlate: bool, optimizer=torch.optim.SGD):
    """Two twin models, steppers and optimizers; BandMF b = 2 memories where ``correlate``."""
    out = []
    for _ in range(2):
        model = _cnn().double()
        opt = optimizer([p for p in model.parameters() if p.requires_grad], lr=0.05,
                        **({"momentum": 0.9} if optimizer is torch.optim.SGD else {}))
        out.append((model, Stepper(model, "bk"), opt, bandmf.BandedNoise(2) if correlate else None))
    return out


@pytest.mark.parametrize("correlate", [False, True], ids=["dp-sgd", "bandmf"])
@pytest.mark.parametrize("graphs", [False, True], ids=["eager-buffers", "capture-fails-on-cpu"])
def test_a_captured_phase_takes_exactly_the_eager_steps(correlate, graphs):
    """Three padded steps with a noisy count: parameters, momentum, statistics and the generator's state equal an
    eager run's bit for bit. ``graphs`` on a CPU: the capture fails, is said once, and the steps go on eagerly."""
    (m1, s1, o1, n1), (m2, s2, o2, n2) = _pair(correlate)
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    cap = capture.CapturedSteps(s2, o2, g2, clip_norm=0.5, noise_multiplier=1.3, expected_batch=5.0,
                                correlate=n2, count_noise=2.0, graphs=graphs)
    torch.manual_seed(1)
    for k in range(3):
        x, y = torch.randn(8, 1, 16, 16, dtype=torch.float64), torch.randint(0, 10, (8,))
        mask = torch.arange(8) < 5 + k  # padded rows
        ref = private_step(s1, x, y, clip_norm=0.5, noise_multiplier=1.3, expected_batch=5.0, generator=g1, mask=mask,
                           count_noise=2.0, **({"correlate": n1} if n1 is not None else {}))
        o1.step()
        assert cap.takes(x, y) == (not graphs or k == 0)  # after a failed capture the loop steps eagerly
        st = cap.step(x, y, mask)
        assert cap.optimizes
        assert st == ref
        for p, q in zip(m1.parameters(), m2.parameters()):
            assert torch.equal(p, q) and torch.equal(p.grad, q.grad)
            assert torch.equal(o1.state[p]["momentum_buffer"], o2.state[q]["momentum_buffer"])
    assert torch.equal(g1.get_state(), g2.get_state())
    assert cap.summary()["graphs"] == 0 and cap.replays == 0
    if graphs:
        assert cap.off.startswith("capture failed at batch size 8") and "eager" in cap.summary()


@pytest.mark.parametrize("correlate", [False, True], ids=["dp-sgd", "bandmf"])
def test_the_reference_a_replay_is_checked_against_is_the_eager_step_itself(correlate):
    """`CapturedSteps.eager_update` runs `dpsgd.private_step` from the noise streams as they were before the step's
    draw: on a CPU it equals the captured step's own body bit for bit, so a captured path that drew its noise
    otherwise (here: without BandMF's memory) would differ from it."""
    (_, _, _, _), (m, s, o, n) = _pair(correlate)
    cap = capture.CapturedSteps(s, o, torch.Generator().manual_seed(4), clip_norm=0.5, noise_multiplier=1.1,
                                expected_batch=6.0, correlate=n, graphs=False)
    torch.manual_seed(3)
    for k in range(2):  # the second step: a memory that holds the first step's noise
        x, y = torch.randn(8, 1, 16, 16, dtype=torch.float64), torch.randint(0, 10, (8,))
        mask = torch.arange(8) < 6
        saved, before = cap._save(), cap._streams()
        ref_grads, ref_changes = cap.eager_update((x, y, mask), saved, before)
        cap.step(x, y, mask)
        assert all(torch.equal(p.grad, g) for p, g in zip(cap.params, ref_grads))
        changes = cap._changes(saved)
        assert len(changes) == len(ref_changes) > 0 and all(torch.equal(a, b) for a, b in zip(changes, ref_changes))
        assert any(bool(t.abs().sum() > 0) for t in changes)


def test_only_plain_sgd_updates_in_the_graph_and_a_changed_learning_rate_ends_capture():
    model = _cnn()
    stepper, gen = Stepper(model, "bk"), torch.Generator()
    make = lambda opt: capture.CapturedSteps(stepper, opt, gen, clip_norm=1.0, noise_multiplier=1.0,  # noqa: E731
                                              expected_batch=4.0, graphs=False)
    params = list(model.parameters())
    assert make(torch.optim.SGD(params, lr=0.1, momentum=0.9)).optimizes
    assert not make(torch.optim.SGD(params, lr=0.1, momentum=0.9, dampening=0.1)).optimizes
    assert not make(torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True)).optimizes
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    cap = make(opt)
    x, y = torch.zeros(4, 1, 16, 16), torch.zeros(4, dtype=torch.long)
    assert cap.takes(x, y)
    opt.param_groups[0]["lr"] = 0.05
    assert not cap.takes(x, y) and "learning rate" in cap.off


def test_adam_updates_outside_the_graph_and_a_split_batch_steps_eagerly():
    (_, _, _, _), (m, s, o, _) = _pair(False, torch.optim.Adam)
    cap = capture.CapturedSteps(s, o, torch.Generator(), clip_norm=1.0, noise_multiplier=1.0, expected_batch=4.0,
                                graphs=False)
    before = [p.detach().clone() for p in m.parameters()]
    cap.step(torch.randn(4, 1, 16, 16, dtype=torch.float64), torch.randint(0, 10, (4,)), torch.ones(4, dtype=bool))
    assert not cap.optimizes and all(torch.equal(p, b) for p, b in zip(m.parameters(), before))  # Loop steps Adam
    assert not cap.takes([torch.zeros(1)], [torch.zeros(1)])


@pytest.mark.parametrize("over", [dict(), dict(mechanism="bandmf", bands=2, clip_fraction_noise=40.0)],
                         ids=["dp-sgd", "bandmf-noisy-count"])
def test_a_run_through_the_captured_path_trains_exactly_as_the_eager_one(cache_dir, fast_cfg, monkeypatch, over):
    """The loop's captured path (`Loop._capture`: the captured step's buffers, its noise order and its SGD update
    in place of the loop's; eager on a CPU) against the eager loop, from one seed: the same model, statistics,
    privacy check verdict and ε; the run's summary lists the captured phases."""
    from dpviz.training import loop, prepare

    cfg = fast_cfg(strategy="lp-fft", batch_shapes=2, epochs=1, **over).fixed_rates()
    eager = loop.train(prepare.prepare(cfg, cache_dir=cache_dir), store=None, run_id="eager", check_privacy=True)

    class OnCpu(capture.CapturedSteps):  # the graphs' own path, without graphs
        def __init__(self, *args, **kw):
            super().__init__(*args, **{**kw, "graphs": False})
    monkeypatch.setattr(capture, "why_eager", lambda **kw: None)
    monkeypatch.setattr(capture, "CapturedSteps", OnCpu)
    prep = prepare.prepare(cfg, cache_dir=cache_dir)
    captured = loop.train(prep, store=None, run_id="captured", check_privacy=True)
    for key in ("test_accuracy", "test_loss", "epsilon_spent"):
        assert captured[key] == eager[key], key
    assert captured["privacy_check"]["verdict"] == eager["privacy_check"]["verdict"] == "passed"
    notes = {n["phase"]: n for n in captured["capture"]}
    assert set(notes) == {p["name"] for p in captured["phases"]} and all(n["graphs"] == 0 for n in notes.values())
    assert "capture" not in eager


def test_a_cpu_run_captures_nothing_and_says_nothing(cache_dir):
    import dpviz

    out = dpviz.run(RunConfig(strategy="fft", epochs=1, batch_shapes=2, lr_ft=0.01), cache_dir=cache_dir)
    assert "capture" not in out and out["privacy_check"]["verdict"] == "passed"


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device (CI has none: bench/gpu_call.sh runs it)")
@pytest.mark.parametrize("correlate", [False, True], ids=["dp-sgd", "bandmf"])
def test_replayed_steps_equal_the_eager_steps_on_cuda(correlate):
    """Five steps of two sizes from CUDA graphs against eager steps from the same generator state: the same
    updates (to `capture.TOLERANCE`), fresh noise at every replay, two graphs, capture time and memory stated."""
    models = []
    for _ in range(2):
        model = _cnn("cuda")
        models.append((model, Stepper(model, "bk"), torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                       bandmf.BandedNoise(2) if correlate else None, torch.Generator("cuda").manual_seed(3)))
    (m1, s1, o1, n1, g1), (m2, s2, o2, n2, g2) = models
    cap = capture.CapturedSteps(s2, o2, g2, clip_norm=1.0, noise_multiplier=1.0, expected_batch=24.0, correlate=n2)
    torch.manual_seed(2)
    updates, start = [], [p.detach().clone() for p in m1.parameters()]
    for k, size in enumerate((32, 32, 16, 32, 16)):
        x, y = torch.randn(size, 1, 16, 16, device="cuda"), torch.randint(0, 10, (size,), device="cuda")
        mask = torch.arange(size, device="cuda") < size - 3
        before = [p.detach().clone() for p in m2.parameters()]
        private_step(s1, x, y, clip_norm=1.0, noise_multiplier=1.0, expected_batch=24.0, generator=g1, mask=mask,
                     **({"correlate": n1} if n1 is not None else {}))
        o1.step()
        cap.step(x, y, mask)
        for p, q, p0 in zip(m1.parameters(), m2.parameters(), start):  # the changes so far, not the weights
            assert ((q - p0) - (p - p0)).abs().max() <= capture.TOLERANCE * (p - p0).abs().max() + 1e-7
        updates.append(torch.cat([(q - b).flatten() for q, b in zip(m2.parameters(), before)]))
    assert cap.off is None and cap.summary()["graphs"] == 2 and cap.replays == 5
    assert not torch.allclose(updates[1], updates[3])  # the same size, another draw: the noise is fresh
    assert cap.summary()["capture_s"] > 0 and cap.summary()["capture_mib"] >= 0


class _Reads(nn.Module):  # a forward that reads the device from the host (a graph cannot hold it)
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)

    def forward(self, x):
        return self.lin(x) * float(x.abs().max() > 0)


class _Draws(nn.Module):  # random numbers inside the step, from CUDA's default generator
    def __init__(self):
        super().__init__()
        self.lin, self.out = nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.out(torch.nn.functional.dropout(self.lin(x), 0.2, training=True))


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device (CI has none: bench/gpu_call.sh runs it)")
@pytest.mark.parametrize("make,why", [(_Reads, "capture failed"), (_Draws, "random numbers")])
def test_a_step_a_graph_cannot_hold_falls_back_cleanly_on_cuda(make, why):
    """A host read or a random draw inside the step: the capture is refused, the stream and state are as before,
    and the step is the eager one."""
    torch.manual_seed(0)
    model = make().cuda()
    twin = copy.deepcopy(model)
    opt, opt2 = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, twin))
    cap = capture.CapturedSteps(Stepper(model, "bk"), opt, torch.Generator("cuda").manual_seed(1), clip_norm=1.0,
                                noise_multiplier=1.0, expected_batch=8.0)
    x, y, mask = torch.randn(8, 8, device="cuda"), torch.randint(0, 3, (8,), device="cuda"), torch.ones(8, dtype=bool,
                                                                                                       device="cuda")
    torch.manual_seed(5)
    cap.step(x, y, mask)
    assert why in cap.off and torch.cuda.current_stream() == torch.cuda.default_stream()
    if make is _Reads:  # deterministic: the eager step from the same generator state gives the same update
        private_step(Stepper(twin, "bk"), x, y, clip_norm=1.0, noise_multiplier=1.0, expected_batch=8.0,
                     generator=torch.Generator("cuda").manual_seed(1), mask=mask)
        opt2.step()
        assert all(torch.allclose(p, q, atol=1e-6) for p, q in zip(model.parameters(), twin.parameters()))


def test_a_runs_threat_model_names_its_captured_steps_figures_as_not_covered():
    """The figures a CUDA run's summary keeps of its captured steps depend on the drawn batch sizes: the run's
    statement lists them among what ε does not cover, and only where the run has them."""
    from dpviz.privacy import release

    cfg = RunConfig().to_dict()
    captured = {"config": cfg, "private": True,
                "capture": [{"phase": "fft", "graphs": 1, "replays": 40, "capture_s": 0.8, "capture_mib": 30.0}]}
    eager = {"config": cfg, "private": True, "capture": [{"phase": "fft", "eager": "fp16 counts overflowed"}]}
    assert release.CAPTURED in release.statement(captured)["not_covered"]
    assert release.CAPTURED not in release.statement(eager)["not_covered"]
    assert release.CAPTURED not in release.statement({"config": cfg, "private": True})["not_covered"]
