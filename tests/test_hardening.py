"""Bad input and damaged files: one line naming the field (exit 2), nothing stored changed, no stray file.

The table is issue 14's and 26's probes, each a case that once gave a traceback, was accepted, or said
the wrong words; damaged stores are tests below it (planted links: tests/test_store_links.py). They run
`dpviz.cli.main` in this process; tests/test_cli.py runs the same contract through real subprocesses.
"""

import json
import math
import os
import random
import shutil
import sqlite3
import stat
import subprocess

import numpy as np
import pytest

from dpviz import cli
from dpviz.config import RunConfig
from dpviz.errors import ConfigError

ACC = ["accountants", "--epsilon", "1", "--epochs", "1", "--dataset-size", "100", "--batch-sizes", "10"]
CASES = [
    (["--cache-dir", "/etc/passwd", "list"], "cache_dir"),
    (["--cache-dir", "/proc/nonexistent/x", "list"], "cache_dir"),
    (["run", "--config", "DATA_DIR_5"], "data_dir"),
    (["run", "--config", "NOT_UTF8_TOML"], "config"),
    (["analyze", "knn", "RUN", "--k", "-3"], "k"), (["analyze", "knn", "RUN", "--k", "0"], "k"),
    (["analyze", "knn", "RUN", "--k", "100000"], "k"),
    (["sweep", "budget", "--epsilon", "abc"], "epsilon"), (["sweep", "budget", "--epsilon", "1e999"], "epsilon"),
    (["sweep", "budget", "--epsilon", "1", "--storage", "bogus://x"], "storage"),
    (["worker", "--storage", "bogus://x"], "storage"), (["worker", "--study", "nonexistent-study"], "study"),
    (["tune", "--lr-ft", "0.001", "inf"], "lr_ft"), (["tune", "--epochs", "0.2", "3"], "epochs"),
    (["features", "RUN", "--out", "/proc/self/x.npz"], "out"), (["features", "RUN", "--out", "/sys/x.npz"], "out"),
    (["features", "RUN", "--out", "A_FOLDER"], "out"), (["features", "RUN", "--out", ""], "out"),
    (["run", "--epsilon", "1e999"], "epsilon"), (["run", "--epsilon", "1e300"], "epsilon"),
    (["tune", "--lr-ft", "0.001", "0.1", "--trials", "0"], "trials"),
    (["tune", "--lr-ft", "0.001", "0.1", "--trials", "-1"], "trials"),
    (["tune", "--lr-ft", "0.001", "0.1", "--workers", "0"], "workers"),
    (["sweep", "budget", "--workers", "-2"], "workers"),
    (["run", "--backbone", "cnn", "--weights", "A_FILE"], "weights"),
    (["run", "--dataset", "digits", "--data-dir", "/etc"], "data_dir"),
    (["list", "--status", "bogus"], "--status"),
    (["sweep", "budget", "--epsilon", "1", "--fractions", "0.5", "--seeds", "-1"], "seed"),
    (["sweep", "budget", "--epsilon", "1", "--fractions", "0.5", "--delta", "0.5"], "delta"),
    ([*ACC, "--delta", "0.5"], "delta"),
    # issue 26: no DP has one spelling ("inf"); a schedule beyond the machine; fields a strategy ignores
    (["run", "--epsilon", "none"], "epsilon"), (["run", "--epsilon", "Infinity"], "epsilon"),
    (["audit", "--epsilon", "none"], "epsilon"), (["sweep", "budget", "--epsilon", "none"], "epsilon"),
    (["theory", "--epsilon", "1e999"], "epsilon"), (["audit", "--sweep", "--sweep-epsilons", "1e999"], "sweep_epsilons"),
    (["run", "--epochs", "100000", "--batch-size", "1", "--strategy", "fft"], "epochs"),
    (["run", "--strategy", "fft", "--lp-fraction", "0.5"], "lp_fraction"),
    (["run", "--strategy", "fft", "--lr-lp", "0.9"], "lr_lp"),
    (["run", "--strategy", "lp", "--lora-rank", "8"], "lora_rank"),
    (["run", "--strategy", "lp", "--tune-blocks", "2"], "tune_blocks"),
    (["run", "--strategy", "sparse", "--selection", "bias", "--sparsity", "0.9"], "sparsity"),
    (["run", "--strategy", "continual", "--switch-step", "5", "--switch-threshold", "0.3"], "switch_threshold"),
    (["run", "--strategy", "lora", "--lora-rank", "512"], "lora_rank"),
    (["audit", "--threat", "white-box", "--kind", "ood"], "kind"),
    (["audit", "--sweep-threats", "foo"], "sweep_threats"), (["audit", "--sweep", "--threat", "black-box"], "threat"),
    (["run", "--strategy", "lp", "--epsilon", "0.1", "--accountant", "rdp"], "epsilon"),
    (["theory", "--overlay", "foo"], "overlay"),
    (["run", "--config", "EPS_JSON_1E999"], "epsilon"), (["run", "--config", "EPS_JSON_INFINITY"], "epsilon"),
    (["run", "--config", "EPS_JSON_RUN_TABLE"], "epsilon"), (["run", "--config", "EPS_JSON_NONE"], "epsilon"),
    (["run", "--config", "EPS_TOML_1E999"], "epsilon"), (["run", "--config", "EPS_TOML_INF"], "epsilon"),
    # issue 26: --out never replaces a device, FIFO or socket (nor a link to one); bad input found after
    # the store opened leaves no store folder at a new path
    (["features", "RUN", "--out", "A_FIFO"], "out"), (["features", "RUN", "--out", "A_LINK_TO_A_FIFO"], "out"),
    (["features", "RUN", "--out", "A_CHAR_DEVICE"], "out"),
    (["--cache-dir", "NEW_DIR", "run", "--delta", "0.01"], "delta"),
    (["--cache-dir", "NEW_DIR", "show", "nope"], "nope"),
    (["--cache-dir", "NEW_DIR", "analyze", "knn", "nope"], "nope"),
    # issue 26: flags a sweep or search would ignore or contradict; range ends the data cannot take
    (["sweep", "budget", "--strategy", "fft"], "strategy"), (["sweep", "budget", "--sparsities", "0.9"], "sparsities"),
    (["sweep", "budget", "--selections", "bias"], "selections"), (["sweep", "budget", "--no-fft"], "no_fft"),
    (["sweep", "budget", "--lora-ranks", "2"], "lora_ranks"), (["sweep", "sparse", "--fractions", "0.5"], "fractions"),
    (["sweep", "sparse", "--strategy", "fft"], "strategy"),
    (["tune", "--strategy", "fft", "--lr-lp", "0.1", "1"], "lr_lp"),
    (["tune", "--strategy", "lp", "--lr-ft", "0.01", "0.1", "--proxy", "glyphs"], "lr_ft"),
    (["tune", "--batch-size", "2000", "5000"], "batch_size"), (["tune", "--batch-size", "64", "5000"], "batch_size"),
    (["tune", "--lr-ft", "0.01", "0.1", "--delta", "0.5"], "delta"),
]
CONFIG_FILES = {"EPS_JSON_1E999": ("e1.json", '{"epsilon": 1e999}'), "EPS_JSON_INFINITY": ("e2.json", '{"epsilon": Infinity}'),
                "EPS_JSON_RUN_TABLE": ("e3.json", '{"run": {"epsilon": 1e999}}'),
                "EPS_JSON_NONE": ("e4.json", '{"epsilon": "none"}'), "EPS_TOML_1E999": ("e5.toml", "epsilon = 1e999\n"),
                "EPS_TOML_INF": ("e6.toml", "epsilon = inf\n")}


