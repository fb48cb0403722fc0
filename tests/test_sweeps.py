"""Budget sweeps as Optuna studies: end to end, resumable, split between workers."""

import json
import os
import subprocess
import sys

import optuna
import pytest

from dpviz import sweeps
from dpviz.config import RunConfig
from dpviz.store import Store

pytestmark = pytest.mark.slow
BASE = dict(epochs=1, batch_size=512, eval_every=50)


def cli(env, *args):
    return subprocess.run([sys.executable, "-m", "dpviz", *args], env=env, capture_output=True, text=True,
                          timeout=600)


def test_budget_sweep_end_to_end(cli_env, cache_dir):
    r = cli(cli_env, "sweep", "budget", "--epsilon", "1", "8", "--fractions", "0", "1", "--seeds", "0",
            "--epochs", "1", "--batch-size", "512", "--workers", "2", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert sorted((row["epsilon"], row["lp_fraction"]) for row in rows) == [(1.0, 0.0), (1.0, 1.0), (8.0, 0.0),
                                                                          (8.0, 1.0)]
    for row in rows:
        assert row["epsilon_spent"] <= row["epsilon"] and 0 <= row["test_accuracy"] <= 1 and row["test_loss"] > 0
        assert Store(cache_dir).get_run(row["run_id"])["status"] == "finished"


def test_a_one_point_budget_grid_finishes(cache_dir):
    """Optuna's GridSampler failed every one-point grid after its run (KeyError 'grid_id')."""
    study = sweeps.create_budget_sweep(RunConfig(**BASE), sweeps.budget_grid(epsilons=["1"], fractions=[0.5],
                                                                            seeds=[0]), cache_dir=cache_dir)
    done = sweeps.work(study, cache_dir=cache_dir)
    assert len(done) == 1 and done[0]["epsilon_spent"] <= 1
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.COMPLETE]


def test_resume_runs_only_missing_points(cache_dir):
    base = RunConfig(**BASE)
    space = sweeps.budget_grid(epsilons=["2"], fractions=[0.0, 0.5, 1.0], seeds=[0])
    study = sweeps.create_budget_sweep(base, space, cache_dir=cache_dir)
    first = sweeps.work(study, cache_dir=cache_dir, max_trials=2)  # "stopped" half-way
    assert len(first) == 2
    study = sweeps.create_budget_sweep(base, space, cache_dir=cache_dir)  # relaunch
    rest = sweeps.work(study, cache_dir=cache_dir)
    assert len(rest) == 1 and not rest[0]["cached"]
    assert len(Store(cache_dir).list_runs()) == 3
    assert len(sweeps.table(study)) == 3


def test_two_worker_processes_split_trials_without_duplicates(cli_env, cache_dir):
    base = RunConfig(**BASE)
    space = sweeps.budget_grid(epsilons=["1", "4"], fractions=[0.0, 0.5, 1.0], seeds=[0])
    study = sweeps.create_budget_sweep(base, space, cache_dir=cache_dir)
    procs = [subprocess.Popen([sys.executable, "-m", "dpviz", "worker", "--study", study.study_name,
                               "--threads", "1"], env=cli_env) for _ in range(2)]
    assert [p.wait(600) for p in procs] == [0, 0]
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    points = [(t.params["epsilon"], t.params["lp_fraction"]) for t in done]
    assert len(points) == len(set(points)) == 6
    assert len({t.user_attrs["owner"] for t in done}) == 2  # both workers took trials
    assert len(Store(cache_dir).list_runs()) == 6


