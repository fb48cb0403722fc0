"""Damaged files: a garbled row, journal, analysis, artifact or cached backbone, an emptied database, an
immutable folder — one line naming the file and what to do (exit 2), nothing stored changed.

The store and the helpers are `test_hardening`'s (a copy of its shared store is damaged per test).
"""

import json
import os
import shutil
import sqlite3
import subprocess

import numpy as np
import pytest

from dpviz import cli
from dpviz.config import RunConfig
from test_hardening import one_line_error, snapshot, stored  # noqa: F401  (stored: the shared store fixture)


def test_damaged_files_name_the_file_and_what_to_do(stored, tmp_path, capsys):
    """A truncated feature checkpoint, truncated weights, a garbage or truncated database: one line each."""
    src, run_id = stored
    cache_dir = tmp_path / "cache"
    shutil.copytree(src, cache_dir, symlinks=True)
    feats = sorted((cache_dir / "runs" / run_id / "features").glob("*.npz"))[-1]
    weights = sorted((cache_dir / "runs" / run_id / "weights").glob("*.pt"))[-1]
    for f in (feats, weights):
        f.write_bytes(f.read_bytes()[:3000])
    for argv in (["analyze", "knn", run_id, "--k", "7"], ["analyze", "embedding", run_id],
                 ["features", run_id, "--out", str(tmp_path / "f.npz")]):
        line = one_line_error(argv, feats.name, capsys, cache_dir)
        assert "damaged" in line and f"dpviz delete {run_id}" in line
    assert "damaged" in one_line_error(["analyze", "hessian", run_id], weights.name, capsys, cache_dir)
    assert not (tmp_path / "f.npz").exists()
    db = cache_dir / "runs.sqlite"
    for damage in (os.urandom(5000), db.read_bytes()[:8192]):
        for extra in ("runs.sqlite-wal", "runs.sqlite-shm"):
            (cache_dir / extra).unlink(missing_ok=True)
        db.write_bytes(damage)
        assert "damaged" in one_line_error(["list"], "store", capsys, cache_dir)


def copied(stored, tmp_path):
    """A copy of the shared store to damage (its backbones stay a link to the session's cache)."""
    src, run_id = stored
    shutil.copytree(src, tmp_path / "cache", symlinks=True)
    return tmp_path / "cache", run_id


def sql(cache_dir, statement, *args):
    with sqlite3.connect(cache_dir / "runs.sqlite") as c:
        return c.execute(statement, args).fetchall()


