"""Bad input and damaged files: one line naming the field (exit 2), nothing stored changed, no stray file.

The table is issue 14's probes, each a case that once gave a traceback, was accepted, or said the wrong
words. They run `dpviz.cli.main` in this process (the command's own code, without a process start per
case); tests/test_cli.py runs the same contract through real subprocesses.
"""

import math
import os
import random
import shutil
import sqlite3

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
    """Every row of the store and every file under it (name, size), the backbones aside."""
    with sqlite3.connect(cache_dir / "runs.sqlite") as c:
        rows = [c.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in ("runs", "metrics", "analyses")]
    files = sorted((str(p.relative_to(cache_dir)), p.stat().st_size) for p in cache_dir.rglob("*")
                   if p.is_file() and "backbones" not in p.parts and "lock" not in p.name)
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
             "A_FILE": lambda: (tmp_path / "w.pt").write_bytes(b"not weights")}
    paths = {"DATA_DIR_5": tmp_path / "c.json", "NOT_UTF8_TOML": tmp_path / "c.toml", "A_FILE": tmp_path / "w.pt",
             "A_FOLDER": tmp_path, "RUN": run_id}
    for a in argv:
        if a in files:
            files[a]()
    argv = [str(paths.get(a, a)) for a in argv]
    before, listed = snapshot(cache_dir), set(os.listdir(tmp_path))
    one_line_error(argv, field, capsys, cache_dir)
    assert snapshot(cache_dir) == before
    assert set(os.listdir(tmp_path)) == listed and not list(tmp_path.glob(".*.tmp"))


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
