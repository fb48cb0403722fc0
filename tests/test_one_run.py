"""A configuration has at most one live run: two processes, two threads or two resumes racing on one
configuration store one run and spend its privacy budget once; the later request waits and is answered by
it. And what is read from the shared-tensor store is what was stored."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import dpviz
from dpviz import cli
from dpviz.store import artifacts
from dpviz.config import RunConfig
from dpviz.errors import Cancelled, StoreError
from dpviz.store import Store

from conftest import ROOT

# Fixed rates (no "auto" search), long enough that both requests reach the store before either finishes.
CFG = dict(strategy="lp-fft", epochs=4, lr_lp=0.5, lr_ft=0.05)  # as ARGV gives it
ARGV = ["run", "--strategy", "lp-fft", "--epochs", "4", "--lr-lp", "0.5", "--lr-ft", "0.05", "--json"]


def runs_of(cache_dir, cfg: RunConfig) -> list[dict]:
    return [r for r in Store(cache_dir).list_runs(kind=None) if r["config_hash"] == cfg.hash()]


@pytest.mark.subprocess
def test_two_processes_on_one_configuration_train_it_once(cache_dir):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DPVIZ_BACKGROUND_ANALYSES": "off"}
    procs = [subprocess.Popen([sys.executable, "-m", "dpviz", "--cache-dir", str(cache_dir), *ARGV], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-800:] for _, e in outs]
    summaries = [json.loads(o) for o, _ in outs]
    (run,) = runs_of(cache_dir, RunConfig(**CFG))  # one stored run: ε spent once on the private data
    assert run["status"] == "finished" and {s["run_id"] for s in summaries} == {run["run_id"]}
    assert sorted(s["cached"] for s in summaries) == [False, True]
    waited = [e for _, e in outs if "of the same configuration is training; waiting for it" in e]
    assert len(waited) == 1 and [s.get("waited_for") for s in summaries if s["cached"]] == [run["run_id"]]


def test_two_threads_on_one_configuration_train_it_once(cache_dir):
    cfg, out, waits = RunConfig(**CFG), [], []
    threads = [threading.Thread(target=lambda: out.append(dpviz.run(cfg, cache_dir=cache_dir, on_wait=waits.append)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    (run,) = runs_of(cache_dir, cfg)
    assert len(out) == 2 and {s["run_id"] for s in out} == {run["run_id"]} and waits == [run["run_id"]]


def test_two_resumes_at_once_resume_once(cache_dir):
    cfg = RunConfig(**{**CFG, "checkpoint_every": 2})
    stop = threading.Event()
    with pytest.raises(Cancelled):
        dpviz.run(cfg, cache_dir=cache_dir, progress=lambda step, *_: step == 7 and stop.set(), cancel=stop)
    (stopped,) = runs_of(cache_dir, cfg)
    out = []
    threads = [threading.Thread(target=lambda: out.append(dpviz.run(cfg, cache_dir=cache_dir, resume=True)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    (run,) = runs_of(cache_dir, cfg)  # the stopped run went on, once; nothing trained from scratch
    resumed = [e for e in Store(cache_dir).events(run["run_id"]) if e["kind"] == "resumed"]
    assert run["run_id"] == stopped["run_id"] and run["status"] == "finished" and len(resumed) == 1
    assert {s["run_id"] for s in out} == {run["run_id"]} and sorted(s["cached"] for s in out) == [False, True]


@pytest.mark.subprocess  # its `dpviz run`s start dpviz.training.ahead's accounting child
def test_force_says_that_it_spends_the_budget_again(cache_dir, capsys):
    args = ["--cache-dir", str(cache_dir), *ARGV[:-1], "--epochs", "1"]
    assert cli.main(args) == 0
    assert "spends its privacy budget" not in capsys.readouterr().err
    assert cli.main([*args, "--force"]) == 0
    err = capsys.readouterr().err
    assert "--force: this configuration is stored already" in err and "spends its privacy budget" in err
    assert len(runs_of(cache_dir, RunConfig(**{**CFG, "epochs": 1}))) == 2  # asked for: trained again


def _replace(path, tensor) -> None:
    """Put ``tensor`` in ``path`` as dpviz stamps a shared tensor (a new file renamed over the old)."""
    tmp = path.with_suffix(".new")
    with open(tmp, "wb") as f:
        artifacts.write_pt(f, "tensor", {"tensor": tensor})
    os.replace(tmp, path)


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["same", "other"])
def test_a_substituted_tensor_is_refused_naming_it_and_the_next_save_rewrites_it(shape, cache_dir, capsys):
    cfg = RunConfig(**{**CFG, "epochs": 1})
    rid = dpviz.run(cfg, cache_dir=cache_dir)["run_id"]
    store = Store(cache_dir)
    files = sorted((cache_dir / "tensors").glob("*/*.pt"))
    assert files, "the default CNN has tensors above the sharing size"
    for path in files:
        t = artifacts.read_pt(path, "tensor")["tensor"]
        _replace(path, torch.zeros_like(t) if shape == "same" else torch.zeros(t.numel() + 1))
    code = cli.main(["--cache-dir", str(cache_dir), "analyze", "hessian", rid])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "does not match its hash" in err[0], err
    assert any(str(p) in err[0] for p in files), err[0]
    dpviz.run(cfg, cache_dir=cache_dir, force=True)  # saves the same tensors: the damaged files are rewritten
    store.load_model(rid)  # reads back whole, every tensor checked
    assert cli.main(["--cache-dir", str(cache_dir), "analyze", "hessian", rid]) == 0


def test_a_planted_link_is_not_read(cache_dir, tmp_path):
    cfg = RunConfig(**{**CFG, "epochs": 1})
    rid = dpviz.run(cfg, cache_dir=cache_dir)["run_id"]
    store = Store(cache_dir)
    elsewhere = tmp_path / "elsewhere.pt"
    torch.save({"step": 3}, elsewhere)
    os.symlink(elsewhere, store.run_dir(rid) / "resume.pt")
    with pytest.raises(StoreError, match="is a link"):
        store.load_resume(rid)


@pytest.mark.subprocess
def test_a_dashboard_job_waits_for_the_same_configuration_training_in_another_process(cache_dir):
    from dpviz.jobs import JobManager
    from dpviz.runner import training_modules

    training_modules()  # this process's imports done: the job reaches the store while the command trains
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DPVIZ_BACKGROUND_ANALYSES": "off"}
    cli_run = subprocess.Popen([sys.executable, "-m", "dpviz", "--cache-dir", str(cache_dir), *ARGV, "--epochs", "40"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cfg = RunConfig(**{**CFG, "epochs": 40})
    deadline = time.time() + 120
    while not runs_of(cache_dir, cfg) and time.time() < deadline:  # the command has claimed it
        time.sleep(0.2)
    (other,) = runs_of(cache_dir, cfg)
    jm = JobManager(cache_dir, max_workers=1, analyses=False)
    job, phases = jm.submit(cfg), set()
    while not job.done and time.time() < deadline:
        phases.add(jm.state(job)["phase"])
        time.sleep(0.1)
    cli_run.communicate(timeout=120)
    assert job.summary["waited_for"] == other["run_id"] == job.run_id and "waiting" in phases
    assert "trained once" in jm.state(job)["text"] and len(runs_of(cache_dir, cfg)) == 1
    jm.shutdown(cancel=False)
