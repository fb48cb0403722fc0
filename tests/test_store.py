"""The run store: concurrent writers, killed runs, deletion, atomic files."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from dpviz.store.artifacts import VERSIONS
from dpviz.errors import StoreError
from dpviz.store import Store


def test_create_finish_list_and_metrics(tmp_path):
    s = Store(tmp_path)
    rid = s.create_run("abcdef0123456789", '{"a":1}', total_steps=3)
    s.log_metrics(rid, [(1, "loss", 2.0), (2, "loss", 1.5), (2, "epsilon", None)])
    s.finish_run(rid, "finished", summary={"run_id": rid, "test_accuracy": 0.5})
    run = s.get_run(rid)
    assert run["status"] == "finished" and run["summary"]["test_accuracy"] == 0.5
    assert run["config"] == {"a": 1}
    assert s.metrics(rid)["loss"] == [(1, 2.0), (2, 1.5)]
    assert s.find_finished("abcdef0123456789")["run_id"] == rid
    assert [e["kind"] for e in s.events(rid)] == ["created", "finished"]


def test_threads_write_at_once_without_lock_errors(tmp_path):
    s = Store(tmp_path)
    ids = [s.create_run(f"{i:016x}", "{}") for i in range(6)]
    errors = []

    def writer(rid):
        try:
            for step in range(60):
                s.log_metrics(rid, [(step, "loss", float(step)), (step, "acc", 0.1)])
                s.update_run(rid, step=step)
        except Exception as e:  # noqa: BLE001 - the test reports any error
            errors.append(e)

    ts = [threading.Thread(target=writer, args=(r,)) for r in ids]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors
    for rid in ids:
        assert len(s.metrics(rid)["loss"]) == 60


WRITER = """
import sys; sys.path.insert(0, {root!r})
from dpviz.store import Store
s = Store({cache!r})
rid = s.create_run("{h}", "{{}}")
for step in range(150):
    s.log_metrics(rid, [(step, "loss", float(step))])
s.finish_run(rid, "finished", summary={{"ok": True}})
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_processes_write_at_once(tmp_path):
    Store(tmp_path)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER.format(root=root, cache=str(tmp_path), h=f"{i:016x}")],
                              stderr=subprocess.PIPE) for i in range(4)]
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read().decode()
    runs = Store(tmp_path).list_runs()
    assert len(runs) == 4 and all(r["status"] == "finished" for r in runs)


@pytest.mark.subprocess
def test_dead_owner_is_marked_interrupted_and_others_kept(tmp_path):
    s = Store(tmp_path)
    done = s.create_run("1" * 16, "{}")
    s.finish_run(done, "finished", summary={"x": 1})
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with sqlite3.connect(s.db) as c:  # a run owned by another, soon dead, process
            c.execute("INSERT INTO runs(run_id, config_hash, config_json, status, owner) VALUES (?,?,?,?,?)",
                      ("dead-run", "2" * 16, "{}", "running", f"{os.uname().nodename}:{p.pid}:0"))
    finally:
        p.kill()
        p.wait()
    assert Store(tmp_path).get_run("dead-run")["status"] == "interrupted"
    assert Store(tmp_path).get_run(done)["summary"] == {"x": 1}
    live = s.create_run("3" * 16, "{}")  # owned by this live process: left alone
    assert Store(tmp_path).get_run(live)["status"] == "running"


def test_delete_removes_rows_and_files_only_for_that_run(tmp_path):
    s = Store(tmp_path)
    a, b = s.create_run("a" * 16, "{}"), s.create_run("b" * 16, "{}")
    for r in (a, b):
        s.save_features(r, 0, {"layer_0": np.ones((2, 3)), "labels": np.array([0, 1])})
        s.log_metrics(r, [(0, "loss", 1.0)])
        s.finish_run(r, "finished", summary={})
    s.delete_run(a)
    assert not s.run_dir(a).exists() and s.run_dir(b).exists()
    assert [r["run_id"] for r in s.list_runs()] == [b]
    assert s.metrics(a) == {} and s.metrics(b)["loss"] == [(0, 1.0)]
    assert s.load_features(b, 0)["layer_0"].shape == (2, 3)
    assert list(s.run_dir(b).rglob("*.tmp")) == []