def test_tuning_finds_better_learning_rate_than_a_bad_start(cli_env, cache_dir):
    bad = RunConfig(strategy="fft", epsilon=1.0, epochs=2, lr_ft=3.0)
    import dpviz
    bad_acc = dpviz.run(bad, cache_dir=cache_dir)["test_accuracy"]
    r = cli(cli_env, "tune", "--strategy", "fft", "--epsilon", "1", "--epochs", "2", "2", "--lr-ft", "0.001", "3",
            "--trials", "6", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 6 and all(0.001 <= row["lr_ft"] <= 3 for row in rows)
    assert max(row["test_accuracy"] for row in rows) > bad_acc + 0.05
    assert all(row["epsilon_spent"] <= 1.0 for row in rows)


def test_worker_stops_when_the_search_budget_is_spent(cli_env, cache_dir):
    base = RunConfig(strategy="lp", **BASE)
    study = sweeps.create_search(base, {"lr_lp": [0.01, 3.0]}, trials=3, cache_dir=cache_dir)
    r = subprocess.run([sys.executable, "-m", "dpviz", "worker", "--study", study.study_name], env=cli_env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 3


@pytest.fixture
def postgres():
    from pg_util import Server, bindir

    if bindir() is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL server binaries missing: .ci/run installs Debian's postgresql")
        pytest.skip("Debian's postgresql is not installed (apt-get install postgresql)")
    server = Server().start()
    yield server
    server.stop()


def test_two_workers_on_postgresql_split_a_study(postgres, cli_env, cache_dir):
    base = RunConfig(**BASE)
    space = sweeps.budget_grid(epsilons=["2"], fractions=[0.0, 0.25, 0.5, 1.0], seeds=[0])
    study = sweeps.create_budget_sweep(base, space, storage_url=postgres.url, cache_dir=cache_dir)
    procs = [subprocess.Popen([sys.executable, "-m", "dpviz", "worker", "--storage", postgres.url, "--threads", "1"],
                              env=cli_env) for _ in range(2)]
    assert [p.wait(600) for p in procs] == [0, 0]
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    points = [t.params["lp_fraction"] for t in done]
    assert sorted(points) == [0.0, 0.25, 0.5, 1.0]  # every point once, none twice
    assert len({t.user_attrs["owner"] for t in done}) == 2
    assert [s.study_name for s in sweeps.studies(postgres.url, kind="budget")] == [study.study_name]
    os.environ["DPVIZ_STORAGE"] = postgres.url  # how a dashboard is pointed at the shared storage
    try:
        assert [s.study_name for s in sweeps.studies(kind="budget", cache_dir=cache_dir)] == [study.study_name]
    finally:
        del os.environ["DPVIZ_STORAGE"]
    rows = sweeps.table(study)
    assert all(r["epsilon_spent"] <= 2.0 for r in rows) and len(Store(cache_dir).list_runs()) == 4


def test_tune_rejects_a_private_proxy(cli_env):
    r = cli(cli_env, "tune", "--lr-ft", "0.001", "1", "--proxy", "digits", "--json")
    assert r.returncode == 2 and "proxy" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_utility_curves_mark_best_accuracy_and_lowest_loss():
    import pandas as pd

    from dpviz import figures

    rows = pd.DataFrame({"epsilon": [1.0] * 6, "lp_fraction": [0, 0.5, 1] * 2, "seed": [0] * 3 + [1] * 3,
                         "test_accuracy": [0.5, 0.7, 0.6, 0.52, 0.72, 0.58], "test_loss": [1.2, 0.9, 0.8, 1.1, 0.95, 0.7]})
    acc, loss = figures.utility_curve(rows), figures.utility_curve(rows, "test_loss")
    assert acc.data[1].x[0] == 0.5 and acc.data[1].y[0] == pytest.approx(0.71)  # ★ at the best mean accuracy
    assert loss.data[1].x[0] == 1 and loss.data[1].y[0] == pytest.approx(0.75)  # ★ at the lowest mean loss
    assert list(acc.data[0].error_y.array) == pytest.approx(list(rows.groupby("lp_fraction")["test_accuracy"].std()))


def test_sparse_profile_points_add_lora_ranks_without_moving_other_runs():
    kw = dict(epsilons=["2"], sparsities=[0.2], selections=["sparta", "bias"], seeds=[0])
    plain, with_lora = sweeps.sparse_points(**kw), sweeps.sparse_points(**kw, lora_ranks=[1, 8])
    assert len({frozenset(p) for p in with_lora}) == 1  # the grid sampler needs one set of fields
    lora = [p for p in with_lora if p["strategy"] == "lora"]
    assert [p["lora_rank"] for p in lora] == [1, 8]
    base = RunConfig(strategy="sparse", epochs=3)
    cfgs = [base.replace(**{**p, "epsilon": 2.0}) for p in with_lora]
    assert [c.hash() for c in cfgs if c.strategy != "lora"] == [base.replace(**{**p, "epsilon": 2.0}).hash()
                                                                   for p in plain]
    assert len({c.hash() for c in cfgs if c.strategy == "lora"}) == 2  # the rank keys LoRA runs only
