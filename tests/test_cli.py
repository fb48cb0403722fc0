"""The command line as a user runs it: real subprocesses, real store."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from dpviz.analyses.service import BACKGROUND
from dpviz.store import Store

# 12 steps; feature checkpoints at 0, 6 and 12 (the default's 11 would cost the detached analyses of the run
# test a curvature estimate each, ≈ 2.5 s apiece)
FAST = ["--epochs", "2", "--eval-every", "5", "--checkpoint-every", "6"]


def dpviz(args, env, timeout=300):
    """``python [-X opt] -m dpviz args``: interpreter options come first in ``args``."""
    opts = args[:2] if args[:1] == ["-X"] else []
    return subprocess.run([sys.executable, *opts, "-m", "dpviz", *args[len(opts):]], env=env, capture_output=True,
                          text=True, timeout=timeout)


def analysed(store, run_id) -> set:
    """{(step, analysis)} of the background analyses stored for ``run_id``."""
    with sqlite3.connect(store.root / "runs.sqlite") as c:
        return set(c.execute("SELECT step, name FROM analyses WHERE run_id = ?", (run_id,)).fetchall())


def db_snapshot(cache_dir):
    db = cache_dir / "runs.sqlite"
    if not db.exists():
        return None
    with sqlite3.connect(db) as c:
        return [c.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in ("runs", "metrics", "events")]


@pytest.mark.subprocess
def test_background_analyses_wait_while_a_run_trains(cli_env, cache_dir, fast_cfg):
    """`analyze all --when-idle` (what a run's detached analyses run) computes nothing while a run of the
    store holds the training lock, then everything once it is released."""
    from dpviz import runner
    from dpviz.training import idle

    run_id = runner.run(fast_cfg(strategy="lp", epochs=1), cache_dir=cache_dir)["run_id"]
    store = Store(cache_dir)
    with idle.training(store.root):
        proc = subprocess.Popen([sys.executable, "-m", "dpviz", "analyze", "all", run_id, "--when-idle", "--json"],
                                env=cli_env, stdout=subprocess.PIPE, text=True)
        locks = Path("/proc/locks")  # Linux's list of file locks, the blocked waiters marked "->"
        deadline = time.time() + (120 if locks.exists() else 4)  # without it: 4 s, long enough to have run
        while time.time() < deadline and not (locks.exists() and any(
                l.split()[1] == "->" and f" {proc.pid} " in l for l in locks.read_text().splitlines())):
            assert proc.poll() is None, "the analyses ran instead of waiting"
            time.sleep(0.2)
        assert time.time() < deadline or not locks.exists(), "the analyses never waited for the lock"
        assert proc.poll() is None and analysed(store, run_id) == set()
    out, _ = proc.communicate(timeout=120)
    wanted = {(step, name) for step in store.feature_steps(run_id) for name in BACKGROUND}
    assert proc.returncode == 0 and analysed(store, run_id) == wanted
    assert {(d["step"], d["analysis"]) for d in json.loads(out)} == wanted


@pytest.mark.slow
@pytest.mark.subprocess
def test_run_json_list_show_delete(cli_env, cache_dir):
    cli_env = {**cli_env, "DPVIZ_BACKGROUND_ANALYSES": "on"}
    r = dpviz(["run", "--strategy", "lp-fft", "--epsilon", "1", "--lp-fraction", "0.3", "--json", *FAST], cli_env)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    for key in ("run_id", "config", "test_accuracy", "epsilon_spent", "delta", "accountant", "phases"):
        assert key in s
    assert s["epsilon_spent"] <= 1.0 and not s["cached"]
    assert [p["name"] for p in s["phases"]] == ["lp", "fft"]
    assert set(s["phases"][0]) == {"name", "steps", "noise_multiplier", "sample_rate", "clip_norm"}
    assert "step" in r.stderr and "100%" in r.stderr  # the progress bar went to stderr
    store = Store(cache_dir)
    steps = store.feature_steps(s["run_id"])
    wanted = {(step, name) for step in steps for name in BACKGROUND}
    assert analysed(store, s["run_id"]) < wanted  # the command returned before its analyses finished
    t0 = time.time()
    while analysed(store, s["run_id"]) != wanted and time.time() - t0 < 180:
        time.sleep(0.5)  # a detached `analyze all` computes them after the command returned
    assert analysed(store, s["run_id"]) == wanted
    again = dpviz(["-X", "importtime", "run", "--strategy", "lp-fft", "--epsilon", "1", "--lp-fraction", "0.3",
                   "--json", *FAST], cli_env)
    assert json.loads(again.stdout)["cached"] and json.loads(again.stdout)["run_id"] == s["run_id"]
    assert "| torch" not in again.stderr and "| dpviz" in again.stderr  # a cached answer never loads torch
    listed = json.loads(dpviz(["list", "--json"], cli_env).stdout)
    assert [x["run_id"] for x in listed] == [s["run_id"]] and listed[0]["status"] == "finished"
    shown = json.loads(dpviz(["show", s["run_id"], "--json"], cli_env).stdout)
    assert shown["test_accuracy"] == s["test_accuracy"] and shown["phases"] == s["phases"]
    assert dpviz(["delete", s["run_id"]], cli_env).returncode == 0
    assert json.loads(dpviz(["list", "--json"], cli_env).stdout) == []
    missing = dpviz(["show", s["run_id"]], cli_env)
    assert missing.returncode == 2 and "run_id" in missing.stderr


@pytest.mark.slow
@pytest.mark.subprocess
def test_config_file_and_flags_override(cli_env, tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('strategy = "lp"\nepsilon = 4.0\nepochs = 1\nseed = 5\n')
    r = dpviz(["run", "--config", str(cfg), "--seed", "6", "--json", "--quiet"], cli_env)
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)["config"]
    assert (c["strategy"], c["epsilon"], c["epochs"], c["seed"]) == ("lp", 4.0, 1, 6)


def write(path, text=None, data=None):
    if data is not None:
        path.write_bytes(data)
    else:
        path.write_text(text)
    return str(path)


BAD = [
    (["--epsilon", "0"], "epsilon"), (["--epsilon", "-2"], "epsilon"),
    (["--delta", "0.01"], "delta"), (["--delta", "0"], "delta"),
    (["--lp-fraction", "1.5"], "lp_fraction"), (["--strategy", "partial", "--tune-blocks", "9"], "tune_blocks"),
    (["--dataset", "cifar10", "--data-dir", "/nonexistent/cifar"], "data_dir"),
    (["--backbone", "resnet18", "--weights", "CORRUPT"], "weights"),
    (["--config", "MALFORMED"], "config"), (["--batch-size", "lots"], "batch_size"),
    (["--no-such-flag", "1"], "arguments"),
]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, backbone_cache):
    """A store holding one finished run, shared by the bad-input tests."""
    d = tmp_path_factory.mktemp("seeded") / "cache"
    d.mkdir()
    os.symlink(backbone_cache, d / "backbones")
    env = dict(os.environ, DPVIZ_CACHE_DIR=str(d), PYTHONPATH=str(ROOT))
    assert dpviz(["run", "--epochs", "1", "--strategy", "lp", "--quiet"], env).returncode == 0
    return d, env


@pytest.mark.slow
@pytest.mark.parametrize("flags,field", BAD, ids=[f for _, f in BAD])
@pytest.mark.subprocess
def test_bad_input_one_line_exit_2_store_untouched(flags, field, seeded, tmp_path):
    cache_dir, cli_env = seeded
    before = db_snapshot(cache_dir)
    assert before[0]  # the stored run is there to be protected
    flags = [write(tmp_path / "w.pt", data=os.urandom(300)) if f == "CORRUPT" else
             write(tmp_path / "bad.json", "{epsilon: 1,,}") if f == "MALFORMED" else f for f in flags]
    r = dpviz(["run", *flags, "--quiet"], cli_env)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert db_snapshot(cache_dir) == before


@pytest.mark.slow
@pytest.mark.subprocess
def test_killed_run_is_marked_interrupted_and_store_survives(cli_env, cache_dir):
    ok = dpviz(["run", "--strategy", "lp", "--epochs", "1", "--json", "--quiet"], cli_env)
    first = json.loads(ok.stdout)["run_id"]
    p = subprocess.Popen([sys.executable, "-m", "dpviz", "run", "--strategy", "fft", "--epochs", "400",
                          "--quiet"], env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # wait until it is mid-run with metrics stored
            runs = [r for r in Store(cache_dir).list_runs() if r["run_id"] != first]
            if runs and runs[0]["step"] >= 20:
                break
            time.sleep(0.3)
        else:
            pytest.fail("the run never got going")
        p.send_signal(signal.SIGKILL)
        p.wait(30)
    finally:
        p.kill()
    store = Store(cache_dir)  # a new start recovers
    killed = store.get_run(runs[0]["run_id"])
    assert killed["status"] == "interrupted"
    assert len(store.metrics(killed["run_id"])["loss"]) >= 10
    assert store.get_run(first)["status"] == "finished" and store.get_run(first)["summary"]["run_id"] == first
    listed = json.loads(dpviz(["list", "--json"], cli_env).stdout)
    assert {r["status"] for r in listed} == {"finished", "interrupted"}


@pytest.mark.slow
@pytest.mark.subprocess
def test_accountants_json_and_bad_input(cli_env):
    from opacus.accountants.utils import get_noise_multiplier

    r = dpviz(["accountants", "--epsilon", "2", "--delta", "1e-5", "--epochs", "3", "--dataset-size", "1437",
               "--batch-sizes", "64", "512", "--json"], cli_env)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {(x["accountant"], x["batch_size"]) for x in rows} == {(a, b) for a in ("rdp", "gdp", "prv", "pld")
                                                                 for b in (64, 512)}
    for x in rows:
        assert x["steps"] == 3 * round(1437 / x["batch_size"]) and x["sample_rate"] == pytest.approx(x["batch_size"] / 1437)
        if x["accountant"] == "pld":  # not Opacus's: checked against dp_accounting in tests/test_pld.py
            continue
        ref = get_noise_multiplier(target_epsilon=2, target_delta=1e-5, sample_rate=x["sample_rate"], steps=x["steps"],
                                   accountant=x["accountant"], epsilon_tolerance=0.005)
        assert x["noise_multiplier"] == pytest.approx(ref, rel=0.02)
    for bad, field in ((["--batch-sizes", "5000"], "batch_sizes"), (["--delta", "2"], "delta"),
                       (["--accountants", "moments"], "accountants")):
        args = {"--epsilon": "2", "--delta": "1e-5", "--epochs": "3", "--dataset-size": "1437", "--batch-sizes": "64"}
        args[bad[0]] = bad[1]
        r = dpviz(["accountants", *[v for kv in args.items() for v in kv]], cli_env)
        assert r.returncode == 2 and r.stderr.startswith(f"dpviz: error: {field}") and len(r.stderr.splitlines()) == 1


def test_a_search_on_the_command_line_names_the_flags_that_skip_it(capsys):
    from dpviz.cli.common import SearchProgress

    bar = SearchProgress(False, ("lr_ft",))
    bar(1, 8)
    bar.step(3, 12)
    bar.close()
    err = capsys.readouterr().err
    assert "lr_ft on auto" in err and "searching 8 short runs on public data" in err and "--lr-ft RATE or --rates grid skips it" in err
    SearchProgress(True, ("lr_ft",))(1, 8)  # --quiet: nothing
    assert capsys.readouterr().err == ""


def documented_runs() -> list[tuple[str, list[str]]]:
    """(page, argv after `run`) of every `dpviz run` command in the README and the getting-started page."""
    import re
    import shlex

    out = []
    for page in ("README.md", "docs/getting-started.md"):
        for line in (ROOT / page).read_text().splitlines():
            m = re.match(r"^(?:\$ )?(?:\.venv/bin/python -m |python -m )?dpviz run (.*?)(?:\s+#.*)?$", line.strip())
            if m:
                out.append((page, shlex.split(m.group(1))))
    return out


def test_every_documented_quick_command_answers_without_a_search(cache_dir, monkeypatch):
    """A newcomer's first commands must not wait for a hidden learning-rate search: each `dpviz run` of the
    README and the getting-started page resolves its rates from the shipped grid (or is a bad-input example)."""
    from dpviz import runner
    from dpviz.cli import build_parser
    from dpviz.cli.common import config_from_args
    from dpviz.errors import ConfigError
    from dpviz.store import Store
    from dpviz.training import calibration

    monkeypatch.setenv("DPVIZ_AUTO_SEARCH", "on")  # as a user has it: off the grid, a search would train
    commands = documented_runs()
    assert len(commands) >= 3
    for page, argv in commands:
        args = build_parser().parse_args(["run", *argv])
        try:  # as `runner.run` resolves: bad input (checked before a search would train) is refused first
            cfg = config_from_args(args)
            calibration.preview(cfg)
        except ConfigError:
            continue  # a documented bad-input example
        _, auto = runner.resolved(cfg, Store(cache_dir), search_ok=False, rates=args.rates)
        assert auto.get("auto", {}).get("source") != "pending", f"{page}: `dpviz run {' '.join(argv)}` would search"
