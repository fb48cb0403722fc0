"""Budget sweeps as Optuna studies: end to end, resumable, split between workers."""

import json
import os
import subprocess
import sys

import optuna
import pytest

import dpviz
from dpviz import sweeps
from dpviz.config import RunConfig
from dpviz.store import Store

pytestmark = pytest.mark.slow
BASE = dict(epochs=1, batch_size=512, eval_every=50)


def cli(env, *args):
    return subprocess.run([sys.executable, "-m", "dpviz", *args], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.subprocess
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


@pytest.mark.subprocess
def test_noise_sweep_compares_dp_sgd_with_the_banded_mechanism_it_is_given(cli_env, cache_dir):
    r = cli(cli_env, "sweep", "noise", "--strategy", "fft", "--epsilon", "8", "--band-counts", "1", "2",
            "--seeds", "0", "--epochs", "1", "--batch-size", "512", "--mechanism", "bandmf-momentum", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    stored = {row["run_id"]: Store(cache_dir).get_run(row["run_id"])["config"] for row in rows}
    assert sorted((c["mechanism"], c["bands"]) for c in stored.values()) == [("bandmf-momentum", 2), ("dp-sgd", 1)]
    assert all(row["epsilon_spent"] <= 8.0 for row in rows)


def test_a_one_point_budget_grid_finishes(cache_dir):
    """Optuna's GridSampler failed every one-point grid after its run (KeyError 'grid_id')."""
    study = sweeps.create_budget_sweep(RunConfig(**BASE), sweeps.budget_grid(epsilons=["1"], fractions=[0.5],
                                                                            seeds=[0]), cache_dir=cache_dir)
    done = sweeps.work(study, run=dpviz.run, cache_dir=cache_dir)
    assert len(done) == 1 and done[0]["epsilon_spent"] <= 1
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.COMPLETE]


def test_resume_runs_only_missing_points(cache_dir):
    base = RunConfig(**BASE)
    space = sweeps.budget_grid(epsilons=["2"], fractions=[0.0, 0.5, 1.0], seeds=[0])
    study = sweeps.create_budget_sweep(base, space, cache_dir=cache_dir)
    first = sweeps.work(study, run=dpviz.run, cache_dir=cache_dir, max_trials=2)  # "stopped" half-way
    assert len(first) == 2
    study = sweeps.create_budget_sweep(base, space, cache_dir=cache_dir)  # relaunch
    rest = sweeps.work(study, run=dpviz.run, cache_dir=cache_dir)
    assert len(rest) == 1 and not rest[0]["cached"]
    assert len(Store(cache_dir).list_runs()) == 3
    assert len(sweeps.table(study)) == 3


@pytest.mark.subprocess
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


@pytest.mark.subprocess
def test_tuning_finds_better_learning_rate_than_a_bad_start(cli_env, cache_dir):
    bad = RunConfig(strategy="fft", epsilon=1.0, epochs=2, lr_ft=3.0)
    import dpviz
    bad_acc = dpviz.run(bad, cache_dir=cache_dir)["test_accuracy"]
    r = cli(cli_env, "tune", "--strategy", "fft", "--epsilon", "1", "--epochs", "2", "2", "--lr-ft", "0.001", "3",
            "--trials", "6", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    rows, cost = out["trials"], out["privacy"]
    assert len(rows) == 6 and all(0.001 <= row["lr_ft"] <= 3 for row in rows)
    # six trials at ε ≤ 1 each, composed: well over any one trial's ε, and never more than 6
    assert cost["trials"] == 6 and max(cost["per_trial_epsilon"]) < cost["composed_epsilon"] <= 6.0
    assert max(row["test_accuracy"] for row in rows) > bad_acc + 0.05
    assert all(row["epsilon_spent"] <= 1.0 for row in rows)


@pytest.mark.subprocess
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


@pytest.mark.subprocess
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


@pytest.mark.subprocess
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


# --- kill -9: a relaunch finishes every point exactly once -----------------------------------------
KILLED = dict(epochs="1", batch_size="512", lr_lp="0.5", lr_ft="0.05")
SWEEP = ["sweep", "budget", "--epsilon", "2", "--fractions", "0", "0.5", "1", "--seeds", "0", "--workers", "1",
         "--json", *[a for k, v in KILLED.items() for a in ("--" + k.replace("_", "-"), v)]]


def killed_sweep(cache_dir, cli_env, then: str):
    """The study `SWEEP` makes, and a worker process that took one of its points, ran ``then`` and died of
    SIGKILL. The dead worker is left unreaped (a zombie), as a relaunch right after a kill finds it."""
    base = RunConfig(**{k: float(v) if k.startswith("lr") else int(v) for k, v in KILLED.items()})
    space = sweeps.budget_grid(epsilons=["2.0"], fractions=[0.0, 0.5, 1.0], seeds=[0])  # as the command spells ε
    study = sweeps.create_budget_sweep(base, space, cache_dir=cache_dir)
    code = ("import os, signal, time, optuna\nfrom dpviz import runner, sweeps\nfrom dpviz.sweeps import trials\n"
            f"study = optuna.load_study(study_name={study.study_name!r}, storage=sweeps.storage(None, {str(cache_dir)!r}))\n"
            "study.set_user_attr(trials.REGISTERED + trials.process_token(), time.time())\n"
            f"trial = study.ask()\n{then}\nos.kill(os.getpid(), signal.SIGKILL)\n")
    child = subprocess.Popen([sys.executable, "-c", code], env=cli_env)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped
    return study, child


def relaunch(capsys, cache_dir):
    from dpviz import cli

    code = cli.main(["--cache-dir", str(cache_dir), *SWEEP])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


@pytest.mark.subprocess
def test_a_point_taken_by_a_worker_killed_before_it_wrote_its_owner_runs_on_relaunch(cli_env, cache_dir, capsys):
    """The reported loss: killed between `ask` and its owner, a RUNNING trial with no owner was never run."""
    study, child = killed_sweep(cache_dir, cli_env, then="")
    taken = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert len(taken) == 1 and "owner" not in taken[0].user_attrs
    rows = relaunch(capsys, cache_dir)
    child.wait()
    assert sorted(r["lp_fraction"] for r in rows) == [0.0, 0.5, 1.0]
    assert sorted(t.params["lp_fraction"] for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) \
        == [0.0, 0.5, 1.0]  # exactly once each, in the study the test made
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING))