@pytest.mark.slow
@pytest.mark.subprocess
def test_processes_opening_a_new_store_at_once(tmp_path):
    """Several processes creating the same store simultaneously: no 'database is locked'."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = f"import sys; sys.path.insert(0, {root!r}); from dpviz.store import Store; Store({str(tmp_path)!r})"
    for _ in range(3):
        procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE) for _ in range(6)]
        for p in procs:
            assert p.wait(120) == 0, p.stderr.read().decode()
        for f in tmp_path.iterdir():
            if f.is_file():
                f.unlink()
    with sqlite3.connect(Store(tmp_path).db) as c:
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# --- artifacts: kind and schema stamps, old stores ---------------------------------------------------

def _one_line_error(call, *parts):
    """``call()`` raises a one-line StoreError that names each of ``parts``."""
    with pytest.raises(StoreError) as e:
        call()
    msg = str(e.value)
    assert "\n" not in msg and all(str(p) in msg for p in parts), msg
    return msg


def _state():
    return {"fc.weight": torch.arange(6.0).reshape(2, 3), "fc.bias": torch.tensor([0.5, -1.0])}


def _same_state(a, b):
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_every_artifact_round_trips_with_its_kind(tmp_path):
    s = Store(tmp_path)
    rid = s.create_run("c" * 16, "{}")
    arrays = {"layer_0": np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32), "labels": np.arange(4)}
    s.save_features(rid, 3, arrays)
    back = s.load_features(rid, 3)
    assert back.keys() == arrays.keys() and all(np.array_equal(back[k], arrays[k]) for k in arrays)
    assert s.feature_steps(rid) == [3]
    s.save_weights(rid, 3, _state())
    _same_state(s.load_weights(rid, 3), _state())
    later = {**_state(), "fc.bias": torch.tensor([0.25, 0.0])}  # one tensor changed since step 3
    s.save_weights(rid, 7, later, base=(3, _state()))
    raw = torch.load(s.run_dir(rid) / "weights" / "step_000007.pt", weights_only=True)
    assert set(raw["state_dict"]) | set(raw.get("tensors", {})) == {"fc.bias"}
    _same_state(s.load_weights(rid, 7), later)
    assert s.weight_steps(rid) == [3, 7]
    config = {"strategy": "fft", "epsilon": float("inf"), "batch_size": 256}
    s.save_model(rid, _state(), config)
    model = s.load_model(rid)
    assert model.keys() == {"state_dict", "config"} and model["config"] == config
    _same_state(model["state_dict"], _state())
    raw = torch.load(s.run_dir(rid) / "model.pt", weights_only=True)  # without dpviz: small tensors and the
    assert set(raw["state_dict"]) | set(raw.get("tensors", {})) == _state().keys()  # names of the shared ones
    assert s.load_mask(rid) is None
    doc = {"step": 4, "selection": "sparta", "sparsity": 0.2, "mask": {"fc": [0]}, "rows_per_layer": {"fc": 2}}
    s.save_mask(rid, doc)
    assert s.load_mask(rid) == doc
    s.put_analysis(rid, 3, "knn", '{"k": 5}', {"accuracy": 0.75})
    assert s.get_analysis(rid, 3, "knn", '{"k": 5}') == {"accuracy": 0.75}
    assert s.get_analysis(rid, 3, "knn", '{"k": 7}') is None
    assert list(s.run_dir(rid).rglob("*.tmp")) == []
    with pytest.raises(ValueError, match="__kind__"):
        s.save_features(rid, 5, {"__kind__": np.zeros(1)})
    _one_line_error(lambda: s.load_model("nope-000000"), "nope-000000")


def test_an_artifact_of_another_kind_is_a_one_line_error(tmp_path):
    s = Store(tmp_path)
    rid = s.create_run("d" * 16, "{}")
    weights = s.save_weights(rid, 0, _state())
    model = s.run_dir(rid) / "model.pt"
    shutil.copy(weights, model)  # a checkpoint where the final model should be
    _one_line_error(lambda: s.load_model(rid), model, "holds weights", "expected model")
    s.save_model(rid, _state(), {"a": 1})
    shutil.copy(model, weights)
    _one_line_error(lambda: s.load_weights(rid, 0), weights, "holds model", "expected weights")
    torch.save(_state(), model)  # an unstamped (old-format) state dict is weights, not a model
    _one_line_error(lambda: s.load_model(rid), model, "holds weights", "expected model")
    model.write_text("not a torch file")
    _one_line_error(lambda: s.load_model(rid), model, "cannot be read as model")
    mask = s.save_mask(rid, {"mask": {}})
    mask.write_text(json.dumps({"__kind__": "features", "__schema__": 1, "mask": {}}))
    _one_line_error(lambda: s.load_mask(rid), mask, "holds features", "expected mask")
    mask.write_text(json.dumps({"something": "else"}))
    _one_line_error(lambda: s.load_mask(rid), mask, "expected mask")
    feats = s.save_features(rid, 0, {"labels": np.arange(3)})
    np.savez(feats, labels=np.arange(3), __kind__=np.asarray("weights"), __schema__=np.asarray(1))
    _one_line_error(lambda: s.load_features(rid, 0), feats, "holds weights", "expected features")
    s.put_analysis(rid, 0, "knn", "{}", {"accuracy": 1.0})
    with sqlite3.connect(s.db) as c:
        c.execute("UPDATE analyses SET kind='mask'")
    _one_line_error(lambda: s.get_analysis(rid, 0, "knn", "{}"), "analysis knn", rid, "holds mask", "expected analysis")


def test_an_artifact_from_a_newer_schema_is_a_one_line_error(tmp_path):
    s = Store(tmp_path)
    rid = s.create_run("e" * 16, "{}")
    newer = {k: v + 1 for k, v in VERSIONS.items()}
    feats = s.save_features(rid, 0, {"labels": np.arange(3)})
    np.savez(feats, labels=np.arange(3), __kind__=np.asarray("features"), __schema__=np.asarray(newer["features"]))
    _one_line_error(lambda: s.load_features(rid, 0), feats, f"schema {newer['features']}", "upgrade dpviz")
    weights = s.save_weights(rid, 0, _state())
    torch.save({"__kind__": "weights", "__schema__": newer["weights"], "state_dict": _state()}, weights)
    _one_line_error(lambda: s.load_weights(rid, 0), weights, f"weights written by schema {newer['weights']}")
    model = s.save_model(rid, _state(), {})
    torch.save({"__kind__": "model", "__schema__": newer["model"], "state_dict": _state(), "config": {}}, model)
    _one_line_error(lambda: s.load_model(rid), model, f"model written by schema {newer['model']}")
    mask = s.save_mask(rid, {"mask": {}})
    mask.write_text(json.dumps({"__kind__": "mask", "__schema__": newer["mask"], "mask": {}}))
    _one_line_error(lambda: s.load_mask(rid), mask, f"mask written by schema {newer['mask']}")
    s.put_analysis(rid, 0, "knn", "{}", {"accuracy": 1.0})
    with sqlite3.connect(s.db) as c:
        c.execute("UPDATE analyses SET schema_version=?", (newer["analysis"],))
    _one_line_error(lambda: s.get_analysis(rid, 0, "knn", "{}"), "analysis knn", f"schema {newer['analysis']}")


# The tables exactly as stores before artifact stamps created them.
OLD_SCHEMA = """
CREATE TABLE runs (
  run_id TEXT PRIMARY KEY, config_hash TEXT NOT NULL, config_json TEXT NOT NULL,
  status TEXT NOT NULL, created REAL, started REAL, finished REAL, owner TEXT,
  step INTEGER DEFAULT 0, total_steps INTEGER, summary_json TEXT, error TEXT);