def test_garbled_run_rows_are_listed_as_damaged_and_shown_as_one_line(stored, tmp_path, capsys):
    """A garbled config_json or summary_json: list keeps listing the others and marks each damaged row
    with what to do; show of it is one line; delete (the advice) still works."""
    cache_dir, run_id = copied(stored, tmp_path)
    for rid, col, text in (("bad00001-000000", "config_json", "{not json"), ("bad00002-000000", "summary_json", "[1")):
        sql(cache_dir, "INSERT INTO runs (run_id, config_hash, config_json, status, created, started, finished, owner, "
            "step, total_steps, summary_json, error) SELECT ?, config_hash, config_json, status, created + 1, started, "
            "finished, owner, step, total_steps, summary_json, error FROM runs WHERE run_id=?", rid, run_id)
        sql(cache_dir, f"UPDATE runs SET {col}=? WHERE run_id=?", text, rid)
    before = snapshot(cache_dir)
    assert cli.main(["--cache-dir", str(cache_dir), "list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("finished") and run_id in lines[0] and len(lines) == 3
    for line, col in zip(lines[1:], ("config_json", "summary_json")):
        assert line.startswith("damaged") and col in line and "dpviz delete" in line, line
    assert cli.main(["--cache-dir", str(cache_dir), "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in rows] == ["finished", "damaged", "damaged"] and "bad00001" in rows[1]["error"]
    assert "config_json" in one_line_error(["show", "bad00001-000000"], "bad00001-000000", capsys, cache_dir)
    assert "summary_json" in one_line_error(["show", "bad00002-000000"], "bad00002-000000", capsys, cache_dir)
    assert snapshot(cache_dir) == before
    assert cli.main(["--cache-dir", str(cache_dir), "delete", "bad00001-000000"]) == 0


def test_a_garbled_cached_analysis_is_computed_again(stored, tmp_path, capsys):
    cache_dir, run_id = copied(stored, tmp_path)
    argv = ["--cache-dir", str(cache_dir), "analyze", "knn", run_id, "--json"]
    assert cli.main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    sql(cache_dir, "UPDATE analyses SET result_json='{garbage' WHERE name='knn'")
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert [json.loads(r) for r, in sql(cache_dir, "SELECT result_json FROM analyses WHERE name='knn'")] == [first]


def test_a_foreign_file_at_a_feature_checkpoint_is_one_line_naming_it(stored, tmp_path, capsys):
    """Another program's npz, or a weights file, where a features step_*.npz belongs."""
    cache_dir, run_id = copied(stored, tmp_path)
    feats = sorted((cache_dir / "runs" / run_id / "features").glob("*.npz"))[-1]
    weights = sorted((cache_dir / "runs" / run_id / "weights").glob("*.pt"))[-1]
    for plant in (lambda: np.savez(feats.with_suffix(""), a=np.zeros(3), labels=np.zeros(2)),
                  lambda: shutil.copy(weights, feats)):
        plant()
        before = snapshot(cache_dir)
        for argv in (["analyze", "knn", run_id], ["features", run_id, "--out", str(tmp_path / "f.npz")]):
            line = one_line_error(argv, str(feats), capsys, cache_dir)
            assert "expected features" in line and f"dpviz delete {run_id}" in line
        assert snapshot(cache_dir) == before and not (tmp_path / "f.npz").exists()


@pytest.mark.subprocess  # the accounting child (`dpviz.training.ahead`)
def test_a_damaged_cached_backbone_gives_way_to_the_shipped_one(stored, tmp_path, capsys):
    """Random bytes in the store's copy of the default backbone (which comes before the shipped one):
    `run` trains from the shipped copy, removes the damaged one and says so in one line."""
    from dpviz.models import pretrain

    cache_dir, run_id = copied(stored, tmp_path)
    (cache_dir / "backbones").unlink()
    (cache_dir / "backbones").mkdir()
    damaged = cache_dir / "backbones" / f"{pretrain.cache_key('cnn', 1, 16)}.pt"
    damaged.write_bytes(os.urandom(5000))
    argv = ["--cache-dir", str(cache_dir), "run", "--strategy", "lp", "--epochs", "1", "--batch-size", "256",
            "--eval-every", "5", "--force", "--quiet", "--json"]  # the stored run's configuration, trained again
    assert cli.main(argv) == 0
    out = capsys.readouterr()
    warned = [line for line in out.err.splitlines() if line.startswith("dpviz:") and "--force" not in line
              and "randomness seeded" not in line]  # the note on a seeded run's kept weights: cli.runs
    assert len(warned) == 1 and str(damaged) in warned[0] and "copy dpviz ships" in warned[0], out.err
    assert "spends its privacy budget (ε = 1) again" in out.err  # --force on a stored run says so
    assert cli.main(["--cache-dir", str(cache_dir), "show", run_id, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert not damaged.exists() and json.loads(out.out)["test_accuracy"] == first["test_accuracy"]


def test_an_emptied_database_beside_run_folders_is_one_line(stored, tmp_path, capsys):
    """A zero-length runs.sqlite would open as an empty store, its run folders orphaned: refused, untouched."""
    cache_dir, run_id = copied(stored, tmp_path)
    for extra in ("runs.sqlite-wal", "runs.sqlite-shm"):
        (cache_dir / extra).unlink(missing_ok=True)
    (cache_dir / "runs.sqlite").write_bytes(b"")
    listed = sorted(os.listdir(cache_dir))
    for argv in (["list"], ["show", run_id]):
        line = one_line_error(argv, "runs.sqlite", capsys, cache_dir)
        assert "empty (0 bytes)" in line and "holds 1 run folder" in line and "backup" in line
    assert (cache_dir / "runs.sqlite").stat().st_size == 0 and sorted(os.listdir(cache_dir)) == listed


@pytest.mark.subprocess  # chattr
def test_an_immutable_store_folder_is_called_read_only_not_damaged(stored, tmp_path, capsys):
    cache_dir, run_id = copied(stored, tmp_path)
    with sqlite3.connect(cache_dir / "runs.sqlite") as c:  # fold the WAL in, then remove its files, which the
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")        # immutable folder cannot create again
    for extra in ("runs.sqlite-wal", "runs.sqlite-shm"):
        (cache_dir / extra).unlink(missing_ok=True)
    if subprocess.run(["chattr", "+i", str(cache_dir)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here")
    try:
        line = one_line_error(["list"], str(cache_dir), capsys, cache_dir)
        assert "read-only" in line and "damaged" not in line, line
    finally:
        subprocess.run(["chattr", "-i", str(cache_dir)], check=True)


@pytest.mark.subprocess  # its `dpviz run` starts dpviz.training.ahead's accounting child
def test_a_damaged_optuna_journal_is_one_line_naming_it(stored, tmp_path, capsys):
    """A cut or garbled journal: sweep, worker, tune and a run whose "auto" rates would read it each say
    which file and what to do, and change nothing; a run with explicit rates does not read it and runs."""
    src, _ = stored
    cache_dir = tmp_path / "cache"
    shutil.copytree(src, cache_dir, symlinks=True)
    from dpviz import sweeps

    sweeps.create_budget_sweep(RunConfig(epochs=1), sweeps.budget_grid(epsilons=["1"], fractions=[0.5], seeds=[0]),
                               cache_dir=cache_dir)
    journal = cache_dir / "optuna.journal"
    whole = journal.read_bytes()
    sweep = ["sweep", "budget", "--epsilon", "1", "--fractions", "0.5", "--epochs", "1"]
    for damage in (whole[:len(whole) // 2], whole[:200] + os.urandom(100) + b"\n" + whole[200:]):
        journal.write_bytes(damage)
        before = snapshot(cache_dir)
        for argv in (sweep, ["worker"], ["tune", "--lr-ft", "0.01", "0.1", "--proxy", "glyphs"],
                     ["run", "--strategy", "lp", "--epochs", "1", "--batch-size", "256", "--eval-every", "5"]):
            line = one_line_error(argv, str(journal), capsys, cache_dir)
            assert "damaged" in line and "move it away" in line
        assert snapshot(cache_dir) == before and journal.read_bytes() == damage
    assert cli.main(["--cache-dir", str(cache_dir), "run", "--strategy", "lp", "--epochs", "1", "--batch-size", "512",
                     "--lr-lp", "0.5", "--quiet"]) == 0