@pytest.mark.subprocess
def test_a_point_whose_dead_owner_finished_its_run_is_answered_from_the_store(cli_env, cache_dir, capsys):
    """Killed after its run finished in the store but before telling the study: the relaunch re-runs the
    point, which the store answers by config hash; nothing trains twice."""
    then = ("trial.set_user_attr('owner', trials.process_token())\n"
            "runner.run(trials.config_of(study, trial), cache_dir=%r)" % str(cache_dir))
    study, child = killed_sweep(cache_dir, cli_env, then=then)
    [finished] = Store(cache_dir).list_runs("finished")
    rows = relaunch(capsys, cache_dir)
    child.wait()
    assert len(rows) == 3 and len({r["lp_fraction"] for r in rows}) == 3
    assert finished["run_id"] in {r["run_id"] for r in rows}
    assert len(Store(cache_dir).list_runs()) == 3  # the dead worker's run reused, not retrained


@pytest.mark.subprocess
def test_an_ownerless_trial_is_left_alone_while_another_registered_worker_lives(cache_dir):
    """A live worker between `ask` and writing its owner looks like a dead one's trial; its registration
    tells them apart."""
    from dpviz.sweeps import trials

    study = sweeps.create_budget_sweep(RunConfig(**BASE), sweeps.budget_grid(epsilons=["1"], fractions=[0.5],
                                                                            seeds=[0]), cache_dir=cache_dir)
    other = subprocess.Popen(["sleep", "60"])
    try:
        study.set_user_attr(trials.REGISTERED + trials.process_token(other.pid), 0.0)
        study.ask()  # RUNNING, no owner: as the live `other` would hold it for a moment
        assert trials.orphans(study, trials.process_token()) == []
    finally:
        other.kill()
        other.wait()
    assert [t.number for t in trials.orphans(study, trials.process_token())] == [0]


