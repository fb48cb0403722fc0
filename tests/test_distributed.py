"""One private run over two processes (torchrun, gloo on the CPU): the same steps as one process, the noise
once, the same ε, one writer; a killed rank leaves an interrupted run in a readable store."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from dpviz.privacy import dpsgd
from dpviz.store import Store

pytestmark = pytest.mark.subprocess  # torchrun and mp.spawn's ranks

TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
FLAGS = ["--strategy", "lp-fft", "--epochs", "2", "--lr-lp", "0.5", "--lr-ft", "0.05", "--eval-subset", "40"]


def _env(cache_dir):
    return {**os.environ, "DPVIZ_BACKGROUND_ANALYSES": "off", "DPVIZ_CACHE_DIR": str(cache_dir)}


def _run(cache_dir, *flags, ranks=1):
    """`python -m dpviz run … --json` in one process, or under torchrun with ``ranks`` processes."""
    launcher = [TORCHRUN, "--nproc-per-node", str(ranks), "--master-port", "29531", "-m", "dpviz"] if ranks > 1 \
        else [sys.executable, "-m", "dpviz"]
    out = subprocess.run([*launcher, "run", *FLAGS, *flags, "--json", "--quiet"], capture_output=True, text=True,
                         env=_env(cache_dir), timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout[out.stdout.index("{"):])


def test_two_processes_spend_the_one_process_runs_epsilon_on_its_batches_with_one_writer(tmp_path):
    """The whole path from the command line, LP-FFT (LP on cached features on every rank, then FFT sharded):
    the first step (from the same weights, with the same noise) gives
    the one-process run's weights to 1e-6; later steps drift only by FP32 rounding (the order of a sum),
    so the losses agree to 1e-3; ε is the same; rank 0 alone stored the run, with its world size."""
    one = _run(tmp_path / "one", "--epsilon", "1", "--checkpoint-every", "1")
    two = _run(tmp_path / "two", "--epsilon", "1", "--checkpoint-every", "1", ranks=2)
    assert two["world_size"] == 2 and two["backend"] == "gloo" and "world_size" not in one
    assert two["epsilon_spent"] == one["epsilon_spent"] <= 1.0 and two["total_steps"] == one["total_steps"] == 12
    s1, s2 = Store(tmp_path / "one"), Store(tmp_path / "two")
    assert [r["run_id"] for r in s2.list_runs()] == [two["run_id"]]  # one writer, one run
    assert s2.weight_steps(two["run_id"]) == s1.weight_steps(one["run_id"]) == list(range(13))
    a, b = s1.load_weights(one["run_id"], 1), s2.load_weights(two["run_id"], 1)
    assert max(((a[k] - b[k]).abs() / a[k].abs().clamp(min=1)).max().item() for k in a) <= 1e-6
    l1, l2 = s1.metrics(one["run_id"], "loss")["loss"], s2.metrics(two["run_id"], "loss")["loss"]
    assert [t for t, _ in l2] == [t for t, _ in l1] and [v for _, v in l2] == pytest.approx([v for _, v in l1], rel=1e-3)


def _rank(rank, world, port, out):
    """One rank of a hand-made distributed loop over a small conv net, beside the one-process step on the
    same batch from the same weights: the released gradients of both (DP with σ = 0, and plain), then the
    noise (the noisy minus the noiseless release). Every step applies the one-process update to keep the
    weights equal, so what is compared is one step, not a trajectory."""
    from dpviz.training import distributed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    w = distributed.current()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 6, 3), nn.GroupNorm(2, 6), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 36, 5))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 1, 8, 8, generator=g), torch.randint(0, 5, (64,), generator=g)
    stepper, E = dpsgd.Stepper(model, "bk"), 40.0
    flat = lambda: torch.cat([p.grad.flatten() for p in stepper.params])  # noqa: E731
    worst, diffs = 0.0, []
    for k in range(20):
        idx = torch.nonzero(torch.rand(64, generator=g) < 0.6).squeeze(1)  # the same global batch on every rank
        gens = [torch.Generator().manual_seed(100 + k) for _ in range(3)]
        kw = dict(clip_norm=1.0, expected_batch=E)
        dpsgd.private_step(stepper, x[idx], y[idx], noise_multiplier=0.0, generator=gens[0], **kw)
        ref = flat()
        dpsgd.private_step(stepper, x[w.shard(idx)], y[w.shard(idx)], noise_multiplier=0.0, generator=gens[1],
                           reduce=w.all_reduce, **kw)
        worst = max(worst, ((flat() - ref).abs().max() / ref.abs().max()).item())
        dpsgd.private_step(stepper, x[w.shard(idx)], y[w.shard(idx)], noise_multiplier=1.5, generator=gens[2],
                           reduce=w.all_reduce, **kw)
        diffs.append(flat() - ref)
        dpsgd.plain_step(model, x[idx], y[idx])
        plain = flat()
        dpsgd.plain_step(model, x[w.shard(idx)], y[w.shard(idx)], batch=len(idx), reduce=w.all_reduce)
        worst = max(worst, ((flat() - plain).abs().max() / plain.abs().max()).item())
        with torch.no_grad():  # the one-process update, on every rank
            for p, r in zip(stepper.params, ref.split([p.numel() for p in stepper.params])):
                p -= 0.5 * r.view_as(p)
    torch.save({"worst": worst, "noise": torch.cat(diffs)}, f"{out}/{rank}.pt")
    dist.destroy_process_group()


def test_a_distributed_step_is_the_one_process_step_and_its_noise_enters_once(tmp_path):
    """On the same sampled examples from the same weights, the two ranks' released gradient (σ = 0) and plain
    gradient equal one process's to 1e-6 of their size at every step; the noise's std is σ·C/(q·n) = 1.5/40,
    not √2 times it (noise added per rank), and both ranks release the same values."""
    mp.spawn(_rank, args=(2, 29532, str(tmp_path)), nprocs=2)
    r0, r1 = torch.load(tmp_path / "0.pt"), torch.load(tmp_path / "1.pt")
    assert r0["worst"] <= 1e-6 and r1["worst"] <= 1e-6
    assert torch.equal(r0["noise"], r1["noise"])  # the same update on both ranks
    assert r0["noise"].numel() > 10_000 and r0["noise"].std().item() == pytest.approx(1.5 / 40, rel=0.03)


def test_a_killed_rank_leaves_the_run_interrupted_and_the_store_readable(tmp_path):
    env = _env(tmp_path)
    proc = subprocess.Popen([TORCHRUN, "--nproc-per-node", "2", "--master-port", "29533", "-m", "dpviz", "run", *FLAGS,
                             "--epochs", "400", "--epsilon", "8", "--quiet"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline, store = time.time() + 120, None
        while time.time() < deadline:  # until rank 0 has recorded a few steps
            runs = Store(tmp_path).list_runs() if (tmp_path / "runs.sqlite").exists() else []
            if runs and (runs[0]["step"] or 0) >= 5:
                break
            time.sleep(0.5)
        ranks = subprocess.run(["pgrep", "-f", "-P", str(proc.pid), "dpviz"], capture_output=True, text=True)
        pids = [int(p) for p in ranks.stdout.split()]
        assert len(pids) == 2, ranks
        os.kill(pids[-1], signal.SIGKILL)  # one rank dies; torchrun stops the other
        assert proc.wait(timeout=120) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    run = Store(tmp_path).list_runs()[0]  # opening the store marks the dead owner's run
    assert run["status"] in ("interrupted", "failed") and 5 <= run["step"] < run["total_steps"]
    assert Store(tmp_path).metrics(run["run_id"], "loss")["loss"]  # what was recorded reads back


def test_a_torchrun_run_killed_at_a_snapshot_is_taken_over_by_the_same_command(tmp_path):
    """Every process of a torchrun run killed once it has a snapshot: the same command goes on with that run
    from its snapshot (one row, ε within its budget, one line on stderr), not a second run from step 0."""
    flags = [*FLAGS, "--epochs", "30", "--epsilon", "8", "--checkpoint-every", "4", "--quiet"]
    launch = [TORCHRUN, "--nproc-per-node", "2", "--master-port", "29534", "-m", "dpviz", "run", *flags]
    proc = subprocess.Popen(launch, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline, snap = time.time() + 120, None
        while time.time() < deadline and snap is None:
            runs = Store(tmp_path).list_runs("running") if (tmp_path / "runs.sqlite").exists() else []
            snap = Store(tmp_path).load_resume(runs[0]["run_id"]) if runs else None
            snap = snap if snap and snap["step"] > 0 else None
            time.sleep(0.3)
    finally:  # every rank (torchrun starts them in sessions of their own), then torchrun
        ranks = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        for pid in ranks:
            os.kill(int(pid), signal.SIGKILL)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert snap is not None and len(ranks) == 2, (snap, ranks)
    rid, step = runs[0]["run_id"], Store(tmp_path).load_resume(runs[0]["run_id"])["step"]
    again = subprocess.run([*launch, "--json"], env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads(again.stdout[again.stdout.index("{"):])
    assert summary["run_id"] == rid and summary["epsilon_spent"] <= 8.0 and summary["world_size"] == 2
    assert f"run {rid} of this configuration stopped at step {step}; going on with it" in again.stderr
    runs = Store(tmp_path).list_runs()
    assert [r["run_id"] for r in runs] == [rid] and runs[0]["status"] == "finished"
