"""What the privacy promise asks of the seams between runs, each as a test: a grid refused whole before any of it
trains; every forced retrain saying that it spends the budget again, whatever the path and the timing; a waiting
request and a relaunched private search going on with the run that stopped; a pass cut shorter than a run's first
checkpoint still getting further; a refusal creating nothing; a linked tensor shard refused before training; and
a run's summary checked against its hash wherever it is read."""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import warnings

import pytest

import dpviz
from dpviz import cli, runner
from dpviz.config import RunConfig
from dpviz.errors import Cancelled, ConfigError, StoreError
from dpviz.store import Store

TINY = dict(strategy="fft", epochs=2, lr_ft=0.05)  # 12 steps of the default digits task
LONG = dict(strategy="fft", epochs=8, lr_ft=0.05, checkpoint_every=4)  # 48 steps, a snapshot every 4


def runs_of(cache_dir, cfg: RunConfig) -> list[dict]:
    """The stored runs of ``cfg`` as a request resolves it ("auto" rates resolved: the key it is stored under)."""
    store = Store(cache_dir)
    key = runner.lookup(cfg, store)[0].hash()
    return [r for r in store.list_runs(kind=None) if r["config_hash"] == key]


def one_line(code: int, capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


# --- a grid is validated whole before any of it trains ---------------------------------------------------------

def test_a_noise_sweep_with_a_point_no_run_can_take_is_refused_before_any_point_trains(cache_dir, capsys):
    """b = 6 at B = 256 has b·q > 1: the sweep used to train b = 1 (spending its ε), then fail on b = 6 with
    "1 worker(s) failed; relaunch to resume", and say only that at every relaunch."""
    args = ["--cache-dir", str(cache_dir), "sweep", "noise", "--band-counts", "1", "6", "--epsilon", "8", "--epochs",
            "1", "--workers", "1"]
    for _ in range(2):  # and again: the same line, not a relaunch hint
        line = one_line(cli.main(args), capsys)
        assert line.startswith("dpviz: error: bands: at most 1/q") and "got 6" in line, line
    assert Store(cache_dir).list_runs(kind=None) == []
    assert not (cache_dir / "optuna.journal").exists() or (cache_dir / "optuna.journal").stat().st_size == 0


def test_the_library_refuses_such_a_grid_before_writing_a_study(cache_dir):
    from dpviz import sweeps

    points = sweeps.noise_points(epsilons=["8"], band_counts=[1, 6], seeds=[0])
    with pytest.raises(ConfigError, match="^bands: at most 1/q"):
        sweeps.create_grid_sweep("noise", RunConfig(epochs=1), points, cache_dir=cache_dir)
    assert sweeps.studies(cache_dir=cache_dir) == []


# --- every forced retrain says so ------------------------------------------------------------------------------

def said_again(seen) -> list[str]:
    """The messages of the warnings ``seen`` that say a privacy budget is spent again."""
    return [str(w.message) for w in seen if "spends its privacy budget" in str(w.message)]


def test_a_forced_run_from_python_warns_that_it_spends_the_budget_again(cache_dir):
    cfg = RunConfig(**TINY)
    first = dpviz.run(cfg, cache_dir=cache_dir)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        dpviz.run(cfg, cache_dir=cache_dir, force=True)
    (said,) = said_again(seen)
    assert f"stored already (run {first['run_id']})" in said and "(ε = 1) again" in said, said
    (w,) = [w for w in seen if str(w.message) == said]
    assert w.category is runner.PrivacyBudgetWarning and w.filename == __file__  # the caller's line, not dpviz's


@pytest.mark.slow
def test_two_forced_runs_started_together_both_say_so(cache_dir):
    """Neither finds the other stored when it starts: the one that claims first says so as it ends."""
    cfg = RunConfig(**LONG)
    threads = [threading.Thread(target=dpviz.run, args=(cfg,), kwargs=dict(cache_dir=cache_dir, force=True))
               for _ in range(2)]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    runs = [r["run_id"] for r in runs_of(cache_dir, cfg)]
    said = said_again(seen)
    assert len(runs) == 2 and len(said) == 2, (runs, said)
    assert all(all(rid in s for rid in runs) for s in said), said  # each names itself and the other


def test_a_forced_job_of_the_job_manager_warns_too(cache_dir):
    from dpviz.jobs import JobManager

    cfg = RunConfig(**TINY)
    dpviz.run(cfg, cache_dir=cache_dir)
    jm = JobManager(cache_dir, max_workers=1, analyses=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        job = jm.submit(cfg, force=True)
        job.wait(300)
    jm.shutdown(cancel=False)
    assert job.status == "finished", job.error
    assert len(said_again(seen)) == 1, [str(w.message) for w in seen]


# --- a waiting request goes on with the run it waited for -----------------------------------------------------

def _waiting_for_a_stopped_run(cache_dir, cfg: RunConfig, stop_at: int) -> tuple[str, dict]:
    """Request A trains ``cfg`` and is cancelled at step ``stop_at`` while request B waits for it; (A's run id,
    B's summary)."""
    stop, waits, out = threading.Event(), [], []

    def a():
        with pytest.raises(Cancelled):
            dpviz.run(cfg, cache_dir=cache_dir, cancel=stop,
                      progress=lambda step, *_: step >= stop_at and waits and stop.set())

    first = threading.Thread(target=a)
    first.start()
    deadline = time.time() + 120
    while not runs_of(cache_dir, cfg) and time.time() < deadline:  # A has claimed it
        time.sleep(0.05)
    second = threading.Thread(target=lambda: out.append(dpviz.run(cfg, cache_dir=cache_dir, on_wait=waits.append)))
    second.start()
    first.join(300)
    second.join(300)
    (run,) = runs_of(cache_dir, cfg)
    assert out and waits == [run["run_id"]], (out, waits)
    return run["run_id"], out[0]


@pytest.mark.slow
def test_a_waiting_request_goes_on_with_the_run_it_waited_for_from_its_snapshot(cache_dir):
    """A stopped at a snapshot (cancelled by its own requester, or stored so as its server stops): B used to
    train a second run from step 0 beside it."""
    cfg = RunConfig(**LONG)
    rid, summary = _waiting_for_a_stopped_run(cache_dir, cfg, stop_at=9)
    resumed = [e["message"] for e in Store(cache_dir).events(rid) if e["kind"] == "resumed"]
    assert summary["run_id"] == rid and not summary["cached"] and resumed and resumed[0] != "from step 0", resumed
    assert Store(cache_dir).get_run(rid)["status"] == "finished"


@pytest.mark.slow
def test_a_waiting_request_trains_a_run_stopped_before_its_first_snapshot_again_as_that_run(cache_dir):
    """No snapshot to go on from: its seed draws the same steps, so the run trains again from step 0 as the one
    run of its configuration, not as a second run beside it."""
    cfg = RunConfig(**{**LONG, "checkpoint_every": -1})  # the start and the end only: no snapshot
    rid, summary = _waiting_for_a_stopped_run(cache_dir, cfg, stop_at=3)
    assert summary["run_id"] == rid and Store(cache_dir).get_run(rid)["status"] == "finished"
    full = dpviz.run(cfg, cache_dir=cache_dir.parent / "full")  # the same run, trained without a stop
    assert summary["test_accuracy"] == full["test_accuracy"] and summary["epsilon_spent"] == full["epsilon_spent"]


# --- a relaunched private search trains each trial once ----------------------------------------------------------

@pytest.mark.slow
def test_a_private_search_killed_in_a_trial_goes_on_with_it_and_leaves_no_hidden_run(cache_dir):
    """Killed (its row left running under a dead process) at step 4 of its second of K trials, with automatic
    checkpoints: the relaunch used to train that trial again as a K + 1-th run and leave the cut one, hidden."""
    from dpviz.sweeps import private

    class Died(Exception):
        pass

    search = private.PrivateSearch(base=RunConfig(strategy="lp", epochs=2), space={"lr_lp": (0.05, 5.0)},
                                   total_epsilon=8.0, distribution="poisson", mean_trials=3)  # K = 4 drawn
    store, trained = Store(cache_dir), []

    def counted(cfg, **kw):
        summary = runner.run(cfg, **kw)
        trained.append(summary["run_id"]) if not summary.get("cached") else None
        return summary

    def dies(i, k, step=None, total=None):
        if i == 1 and step == 4:
            raise Died

    with pytest.raises(Died):
        private.run_search(search, run=counted, store=store, progress=dies)
    (cut,) = [r for r in store.list_runs(kind=None) if r["status"] != "finished"]
    gone = f"{socket.gethostname()}:{2**22 + 1}:0"  # no such process on this host (above any pid_max)
    with sqlite3.connect(store.db) as c:  # as kill -9 leaves it: running, owned by a process that is gone
        c.execute("UPDATE runs SET status='running', owner=? WHERE run_id=?", (gone, cut["run_id"]))
    entry = private.run_search(search, run=counted, store=Store(cache_dir), progress=lambda *a: None)
    assert entry["trials_drawn"] >= 2 and len(trained) == entry["trials_drawn"], (entry["trials_drawn"], trained)
    assert cut["run_id"] in trained  # the cut trial went on, as itself
    assert [r["run_id"] for r in store.list_runs(kind=None)] == [entry["released_run_id"]]


# --- a pass cut shorter than a run's first checkpoint still gets further -----------------------------------------

def test_stop_after_below_a_runs_first_checkpoint_runs_to_it_and_says_so(cache_dir, capsys):
    """Stopped before its first snapshot, a run used to be cancelled with nothing to go on from: every pass
    started it over and left one more cancelled row."""
    from dpviz import reproduce

    tiny = {"epochs": 6, "checkpoint_every": 8, "lr_lp": 0.5, "lr_ft": 0.01}
    steps = []
    for _ in range(2):
        assert reproduce.run(["000-lpfft"], seeds=(0,), changes=tiny, cache_dir=cache_dir, stop_after=0.01) == []
        steps.append([(Store(cache_dir).load_resume(r["run_id"]) or {}).get("step")
                      for r in Store(cache_dir).list_runs(kind=None)])
    assert steps == [[8], [16]], steps  # one run, one checkpoint further each pass
    notes = [line for line in capsys.readouterr().err.splitlines() if "no checkpoint to go on from yet" in line]
    assert len(notes) == 2 and notes[0].startswith("dpviz: note: stop-after: the time is up"), notes


# --- smaller seams ----------------------------------------------------------------------------------------------

def test_a_refused_private_search_creates_no_store(tmp_path, capsys):
    new = tmp_path / "new"
    line = one_line(cli.main(["--cache-dir", str(new), "tune", "--private", "--total-epsilon", "0.01", "--trials",
                              "poisson", "--strategy", "fft", "--lr-ft", "0.01", "0.1"]), capsys)
    assert "total_epsilon: " in line and not new.exists(), line


def test_a_linked_tensor_shard_is_refused_before_the_run_trains(cache_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cache_dir / "tensors").mkdir()
    os.symlink(elsewhere, cache_dir / "tensors" / "ab")
    trained = []
    with pytest.raises(StoreError, match="tensors/ab is a link: remove it"):
        dpviz.run(RunConfig(**TINY), cache_dir=cache_dir, progress=lambda *a: trained.append(a))
    assert trained == [] and Store(cache_dir).list_runs(kind=None) == []


def _finished(store: Store, cfg: RunConfig) -> str:
    """A finished run of ``cfg`` (as resolved: the key a request looks up), stored without training."""
    cfg = runner.lookup(cfg, store)[0]
    rid = store.create_run(cfg.hash(), cfg.to_json())
    store.finish_run(rid, "finished", summary={"run_id": rid, "config": cfg.to_dict(), "config_hash": cfg.hash(),
                                               "test_accuracy": 0.5, "epsilon_spent": 0.99})
    return rid


def test_an_edited_summary_is_refused_wherever_it_is_read(cache_dir, capsys):
    cfg = RunConfig(**TINY)
    store = Store(cache_dir)
    rid = _finished(store, cfg)
    assert store.get_run(rid)["summary"]["epsilon_spent"] == 0.99
    with sqlite3.connect(store.db) as c:
        c.execute("UPDATE runs SET summary_json=json_set(summary_json, '$.epsilon_spent', 0.1) WHERE run_id=?", (rid,))
    with pytest.raises(StoreError, match=f"^run {rid}: its summary in .* is not the one the run stored"):
        store.get_run(rid)
    with pytest.raises(StoreError, match="is not the one the run stored"):  # answers nothing, trains nothing
        runner.cached(cfg, store=store)
    assert "0.1" not in one_line(cli.main(["--cache-dir", str(cache_dir), "show", rid]), capsys)
    assert cli.main(["--cache-dir", str(cache_dir), "list"]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("damaged") and "is not the one the run stored" in line, line


def test_summaries_stored_before_summaries_were_hashed_still_read_marked_unhashed(tmp_path):
    """A store from before the hash (tests/data/store_before_layers): every summary reads as it was, marked
    "unhashed", and answers its request; a summary stored now is checked."""
    import shutil

    shutil.copy(os.path.join(os.path.dirname(__file__), "data", "store_before_layers", "runs.sqlite"), tmp_path)
    store = Store(tmp_path)
    old = store.list_runs("finished")
    assert old and all(r["summary"] and r["summary_hash"] == "unhashed" for r in old)
    assert runner.summary_of(old[0])["summary_hash"] == "unhashed"
    cfg = RunConfig.from_dict(old[0]["config"], reset_unread=True)
    assert runner.cached(cfg, store=store)["run_id"] == old[0]["run_id"]
    assert store.get_run(_finished(store, RunConfig(**TINY)))["summary_hash"] == "checked"