def test_a_stale_journal_lock_costs_a_relaunch_no_wait(cache_dir):
    """A writer killed inside an append leaves optuna.journal.lock; Optuna's default waited 30 s on it."""
    import time

    sweeps.storage(None, cache_dir)
    lock = cache_dir / "optuna.journal.lock"
    lock.touch()
    os.utime(lock, (time.time() - 60, time.time() - 60))  # the kill was a minute ago
    t0 = time.monotonic()
    sweeps.create_budget_sweep(RunConfig(**BASE), sweeps.budget_grid(epsilons=["1"], fractions=[0.5], seeds=[0]),
                               cache_dir=cache_dir)
    assert time.monotonic() - t0 < 2 and not lock.exists()


def test_a_short_table_is_an_error_not_rc_0(cache_dir, capsys):
    """A point held by a worker on another machine (not checkable from here) is not in the table: the
    command says so and exits non-zero."""
    from dpviz import cli

    args = ["sweep", "budget", "--epsilon", "2", "--fractions", "0", "1", "--seeds", "0", "--epochs", "1",
            "--batch-size", "512", "--workers", "1"]
    study = sweeps.create_budget_sweep(RunConfig(epochs=1, batch_size=512), sweeps.budget_grid(
        epsilons=["2.0"], fractions=[0.0, 1.0], seeds=[0]), cache_dir=cache_dir)
    study.ask().set_user_attr("owner", "another-machine:4242:1")
    assert cli.main(["--cache-dir", str(cache_dir), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("dpviz: error: sweep: only 1 of 2 points finished"), err
    assert len(Store(cache_dir).list_runs("finished")) == 1


def test_workers_are_capped_at_the_points_waiting(cache_dir, capsys):
    from dpviz import cli

    code = cli.main(["--cache-dir", str(cache_dir), "sweep", "budget", "--epsilon", "2", "--fractions", "0.5",
                     "--seeds", "0", "--epochs", "1", "--batch-size", "512", "--workers", "6", "--json"])
    out = capsys.readouterr()
    assert code == 0 and len(json.loads(out.out)) == 1
    assert out.err.strip().splitlines() == [f"dpviz: note: 1 worker instead of 6 (1 trial to run on {os.cpu_count()} "
                                            "cores)"]


def test_points_and_ranges_are_checked_by_the_library_naming_the_field():
    from dpviz.errors import ConfigError

    base = RunConfig(**BASE)
    sweeps.check_points(base, [{"lp_fraction": 0.5}, {"seed": 3}, {"epsilon": "inf"}])
    with pytest.raises(ConfigError, match="^lp_fraction: "):
        sweeps.check_points(base, [{"seed": 1}, {"lp_fraction": 2.0}])
    assert sweeps.check_ranges(base, {"lr_ft": [0.001, 1.0]}) == {"lr_ft": [0.001, 1.0]}
    for ranges, field in (({"lr_ft": [1.0, float("inf")]}, "lr_ft"), ({"batch_size": [0.5, 8]}, "batch_size")):
        with pytest.raises(ConfigError, match=f"^{field}: "):
            sweeps.check_ranges(base, ranges)


def test_pages_are_not_offered_the_proxy_searches_of_auto_rates(cache_dir):
    """A user's search and an "auto" rate's proxy search (marked ``auto``): the Tuning page's picker
    (`studies(..., auto=False)`) lists the user's only; the command line still sees both."""
    from dpviz.autotune import proxy

    cfg = RunConfig(strategy="fft", epochs=1, batch_size=512, epsilon=8.0)
    mine = sweeps.create_search(cfg, {"lr_ft": [0.003, 0.3]}, trials=3, cache_dir=cache_dir)
    proxy.search(cfg, ["lr_ft"], cache_dir=cache_dir, trials=2, run=False)  # created, marked, not run
    offered = [s.study_name for s in sweeps.studies(cache_dir=cache_dir, kind="tune", auto=False)]
    assert offered == [mine.study_name]
    assert len(sweeps.studies(cache_dir=cache_dir, kind="tune")) == 2