@pytest.fixture(scope="module")
def stored(tmp_path_factory, backbone_cache):
    """A store holding one finished run with its checkpoints (shared, never changed by the cases)."""
    from dpviz import runner

    d = tmp_path_factory.mktemp("hardening") / "cache"
    d.mkdir()
    os.symlink(backbone_cache, d / "backbones")
    s = runner.run(RunConfig(strategy="lp", epochs=1, batch_size=256, eval_every=5), cache_dir=d)
    return d, s["run_id"]


def snapshot(cache_dir):
    """Every row of the store and every file under it (name, size), the backbones aside (and the database's
    own files: a WAL checkpoint changes their sizes, not their rows)."""
    with sqlite3.connect(cache_dir / "runs.sqlite") as c:
        rows = [c.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in ("runs", "metrics", "analyses")]
    files = sorted((str(p.relative_to(cache_dir)), p.stat().st_size) for p in cache_dir.rglob("*")
                   if p.is_file() and "backbones" not in p.parts and "lock" not in p.name
                   and not p.name.startswith("runs.sqlite"))
    return rows, files


def one_line_error(argv, field, capsys, cache_dir):
    code = cli.main(["--cache-dir", str(cache_dir), *argv] if argv[0] != "--cache-dir" else argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("dpviz: error:"), err
    assert field in err[0], err[0]
    return err[0]


@pytest.mark.parametrize("argv,field", CASES, ids=[f"{f}:{' '.join(a)[:40]}" for a, f in CASES])
def test_bad_input_is_one_line_naming_the_field(argv, field, stored, tmp_path, capsys, monkeypatch):
    cache_dir, run_id = stored
    monkeypatch.chdir(tmp_path)  # a stray file would land here or beside an output
    files = {"DATA_DIR_5": lambda: (tmp_path / "c.json").write_text('{"data_dir": 5, "dataset": "mnist"}'),
             "NOT_UTF8_TOML": lambda: (tmp_path / "c.toml").write_bytes(b'epsilon = "\xff\xfe"\n'),
             "A_FILE": lambda: (tmp_path / "w.pt").write_bytes(b"not weights"),
             "A_FIFO": lambda: os.mkfifo(tmp_path / "fifo"),
             "A_LINK_TO_A_FIFO": lambda: (os.mkfifo(tmp_path / "fifo"), os.symlink("fifo", tmp_path / "l")),
             "A_CHAR_DEVICE": lambda: private_null_device(tmp_path / "null"),
             **{k: (lambda n=n, t=t: (tmp_path / n).write_text(t)) for k, (n, t) in CONFIG_FILES.items()}}
    paths = {"DATA_DIR_5": tmp_path / "c.json", "NOT_UTF8_TOML": tmp_path / "c.toml", "A_FILE": tmp_path / "w.pt",
             "A_FOLDER": tmp_path, "RUN": run_id, "A_FIFO": tmp_path / "fifo", "A_LINK_TO_A_FIFO": tmp_path / "l",
             "A_CHAR_DEVICE": tmp_path / "null", "NEW_DIR": tmp_path / "new" / "cache",
             **{k: tmp_path / n for k, (n, _) in CONFIG_FILES.items()}}
    for a in argv:
        if a in files:
            files[a]()
    argv = [str(paths.get(a, a)) for a in argv]
    before, listed = snapshot(cache_dir), set(os.listdir(tmp_path))
    one_line_error(argv, field, capsys, cache_dir)
    assert snapshot(cache_dir) == before
    assert set(os.listdir(tmp_path)) == listed and not list(tmp_path.glob(".*.tmp"))
    for special in ("fifo", "null"):  # still what they were, not replaced by a regular file
        assert not (tmp_path / special).exists() or not (tmp_path / special).is_file()


def private_null_device(path):
    """A character device like /dev/null (1, 3) of this test's own, where mknod is allowed (root)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod of a character device needs root")


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
        sql(cache_dir, "INSERT INTO runs SELECT ?, config_hash, config_json, status, created + 1, started, finished, "
            "owner, step, total_steps, summary_json, error FROM runs WHERE run_id=?", rid, run_id)
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
    warned = [line for line in out.err.splitlines() if line.startswith("dpviz:")]
    assert len(warned) == 1 and str(damaged) in warned[0] and "copy dpviz ships" in warned[0], out.err
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


def test_the_export_wrapper_never_follows_a_planted_link(tmp_path, monkeypatch):
    """Another user's link at the old predictable path is ignored: the wrapper goes to a new 0700 folder."""
    import tempfile

    from dpviz import export

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "chromium").write_text("mine")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    os.symlink(victim, tmp_path / f"dpviz-chromium-{os.getuid()}")
    w = export._wrapper("/usr/bin/chromium")
    assert (victim / "chromium").read_text() == "mine" and not os.access(victim / "chromium", os.X_OK)
    folder = os.path.dirname(w)
    assert not os.path.islink(folder) and os.stat(folder).st_mode & 0o777 == 0o700
    assert os.stat(folder).st_uid == os.getuid() and os.access(w, os.X_OK)


