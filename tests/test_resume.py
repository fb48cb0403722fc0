"""`run --resume`: a stopped run goes on from its last checkpoint and ends where an uninterrupted one does,
with the same ε, in one process or on another number of them."""

import json
import os
import subprocess
import sys
import threading

import pytest
import torch

import dpviz
from dpviz.config import RunConfig
from dpviz.errors import Cancelled
from dpviz.store import Store

CFG = dict(epochs=2, epsilon=1.0, lr_lp=0.5, lr_ft=0.05, checkpoint_every=2, eval_every=3)


def _stopped(cfg, cache_dir, at: int = 7) -> str:
    """``cfg`` cancelled during step ``at`` (stored as cancelled; its snapshot from the checkpoint at step
    at − 1); its run id."""
    stop = threading.Event()
    with pytest.raises(Cancelled):
        dpviz.run(cfg, cache_dir=cache_dir, progress=lambda step, total, last: step == at and stop.set(), cancel=stop)
    (run,) = Store(cache_dir).list_runs()
    assert run["status"] == "cancelled" and Store(cache_dir).load_resume(run["run_id"])["step"] == at - 1
    return run["run_id"]


@pytest.mark.parametrize("strategy,extra,at", [
    ("lp-fft", {}, 7),  # stopped after its phase switch
    ("lora", {}, 7),  # adapters the phase itself makes
    ("sparse", {"epochs": 3}, 9),  # stopped in the selection epoch (steps 7–12): its sums go on
    ("continual", {"switch_step": 4}, 7),  # stopped after the public phase: the switch is remembered
    ("lp-fft", {"mechanism": "bandmf", "bands": 2}, 7),  # BandMF's noise memory and cyclic parts go on
    # stopped in the public phase between two decelerator checks (steps 0, 10, 20, …): the monitor goes on
    pytest.param("continual", {"switch_step": -1, "switch_threshold": 0.95, "epochs": 6}, 15,  # it switches at 30
                 marks=pytest.mark.slow),
], ids=["lp-fft", "lora", "sparse", "continual", "bandmf", "continual-public"])
def test_a_resumed_run_ends_bit_for_bit_where_an_uninterrupted_one_does(strategy, extra, at, cache_dir, tmp_path):
    cfg = RunConfig(strategy=strategy, **{**CFG, **extra})
    full = dpviz.run(cfg, cache_dir=tmp_path / "full")
    rid = _stopped(cfg, cache_dir, at)
    out = dpviz.run(cfg, cache_dir=cache_dir, resume=True)
    store, ref = Store(cache_dir), Store(tmp_path / "full")
    assert out["run_id"] == rid and store.get_run(rid)["status"] == "finished" and len(store.list_runs()) == 1
    assert out["epsilon_spent"] == full["epsilon_spent"] and out["test_accuracy"] == full["test_accuracy"]
    a, b = ref.load_model(full["run_id"])["state_dict"], store.load_model(rid)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)  # the same batches, noise and optimizer state
    assert store.metrics(rid, "loss")["loss"] == ref.metrics(full["run_id"], "loss")["loss"]  # no step twice
    assert store.load_resume(rid) is None  # a finished run keeps no resume point


@pytest.mark.subprocess
def test_a_run_stopped_in_one_process_resumes_on_two(cache_dir, tmp_path):
    """The world size may change on resume: sampling and noise are global (`dpviz.training.distributed`)."""
    cfg = RunConfig(strategy="fft", **CFG)
    full = dpviz.run(cfg, cache_dir=tmp_path / "full")
    rid = _stopped(cfg, cache_dir)
    flags = ["--strategy", "fft", "--epochs", "2", "--epsilon", "1", "--lr-lp", "0.5", "--lr-ft", "0.05",
             "--checkpoint-every", "2", "--eval-every", "3"]
    env = {**os.environ, "DPVIZ_BACKGROUND_ANALYSES": "off", "DPVIZ_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                          "29534", "-m", "dpviz", "run", *flags, "--resume", "--json", "--quiet"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    s = json.loads(out.stdout[out.stdout.index("{"):])
    assert s["run_id"] == rid and s["world_size"] == 2 and s["epsilon_spent"] == full["epsilon_spent"]
    l1 = Store(tmp_path / "full").metrics(full["run_id"], "loss")["loss"]
    l2 = Store(cache_dir).metrics(rid, "loss")["loss"]
    assert [t for t, _ in l2] == [t for t, _ in l1] and [v for _, v in l2] == pytest.approx([v for _, v in l1], rel=1e-3)


def test_a_snapshot_keeps_a_shared_tensor_once():
    """A module registered under two names (MiniLM has them) is one tensor in the snapshot, so it is saved
    once: MiniLM's snapshot is 90 MB, not 180."""
    from torch import nn

    from dpviz.training.resume import cpu_once

    lin = nn.Linear(3, 3)
    model = nn.ModuleDict({"a": lin, "b": lin})
    state = model.state_dict()
    assert len(state) == 4
    out = cpu_once(state)
    assert out["a.weight"] is out["b.weight"] and torch.equal(out["a.weight"], lin.weight)
    assert out["a.weight"].data_ptr() != lin.weight.data_ptr()  # a copy: training goes on


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
def test_a_snapshot_of_dpvizs_former_optimizers_goes_on_in_torch_optim(name):
    """An interrupted run stored before runs used ``torch.optim`` resumes: its optimizer state (dpviz's own
    format then) loads into torch's, and the next steps are the ones torch takes from that state."""
    from dpviz.training.prepare import make_optimizer
    from dpviz.training.resume import torch_optimizer_state

    torch.manual_seed(0)
    params = [torch.randn(4, 3), torch.randn(3)]
    ref = make_optimizer([p.clone() for p in params], RunConfig(optimizer=name), 0.01)
    for _ in range(3):  # torch's own run, its state after 3 steps
        for p in ref.param_groups[0]["params"]:
            p.grad = torch.ones_like(p)
        ref.step()
    theirs = ref.state_dict()
    old = {"lr": 0.01, "state": {i: {k: int(v) if k == "step" else v.clone() for k, v in st.items()}
                                 for i, st in theirs["state"].items()}}  # the former layout
    new = make_optimizer([p.detach().clone() for p in ref.param_groups[0]["params"]], RunConfig(optimizer=name), 0.01)
    new.load_state_dict(torch_optimizer_state(old, new))
    for opt in (ref, new):
        for p in opt.param_groups[0]["params"]:
            p.grad = torch.full_like(p, 0.5)
        opt.step()
    assert all(torch.equal(a, b) for a, b in zip(ref.param_groups[0]["params"], new.param_groups[0]["params"]))
