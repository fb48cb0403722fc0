"""Who made a run: every stored run has a kind (user, trial, search); searches' runs are kept out of sight
by default, and runs carry enough feature checkpoints for the analysis pages."""

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

import dpviz
from dpviz import results
from dpviz.training import execute
from dpviz.cli import main
from dpviz.config import RunConfig
from dpviz.errors import ConfigError
from dpviz.store import SHOWN, Store

OLD = Path(__file__).parent / "data" / "store_before_layers"


def stored(store: Store, kind: str, **cfg) -> str:
    """A finished run of ``kind`` written straight to the store (nothing trains)."""
    c = RunConfig(**{"strategy": "lp", "lr_lp": 0.5, **cfg}).fixed_rates()
    rid = store.create_run(c.hash(), c.to_json(), 10, kind=kind)
    store.finish_run(rid, "finished", summary={"run_id": rid, "config": c.to_dict(), "config_hash": c.hash(),
                                              "test_accuracy": 0.5, "epsilon_spent": 1.0})
    return rid


def test_an_old_store_opens_with_kind_user_but_its_search_trials_marked(tmp_path):
    shutil.copy(OLD / "runs.sqlite", tmp_path / "runs.sqlite")
    search_cfg = RunConfig(strategy="fft", dataset="glyphs", lr_ft=0.01, seed=0, eval_every=10**6)
    with sqlite3.connect(tmp_path / "runs.sqlite") as c:  # a search trial stored before kinds existed
        c.execute("INSERT INTO runs(run_id, config_hash, config_json, status) VALUES (?,?,?,?)",
                  ("old-search", search_cfg.hash(), search_cfg.to_json(), "finished"))
    store = Store(tmp_path)
    kinds = {r["run_id"]: r["kind"] for r in store.list_runs()}
    assert kinds.pop("old-search") == "search" and set(kinds.values()) == {"user"} and len(kinds) == 7
    assert len(Store(tmp_path).list_runs(kind=SHOWN)) == 7  # opening it again migrates nothing twice


def test_list_runs_filters_by_kind_and_a_user_request_claims_a_search_run(cache_dir):
    store = Store(cache_dir)
    ids = {k: stored(store, k, epsilon=e) for k, e in (("user", 1.0), ("trial", 2.0), ("search", 4.0))}
    assert [r["run_id"] for r in store.list_runs(kind="search")] == [ids["search"]]
    assert [r["run_id"] for r in results.shown_runs(store)] == [ids["user"], ids["trial"]]
    assert len(results.shown_runs(store, search=True)) == 3
    assert [r["run_id"] for r in results.runs_of(store, "lp")] == [ids["user"], ids["trial"]]  # the user's own first
    assert results.run_label(store.get_run(ids["trial"])).endswith("· trial")
    with pytest.raises(ConfigError, match="kind"):
        store.list_runs(kind="helper")
    s = execute.run(RunConfig(strategy="lp", lr_lp=0.5, epsilon=4.0).fixed_rates(), store=store)  # by hash, whatever the kind
    assert s["cached"] and s["run_id"] == ids["search"] and store.get_run(ids["search"])["kind"] == "user"
    store.claim(ids["user"], "search")
    assert store.get_run(ids["user"])["kind"] == "user"  # a run is never handed back to a search


def test_cli_list_shows_user_runs_and_trials_and_all_adds_searches(cache_dir, monkeypatch, capsys):
    monkeypatch.setenv("DPVIZ_CACHE_DIR", str(cache_dir))
    store = Store(cache_dir)
    ids = {k: stored(store, k, epsilon=e) for k, e in (("user", 1.0), ("trial", 2.0), ("search", 4.0))}
    assert main(["list", "--json"]) == 0
    assert {r["run_id"]: r["kind"] for r in json.loads(capsys.readouterr().out)} == \
        {ids["user"]: "user", ids["trial"]: "trial"}
    assert main(["list"]) == 0
    out = capsys.readouterr()
    assert "finished    user" in out.out and "finished    trial" in out.out and ids["search"] not in out.out
    assert "1 search run(s)" in out.err and "--all" in out.err
    assert main(["list", "--all"]) == 0
    assert f"finished    search {ids['search']}" in capsys.readouterr().out


def test_default_runs_store_about_ten_checkpoints_and_minus_one_start_and_end(cache_dir, fast_cfg):
    store = Store(cache_dir)
    auto = dpviz.run(fast_cfg(strategy="lp", lr_lp=0.5), store=store)
    steps = store.feature_steps(auto["run_id"])
    assert 8 <= len(steps) <= 12 and steps[0] == 0 and steps[-1] == auto["total_steps"]
    ends = dpviz.run(fast_cfg(strategy="lp", lr_lp=0.5, checkpoint_every=-1), store=store)
    assert store.feature_steps(ends["run_id"]) == [0, ends["total_steps"]]
    search = execute.run(fast_cfg(strategy="lp", lr_lp=0.3).fixed_rates(), store=store, kind="search")  # nobody looks at them
    assert len(store.feature_steps(search["run_id"])) == 2 and store.get_run(search["run_id"])["kind"] == "search"
    with pytest.raises(ConfigError, match="checkpoint_every"):
        RunConfig(checkpoint_every=-2)


def test_the_store_signature_moves_when_a_shown_run_is_stored_or_ends(tmp_path):
    """What the Runs page polls to redraw for runs of other processes: user runs move it, search runs do not."""
    from dpviz.store import Store

    store = Store(tmp_path)
    empty = store.signature()
    rid = store.create_run("a" * 16, "{}", 10)
    started = store.signature()
    store.finish_run(rid, "finished", summary={})
    ended = store.signature()
    assert len({empty, started, ended}) == 3
    store.create_run("b" * 16, "{}", 10, kind="search")
    assert store.signature() == ended