FIELD_VALUES = ["", "x" * 300, "auto", "inf", "-inf", "nan", "1e999", "-1", "0", "0.5", "3", "1e300", "-1e300",
                2**70, -(2**70), 1.5, math.nan, math.inf, -math.inf, None, True, [], {}, [1], {"a": 1}]


def test_runconfig_fuzz_is_a_valid_config_or_one_configerror():
    """Random values in random fields (strings, numbers, NaN, ∞, huge, negative, wrong types): each gives a
    valid RunConfig (whose hash and JSON work and which `calibration.preview` accepts or refuses with a
    ConfigError) or one ConfigError naming a field, never another exception."""
    from dataclasses import fields

    from dpviz import calibration
    from dpviz.errors import DpvizError

    names = [f.name for f in fields(RunConfig)]
    rng = random.Random(14)
    valid = previewed = 0
    for _ in range(1500):
        change = {rng.choice(names): rng.choice(FIELD_VALUES) for _ in range(rng.randint(1, 3))}
        try:
            cfg = RunConfig.from_dict(change)
        except ConfigError as e:
            assert e.field in names and "\n" not in str(e), (change, e)
            continue
        valid += 1
        assert RunConfig.from_dict(cfg.to_dict()).hash() == cfg.hash()
        if previewed < 25 and cfg.dataset in ("digits", "glyphs", "synthetic") and cfg.backbone == "cnn":
            previewed += 1
            try:
                calibration.preview(cfg)
            except DpvizError as e:
                assert "\n" not in str(e), (change, e)
    assert valid >= 20 and previewed >= 10  # the fuzz reached past validation, not only into it


