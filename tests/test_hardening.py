"""Bad input and damaged files: one line naming the field (exit 2), nothing stored changed, no stray file.

The table is the bad-input probes, each a case that once gave a traceback, was accepted, or said
the wrong words; damaged stores are tests below it (planted links: tests/test_store_links.py). They run
`dpviz.cli.main` in this process; tests/test_cli.py runs the same contract through real subprocesses.
"""

import math
import os
import random
import shutil
import sqlite3
import stat

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
    # no DP has one spelling ("inf"); a schedule beyond the machine; fields a strategy ignores
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
    (["run", "--strategy", "continual", "--switch-step", "5", "--switch-batch", "32"], "switch_batch"),
    (["run", "--strategy", "continual", "--switch-batch", "4"], "switch_batch"),
    (["run", "--strategy", "lora", "--lora-rank", "512"], "lora_rank"),
    (["audit", "--threat", "white-box", "--kind", "ood"], "kind"),
    (["audit", "--sweep-threats", "foo"], "sweep_threats"), (["audit", "--sweep", "--threat", "black-box"], "threat"),
    (["run", "--strategy", "lp", "--epsilon", "0.1", "--accountant", "rdp"], "epsilon"),
    (["theory", "--overlay", "foo"], "overlay"),
    (["run", "--config", "EPS_JSON_1E999"], "epsilon"), (["run", "--config", "EPS_JSON_INFINITY"], "epsilon"),
    (["run", "--config", "EPS_JSON_RUN_TABLE"], "epsilon"), (["run", "--config", "EPS_JSON_NONE"], "epsilon"),
    (["run", "--config", "EPS_TOML_1E999"], "epsilon"), (["run", "--config", "EPS_TOML_INF"], "epsilon"),
    # --out never replaces a device, FIFO or socket (nor a link to one); bad input found after
    # the store opened leaves no store folder at a new path
    (["features", "RUN", "--out", "A_FIFO"], "out"), (["features", "RUN", "--out", "A_LINK_TO_A_FIFO"], "out"),
    (["features", "RUN", "--out", "A_CHAR_DEVICE"], "out"),
    (["--cache-dir", "NEW_DIR", "run", "--delta", "0.01"], "delta"),
    (["--cache-dir", "NEW_DIR", "show", "nope"], "nope"),
    (["--cache-dir", "NEW_DIR", "analyze", "knn", "nope"], "nope"),
    # flags a sweep or search would ignore or contradict; range ends the data cannot take
    (["sweep", "budget", "--strategy", "fft"], "strategy"), (["sweep", "budget", "--sparsities", "0.9"], "sparsities"),
    (["sweep", "budget", "--selections", "bias"], "selections"), (["sweep", "budget", "--no-fft"], "no_fft"),
    (["sweep", "budget", "--lora-ranks", "2"], "lora_ranks"), (["sweep", "sparse", "--fractions", "0.5"], "fractions"),
    (["sweep", "sparse", "--strategy", "fft"], "strategy"),
    (["sweep", "noise", "--bands", "2"], "bands"), (["sweep", "budget", "--band-counts", "2"], "band_counts"),
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


def test_the_export_wrapper_never_follows_a_planted_link(tmp_path, monkeypatch):
    """Another user's link at the old predictable path is ignored: the wrapper goes to a new 0700 folder."""
    import tempfile

    from dpviz.figures import export

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

    from dpviz.training import calibration
    from dpviz.errors import DpvizError

    names = [f.name for f in fields(RunConfig)]
    rng = random.Random(14)
    valid = previewed = 0
    for _ in range(2000):
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


@pytest.mark.slow
def test_accountants_give_the_rows_they_can_and_one_line_otherwise(capsys):
    """Below RDP's floor the PRV, GDP and PLD rows still come, the RDP row says why; ε = 100 is one line or rows."""
    assert cli.main(["accountants", "--epsilon", "0.1", "--delta", "1e-5", "--epochs", "1", "--dataset-size", "1000",
                     "--batch-sizes", "10", "--json"]) == 0
    rows = {r["accountant"]: r for r in __import__("json").loads(capsys.readouterr().out)}
    assert rows["prv"]["noise_multiplier"] > 1 and rows["gdp"]["noise_multiplier"] > 1 and rows["pld"]["noise_multiplier"] > 1
    assert rows["rdp"]["noise_multiplier"] is None and "floor" in rows["rdp"]["error"]
    code = cli.main(["accountants", "--epsilon", "100", "--delta", "1e-5", "--epochs", "1", "--dataset-size", "1000",
                     "--batch-sizes", "10"])
    out, err = capsys.readouterr()
    assert code == 0 and len(out.strip().splitlines()) == 4 and err == ""  # rdp, gdp, prv, pld


@pytest.mark.subprocess
def test_the_accounting_child_is_bounded_and_refuses_nothing_the_parent_would_run():
    """A refused schedule starts no child; an accepted one is accounted under the memory bound."""
    from dpviz.training import ahead
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


@pytest.mark.browser  # kaleido's Chromium draws the SVG
def test_an_export_caption_is_plain_text_in_every_format():
    """Markup in a caption (a link, inline CSS) is escaped: no live link or style reaches the SVG or HTML."""
    import xml.etree.ElementTree as ET

    import plotly.graph_objects as go

    from dpviz.figures import export

    caption = '<a href="https://evil.example/">run</a> <span style="fill:url(https://evil.example/x)">x</span> a&b'
    fig = go.Figure(go.Scatter(x=[1, 2], y=[1, 2]))
    svg = ET.fromstring(export.figure_bytes(fig, "svg", caption=caption))
    elements = list(svg.iter())
    assert not [e for e in elements if e.tag.endswith("}a") or e.tag == "a"]  # no live link
    assert not [e for e in elements if "evil" in " ".join(e.attrib.values())]  # no attribute carries the markup
    assert any("<a href=" in "".join(e.itertext()) for e in elements)  # shown as the text it is
    page = export.figure_bytes(fig, "html", caption=caption).decode()
    assert "&lt;a href" in page and "\\u003ca href" not in page  # plotly.js renders the escaped text as text
