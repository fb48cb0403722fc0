"""`run --resume`: a stopped run goes on from its last checkpoint and ends where an uninterrupted one does,
with the same ε, in one process or on another number of them."""

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from PIL import Image

import dpviz
from dpviz.config import RunConfig
from dpviz.errors import Cancelled, ConfigError
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


# ---- a run whose training records changed while it was stopped -----------------------------------------------

def _image(path, label: int, j: int) -> None:
    """A 32×32 RGB PNG that differs by class and index."""
    a = np.full((32, 32, 3), 40 + 100 * label, np.uint8)
    a[j % 32, (3 * j) % 32] = 255
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(a).save(path)


def _folder(root, train: int = 12):
    """An image folder in its train/ and test/ layout: 2 classes of ``train`` training images each (n = 2·train)."""
    for label, cls in enumerate(["cat", "dog"]):
        for j in range(train):
            _image(root / "train" / cls / f"{j}.png", label, j)
        for j in range(3):
            _image(root / "test" / cls / f"{j}.png", label, 50 + j)
    return root


def _kept(store, rid):
    """What must not change when a resume is refused: the run's row and its snapshot's bytes."""
    return store.get_run(rid), store.run_dir(rid).joinpath("resume.pt").read_bytes()


@pytest.mark.slow  # the CNN is pretrained for 32×32 RGB images once a session (shipped for digits' 16×16 only)
def test_a_resume_is_refused_while_the_folder_holds_another_record_and_goes_on_once_restored(cache_dir, tmp_path):
    """--resume of a folder run after one image was added: one line naming data_dir, n and --fresh, nothing
    stored changes; with the image gone again it goes on and ends where an uninterrupted run does."""
    folder = _folder(tmp_path / "imgs")
    cfg = RunConfig(dataset="folder", data_dir=str(folder), strategy="fft", epochs=4, batch_size=8, epsilon=1.0,
                    lr_lp=0.5, lr_ft=0.05, checkpoint_every=2, eval_every=3)
    (tmp_path / "full").mkdir()
    os.symlink(cache_dir / "backbones", tmp_path / "full" / "backbones")  # the session's pretrained CNN
    full = dpviz.run(cfg, cache_dir=tmp_path / "full")
    rid = _stopped(cfg, cache_dir)
    store = Store(cache_dir)
    snap = store.load_resume(rid)
    assert snap["n"] == 24 and snap["bands"] == 1 and len(snap["data_digest"]) == 32
    assert [p[0] for p in snap["schedule"]] == ["fft"] and snap["schedule"][0][3] == 12  # name, σ, q, T
    before = _kept(store, rid)
    _image(folder / "train" / "cat" / "extra.png", 0, 99)
    with pytest.raises(ConfigError) as e:
        dpviz.run(cfg, cache_dir=cache_dir, resume=True)
    msg = str(e.value)
    assert msg.startswith("data_dir: the training records changed since run " + rid) and "\n" not in msg, msg
    assert "n 24 → 25" in msg and "--fresh" in msg and "restore the folder" in msg, msg
    assert _kept(store, rid) == before and len(store.list_runs(kind=None)) == 1
    (folder / "train" / "cat" / "extra.png").unlink()
    out = dpviz.run(cfg, cache_dir=cache_dir, resume=True)
    assert out["run_id"] == rid and store.get_run(rid)["status"] == "finished" and out["n_train"] == 24
    a, b = Store(tmp_path / "full").load_model(full["run_id"])["state_dict"], store.load_model(rid)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow  # as above
def test_a_request_waits_for_a_fresh_run_on_the_changed_folder_instead_of_refusing(cache_dir, tmp_path):
    """A stopped run of the old records, and a --fresh run of the changed folder training now: a --resume request
    is answered by the live run (it waits for it), not refused for the stopped one."""
    folder = _folder(tmp_path / "imgs")
    cfg = RunConfig(dataset="folder", data_dir=str(folder), strategy="fft", epochs=4, batch_size=8, epsilon=1.0,
                    lr_lp=0.5, lr_ft=0.05, checkpoint_every=2, eval_every=3)
    old = _stopped(cfg, cache_dir)
    _image(folder / "train" / "cat" / "extra.png", 0, 99)
    live, go, out = threading.Event(), threading.Event(), []

    def fresh():  # training, held at its first step until the request below waits for it
        out.append(dpviz.run(cfg, cache_dir=cache_dir, resume=False,
                             progress=lambda step, total, last: live.set() or go.wait(60)))

    t = threading.Thread(target=fresh)
    t.start()
    assert live.wait(120)
    answer = dpviz.run(cfg, cache_dir=cache_dir, resume=True, on_wait=lambda rid: go.set())
    t.join(120)
    assert answer["run_id"] == out[0]["run_id"] != old and answer["waited_for"] == out[0]["run_id"]
    assert answer["n_train"] == 25 and Store(cache_dir).get_run(old)["status"] == "cancelled"


def test_a_snapshot_from_before_the_check_goes_on_as_it_did(cache_dir):
    """A snapshot without n, digest and schedule (written before snapshots held them) cannot be checked: it goes
    on as it did."""
    cfg = RunConfig(strategy="lp-fft", **CFG)
    rid = _stopped(cfg, cache_dir)
    store = Store(cache_dir)
    old = {k: v for k, v in store.load_resume(rid).items() if k not in ("n", "data_digest", "bands", "schedule")}
    store.save_resume(rid, old)
    assert dpviz.run(cfg, cache_dir=cache_dir, resume=True)["run_id"] == rid