def test_no_dp_has_one_spelling_and_a_run_without_dp_says_so(tmp_path, capsys, backbone_cache):
    """"inf" (flag or file string) trains without DP, and the note, the summary and the one-line report say so."""
    cache = tmp_path / "cache"
    cache.mkdir()
    os.symlink(backbone_cache, cache / "backbones")
    (tmp_path / "c.toml").write_text('epsilon = "inf"\nstrategy = "lp"\nepochs = 1\nbatch_size = 512\n')
    assert RunConfig.from_file(tmp_path / "c.toml").epsilon == math.inf
    assert cli.main(["--cache-dir", str(cache), "run", "--config", str(tmp_path / "c.toml"), "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "WITHOUT differential privacy" in err and "NO DP" in out
    s = cli.main(["--cache-dir", str(cache), "list", "--json"]) == 0 and __import__("json").loads(capsys.readouterr().out)
    assert s[0]["private"] is False and s[0]["epsilon_spent"] is None


def test_accountants_give_the_rows_they_can_and_one_line_otherwise(capsys):
    """Below RDP's floor the PRV and GDP rows still come, the RDP row says why; ε = 100 is one line or rows."""
    assert cli.main(["accountants", "--epsilon", "0.1", "--delta", "1e-5", "--epochs", "1", "--dataset-size", "1000",
                     "--batch-sizes", "10", "--json"]) == 0
    rows = {r["accountant"]: r for r in __import__("json").loads(capsys.readouterr().out)}
    assert rows["prv"]["noise_multiplier"] > 1 and rows["gdp"]["noise_multiplier"] > 1
    assert rows["rdp"]["noise_multiplier"] is None and "floor" in rows["rdp"]["error"]
    code = cli.main(["accountants", "--epsilon", "100", "--delta", "1e-5", "--epochs", "1", "--dataset-size", "1000",
                     "--batch-sizes", "10"])
    out, err = capsys.readouterr()
    assert code == 0 and len(out.strip().splitlines()) == 3 and err == ""


def test_the_accounting_child_is_bounded_and_refuses_nothing_the_parent_would_run():
    """A refused schedule starts no child; an accepted one is accounted under the memory bound."""
    from dpviz.privacy import ahead
    from dpviz.catalog import static_shape

    assert ahead.start(RunConfig(strategy="fft", epochs=100000, batch_size=1)) is None
    cfg = RunConfig(strategy="fft", accountant="rdp", epochs=50, batch_size=16)
    shape, blocks = static_shape(cfg)
    sigma, curve = ahead.start(cfg).take(shape.n, blocks)
    assert sigma > 0 and len(curve) == 50 * round(shape.n / 16)  # RDP: a point per step under the bound


def test_an_audit_key_changes_with_the_mechanisms_code(tmp_path):
    """The key hashes the files that make the released updates: a stored audit never answers for changed code."""
    import dpviz
    from dpviz.audit import run as audit_run

    pkg = tmp_path / "dpviz"
    shutil.copytree(os.path.dirname(dpviz.__file__), pkg, ignore=shutil.ignore_patterns("__pycache__", "weights"))
    before = audit_run.mechanism_hash(str(pkg))
    assert before == audit_run.mechanism_hash()  # the copy hashes as the package does
    (pkg / "figures" / "style.py").write_text("# not the mechanism\n")
    assert audit_run.mechanism_hash.__wrapped__(str(pkg)) == before
    dpsgd = pkg / "privacy" / "dpsgd.py"
    dpsgd.write_text(dpsgd.read_text().replace("noise", "noise * 0.1", 1))
    assert audit_run.mechanism_hash.__wrapped__(str(pkg)) != before
    spec, cfg = audit_run.AuditSpec(), RunConfig(strategy="lp")
    key = spec.key(cfg)
    audit_run.mechanism_hash.cache_clear()
    try:
        original = audit_run.mechanism_hash
        audit_run.mechanism_hash = lambda root=None: "changed"
        assert spec.key(cfg) != key
    finally:
        audit_run.mechanism_hash = original


def test_an_export_caption_is_plain_text_in_every_format():
    """Markup in a caption (a link, inline CSS) is escaped: no live link or style reaches the SVG or HTML."""
    import xml.etree.ElementTree as ET

    import plotly.graph_objects as go

    from dpviz import export

    caption = '<a href="https://evil.example/">run</a> <span style="fill:url(https://evil.example/x)">x</span> a&b'
    fig = go.Figure(go.Scatter(x=[1, 2], y=[1, 2]))
    svg = ET.fromstring(export.figure_bytes(fig, "svg", caption=caption))
    elements = list(svg.iter())
    assert not [e for e in elements if e.tag.endswith("}a") or e.tag == "a"]  # no live link
    assert not [e for e in elements if "evil" in " ".join(e.attrib.values())]  # no attribute carries the markup
    assert any("<a href=" in "".join(e.itertext()) for e in elements)  # shown as the text it is
    page = export.figure_bytes(fig, "html", caption=caption).decode()
    assert "&lt;a href" in page and "\\u003ca href" not in page  # plotly.js renders the escaped text as text
