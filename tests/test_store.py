"""The run store: concurrent writers, killed runs, deletion, atomic files."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

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
def test_processes_write_at_once(tmp_path):
    Store(tmp_path)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER.format(root=root, cache=str(tmp_path), h=f"{i:016x}")],
                              stderr=subprocess.PIPE) for i in range(4)]
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read().decode()
    runs = Store(tmp_path).list_runs()
    assert len(runs) == 4 and all(r["status"] == "finished" for r in runs)


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