def _prep(x, y, sigma: float = 1.25, data_dir: str = ""):
    """What `resume.fingerprint` and `resume.mismatch` read of a prepared run: its bundle, its configuration's
    data_dir and bands, and the accountant's phases."""
    from types import SimpleNamespace

    from dpviz.data import Bundle
    from dpviz.privacy.accounting import Phase

    b = Bundle("digits", x, y, x[:1], y[:1], 2)
    phase = Phase(name="fft", steps=10, noise_multiplier=sigma, sample_rate=0.5, clip_norm=1.0)
    return SimpleNamespace(bundle=b, cfg=SimpleNamespace(data_dir=data_dir, bands=1), phases=[phase])


def test_a_record_added_or_edited_is_named_with_n_and_the_remedy():
    from dpviz.training import resume

    x, y = torch.zeros(4, 1, 8, 8), torch.tensor([0, 1, 0, 1])
    state = resume.fingerprint(_prep(x, y, data_dir="/data/pets"))
    assert resume.mismatch(state, _prep(x.clone(), y.clone(), data_dir="/data/pets"), "r1") is None
    grown = resume.mismatch(state, _prep(torch.zeros(5, 1, 8, 8), torch.tensor([0, 1, 0, 1, 1]),
                                         data_dir="/data/pets"), "r1")
    assert str(grown).startswith("data_dir: the training records changed since run r1 stopped (n 4 → 5, digest ")
    assert "--fresh" in str(grown) and str(grown).endswith("or restore the folder")
    edited = x.clone()
    edited[2, 0, 3, 3] = 0.5  # one pixel of one record: n is the same, the digest is not
    assert "(n 4 → 4, digest" in str(resume.mismatch(state, _prep(edited, y, data_dir="/data/pets"), "r1"))
    relabelled = resume.mismatch(state, _prep(x, torch.tensor([0, 1, 1, 1]), data_dir="/data/pets"), "r1")
    assert relabelled is not None and relabelled.field == "data_dir"
    assert resume.mismatch({"step": 4}, _prep(edited, y), "r1") is None  # a snapshot without a fingerprint


def test_a_schedule_that_changed_is_named():
    """Same records, another schedule (the calibration changed between stop and resume): refused."""
    from dpviz.training import resume

    x, y = torch.zeros(4, 1, 8, 8), torch.tensor([0, 1, 0, 1])
    state = resume.fingerprint(_prep(x, y))
    assert resume.mismatch(state, _prep(x, y, sigma=1.25 * (1 + 1e-12)), "r1") is None  # rounding only
    e = resume.mismatch(state, _prep(x, y, sigma=1.5), "r1")
    assert str(e).startswith("resume: the accountant's schedule changed since run r1 stopped") and "1.25" in str(e)


FOLDER_FLAGS = ["--dataset", "folder", "--strategy", "fft", "--epochs", "60", "--batch-size", "8", "--epsilon", "1",
                "--lr-ft", "0.05", "--checkpoint-every", "4", "--eval-every", "50"]


def _killed_at_snapshot(args, env, cache_dir) -> str:
    """``args`` (a `run` command) killed (SIGKILL) once its run has a snapshot past step 0; the run's id."""
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, snap = time.time() + 300, None  # the child may pretrain the CNN first
    while time.time() < deadline and snap is None and proc.poll() is None:
        runs = Store(cache_dir).list_runs("running")
        snap = Store(cache_dir).load_resume(runs[0]["run_id"]) if runs else None
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert snap is not None, "no snapshot before the deadline (or the run ended first)"
    return runs[0]["run_id"]


@pytest.mark.subprocess
@pytest.mark.slow  # three commands, and the CNN pretrained for 32×32 RGB images once a session
def test_a_plain_command_refuses_to_take_over_a_run_whose_folder_changed(cli_env, cache_dir, tmp_path):
    """The take-over: a folder run killed at a snapshot, one image added, the identical command: exit 2 with one
    line naming data_dir, n and --fresh; the stopped run, its status and resume.pt stay; once the image is gone
    the same command goes on with that run and finishes it."""
    folder = _folder(tmp_path / "imgs")
    env = {**cli_env, "DPVIZ_BACKGROUND_ANALYSES": "off"}
    args = [sys.executable, "-m", "dpviz", "run", *FOLDER_FLAGS, "--data-dir", str(folder), "--json", "--quiet"]
    rid = _killed_at_snapshot(args, env, cache_dir)
    store = Store(cache_dir)  # opening it marks the killed run interrupted
    assert store.get_run(rid)["status"] == "interrupted"
    before = _kept(store, rid)
    _image(folder / "train" / "dog" / "extra.png", 1, 99)
    refused = subprocess.run(args, env=env, capture_output=True, text=True)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1 and refused.stdout == "", refused.stderr
    assert f"data_dir: the training records changed since run {rid} stopped (n 24 → 25" in lines[0], lines
    assert "--fresh" in lines[0]
    assert _kept(store, rid) == before and len(store.list_runs(kind=None)) == 1
    (folder / "train" / "dog" / "extra.png").unlink()
    again = subprocess.run(args, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["run_id"] == rid and f"run {rid} of this configuration stopped" in again.stderr
    assert store.get_run(rid)["status"] == "finished" and store.load_resume(rid) is None