CREATE INDEX runs_hash ON runs(config_hash, status);
CREATE TABLE metrics (
  run_id TEXT NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, value REAL,
  PRIMARY KEY (run_id, name, step)) WITHOUT ROWID;
CREATE TABLE events (
  run_id TEXT NOT NULL, time REAL NOT NULL, kind TEXT NOT NULL, message TEXT);
CREATE INDEX events_run ON events(run_id, time);
CREATE TABLE analyses (
  run_id TEXT NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, params_json TEXT NOT NULL,
  result_json TEXT NOT NULL, created REAL, PRIMARY KEY (run_id, step, name, params_json)) WITHOUT ROWID;
"""


def test_a_store_written_before_artifact_stamps_still_opens_and_reads(tmp_path):
    rid, run = "0123abcd-a1b2c3", tmp_path / "runs" / "0123abcd-a1b2c3"
    with sqlite3.connect(tmp_path / "runs.sqlite") as c:  # the old code's tables and rows
        c.executescript(OLD_SCHEMA)
        c.execute("INSERT INTO runs(run_id, config_hash, config_json, status, created, owner) VALUES (?,?,?,?,?,?)",
                  (rid, "0123abcd" * 2, '{"strategy": "sparse"}', "finished", 1.0, "h:1:1"))
        c.execute("INSERT OR REPLACE INTO analyses VALUES (?,?,?,?,?,?)",
                  (rid, 4, "knn", '{"k": 5}', json.dumps({"accuracy": 0.5}), 2.0))
    # the old code's files, written as it wrote them
    arrays = {"layer_0": np.ones((2, 3), np.float32), "labels": np.array([0, 1])}
    (run / "features").mkdir(parents=True)
    np.savez(open(run / "features" / "step_000004.npz", "wb"), **arrays)
    (run / "weights").mkdir()
    torch.save({k: v.detach().cpu() for k, v in _state().items()}, run / "weights" / "step_000004.pt")
    torch.save({"state_dict": _state(), "config": {"strategy": "sparse", "epsilon": 1.0}}, run / "model.pt")
    doc = {"step": 4, "selection": "sparta", "sparsity": 0.2, "mask": {"fc": [1]}, "rows_per_layer": {"fc": 2}}
    open(run / "mask.json", "w").write(json.dumps(doc))

    s = Store(tmp_path)
    assert s.get_run(rid)["status"] == "finished"
    back = s.load_features(rid, 4)
    assert back.keys() == arrays.keys() and all(np.array_equal(back[k], arrays[k]) for k in arrays)
    _same_state(s.load_weights(rid, 4), _state())
    model = s.load_model(rid)
    assert model["config"] == {"strategy": "sparse", "epsilon": 1.0}
    _same_state(model["state_dict"], _state())
    assert s.load_mask(rid) == doc
    assert s.get_analysis(rid, 4, "knn", '{"k": 5}') == {"accuracy": 0.5}
    s.put_analysis(rid, 8, "knn", '{"k": 5}', {"accuracy": 0.6})  # new rows beside old ones
    assert Store(tmp_path).get_analysis(rid, 8, "knn", '{"k": 5}') == {"accuracy": 0.6}
    assert s.get_analysis(rid, 4, "knn", '{"k": 5}') == {"accuracy": 0.5}


def test_a_garbled_run_row_is_left_out_or_marked_and_can_still_be_deleted(tmp_path):
    """Garbled JSON in a runs row: lists leave it out (or mark it when asked), lookups say what to do, the
    cache never answers from it, and delete (the advice) removes it."""
    s = Store(tmp_path)
    good, bad = s.create_run("a" * 16, "{}"), s.create_run("a" * 16, "{}")
    for rid in (good, bad):
        s.finish_run(rid, "finished", summary={"run_id": rid})
    with sqlite3.connect(s.db) as c:
        c.execute("UPDATE runs SET summary_json='{\"cut' WHERE run_id=?", (bad,))
    assert [r["run_id"] for r in s.list_runs()] == [good]
    marked = s.list_runs(damaged=True)
    assert [r["status"] for r in marked] == ["finished", "damaged"] and "summary_json" in marked[1]["error"]
    _one_line_error(lambda: s.get_run(bad), bad, "summary_json", f"dpviz delete {bad}")
    assert s.find_finished("a" * 16)["run_id"] == good  # the newer, garbled one answers nothing
    s.delete_run(bad)
    assert [r["run_id"] for r in s.list_runs(damaged=True)] == [good]
