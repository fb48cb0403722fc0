"""Every surface states what a run releases: `show` (text and JSON), `run`'s note on a seeded run's weights, the
Runs form and page, Compare, and every export (captions and CSV headers) — read from real small runs."""

import io
import json
import os

import pandas as pd
import pytest

from dpviz import cli, figures, results
from dpviz.config import RunConfig
from dpviz.figures import export
from dpviz.privacy import randomness, release
from dpviz.store import Store
from test_app import app_env, open_page  # noqa: F401  (app_env: the AppTest store fixture)

SMALL = dict(strategy="lp", epochs=1, batch_size=256, eval_every=5)
FLAGS = ["--strategy", "lp", "--epochs", "1", "--batch-size", "256", "--eval-every", "5"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory, backbone_cache):
    """A store of two real private runs of one short schedule: seeded (keeping its checkpoints) and secure."""
    import dpviz

    d = tmp_path_factory.mktemp("release") / "cache"
    d.mkdir()
    os.symlink(backbone_cache, d / "backbones")
    seeded = dpviz.run(RunConfig(**SMALL), cache_dir=d)
    secure = dpviz.run(RunConfig(**SMALL, randomness="secure", keep_weights="none"), cache_dir=d)
    return d, seeded, secure


def cli_out(capsys, store_dir, *argv) -> tuple[str, str]:
    assert cli.main(["--cache-dir", str(store_dir), *argv]) == 0
    out = capsys.readouterr()
    return out.out, out.err


def test_show_json_carries_the_statement_and_the_privacy_check(stored, capsys):
    d, seeded, _ = stored
    shown = json.loads(cli_out(capsys, d, "show", seeded["run_id"], "--json")[0])
    p = shown["privacy"]
    assert p["private"] and p["neighbours"] == "add-or-remove" and p["randomness"] == "seeded"
    assert p["randomness_line"] == randomness.SEEDED_LINE and p["protects"] == "the training records"
    assert "loss" in p["private_batch_metrics"] and p["not_covered"]
    assert shown["privacy_check"] == seeded["privacy_check"] and shown["privacy_check"]["verdict"] == "passed"


def test_show_text_says_the_seeded_line_and_a_secure_run_the_secure_one(stored, capsys):
    d, seeded, secure = stored
    text, _ = cli_out(capsys, d, "show", seeded["run_id"])
    assert randomness.SEEDED_LINE in text and randomness.SECURE_LINE not in text
    assert "neighbours: add-or-remove" in text and f"{release.NOT_COVERED}: per-step loss" in text
    assert f"privacy check passed: {seeded['privacy_check']['line']}" in text
    text, _ = cli_out(capsys, d, "show", secure["run_id"])
    assert randomness.SECURE_LINE in text and randomness.SEEDED_LINE not in text
    assert secure["config"]["randomness"] == "secure"


def test_run_notes_once_on_stderr_what_a_seeded_runs_kept_weights_give_away(stored, capsys):
    """Answered from the store (the fixture trained these configurations): the note is about the configuration,
    on stderr only, so --json's stdout stays one JSON document."""
    d, seeded, _ = stored
    out, err = cli_out(capsys, d, "run", *FLAGS, "--json", "--quiet")
    assert json.loads(out)["run_id"] == seeded["run_id"]
    notes = [line for line in err.splitlines() if "keep_weights checkpoints" in line]
    assert len(notes) == 1 and "gives" not in out and "--randomness secure" in notes[0], err
    out, err = cli_out(capsys, d, "run", *FLAGS, "--randomness", "secure", "--keep-weights", "none", "--quiet")
    assert "keep_weights" not in err and randomness.SECURE_LINE in out  # the text answer states it too


def test_a_bad_randomness_or_parts_is_one_line_naming_the_field(capsys, cache_dir):
    for flag, value, allowed in (("--randomness", "os", "seeded, secure"), ("--parts", "half", "independent, equal")):
        assert cli.main(["--cache-dir", str(cache_dir), "run", flag, value]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and flag[2:] in err[0] and allowed in err[0], err


def test_csv_headers_label_the_statistics_of_private_batches(stored):
    d, seeded, secure = stored
    df = results.curves(Store(d), [seeded["run_id"], secure["run_id"]], ["loss", "clip_fraction", "test_accuracy"])
    for metric in ("loss", "clip_fraction"):
        out = pd.read_csv(io.BytesIO(export.csv_bytes(df[df["metric"] == metric])))
        assert f"{metric} (not covered by ε)" in out and "value" not in out and "metric" not in out
        assert len(out) == (df["metric"] == metric).sum() and out[f"{metric} (not covered by ε)"].notna().all()
    out = pd.read_csv(io.BytesIO(export.csv_bytes(df[df["metric"] == "test_accuracy"])))
    assert "test_accuracy" in out and not [c for c in out if "not covered" in c]  # a public result: no label
    bands = pd.read_csv(io.BytesIO(export.csv_bytes(results.seed_bands(df[df["metric"] == "loss"]))))
    assert {"loss mean (not covered by ε)", "loss std (not covered by ε)", "n"} <= set(bands)
    mixed = pd.read_csv(io.BytesIO(export.csv_bytes(df)))  # several metrics: each cell says it
    assert set(mixed["metric"]) == {"loss (not covered by ε)", "clip_fraction (not covered by ε)", "test_accuracy"}


def test_export_captions_carry_the_label_the_randomness_and_the_check(stored):
    d, seeded, secure = stored
    store = Store(d)
    configs = [store.get_run(s["run_id"])["config"] for s in (seeded, secure)]
    summaries = [store.get_run(s["run_id"])["summary"] for s in (seeded, secure)]
    df = results.curves(store, [seeded["run_id"]], ["loss"])
    fig = figures.metric_curves(df, "loss")
    assert fig.layout.yaxis.title.text.endswith("(not covered by ε)")
    caption = figures.release_caption(results.caption(configs), configs, summaries, ["loss"])
    lines = caption.split("\n")
    assert f"loss: statistics of private batches, {release.NOT_COVERED}" in lines
    assert randomness.SEEDED_LINE in lines and randomness.SECURE_LINE in lines
    assert f"{seeded['run_id']}: {seeded['privacy_check']['line']}" in lines
    page = export.figure_bytes(fig, "html", caption=caption).decode()  # the caption inside the exported figure
    assert json.dumps(release.NOT_COVERED)[1:-1] in page and json.dumps(randomness.SEEDED_LINE)[1:-1] in page
    public = figures.release_caption("dpviz", [{**configs[0], "epsilon": "inf"}], (), ["test_accuracy"])
    assert public == "dpviz"  # no private run, no private batch: nothing to add


def test_live_curves_label_the_loss_panel():
    df = pd.DataFrame({"run_id": "r", "label": "lp ε=1", "strategy": "lp", "epsilon": 1.0, "seed": 0, "group": "g",
                       "dataset": "digits", "step": [1, 2] * 3, "metric": ["loss"] * 2 + ["test_accuracy"] * 2
                       + ["epsilon"] * 2, "value": [1.0, 0.9, 0.2, 0.3, 0.1, 0.2]})
    fig = figures.live_curves(df, ("loss", "test_accuracy", "epsilon"))
    assert [a.text for a in fig.layout.annotations] == ["Training loss (not covered by ε)", "Test accuracy",
                                                        "ε spent"]


def test_runs_page_form_offers_secure_mode_and_says_what_seeded_weights_give(app_env, fast_cfg):  # noqa: F811
    import dpviz

    run = dpviz.run(fast_cfg(strategy="lp", epochs=1), cache_dir=app_env)
    at = open_page("pages/runs.py")
    assert not at.exception and not at.error, [e.value for e in at.error]
    box = at.selectbox(key="f_randomness")
    assert box.options == ["seeded", "secure"] and box.value == "seeded" and "os.urandom" in box.help
    warned = lambda: any("gives them its noise" in c.value for c in at.caption)  # noqa: E731
    assert warned()  # private, seeded, keeping checkpoints
    # beside the newest run's ε: its randomness line, its neighbours and its privacy check
    said = next(c.value for c in at.caption if c.value.startswith(f"**{run['run_id']}**"))
    assert randomness.SEEDED_LINE in said and "neighbours: add-or-remove" in said
    assert f"privacy check passed: {run['privacy_check']['line']}" in said
    assert any(e.label == f"What ε covers for {run['run_id']}" for e in at.expander)
    at.selectbox(key="f_keep_weights").set_value("none").run()
    assert not warned()
    at.selectbox(key="f_keep_weights").set_value("final").run()
    at.selectbox(key="f_randomness").set_value("secure").run()
    assert not warned() and at.query_params["randomness"] == "secure"  # held, and in the URL
    assert at.selectbox(key="f_parts").disabled  # DP-SGD: no parts
    at.selectbox(key="f_mechanism").set_value("bandmf").run()
    assert not at.selectbox(key="f_parts").disabled and at.selectbox(key="f_parts").options == ["independent", "equal"]


def test_the_form_launches_the_randomness_and_parts_it_shows():
    from dashboard import forms

    held = {"f_randomness": "secure", "f_mechanism": "bandmf", "f_bands": 2, "f_parts": "equal"}
    cfg = RunConfig(**forms.fields_of(held))
    assert (cfg.randomness, cfg.mechanism, cfg.bands, cfg.parts) == ("secure", "bandmf", 2, "equal")
    assert RunConfig(**forms.fields_of({**held, "f_mechanism": "dp-sgd"})).bands == 1  # parts unread at b = 1


def test_compare_labels_the_metrics_of_private_batches_and_lists_randomness(app_env, fast_cfg):  # noqa: F811
    import dpviz

    dpviz.run(fast_cfg(strategy="lp", epochs=1), cache_dir=app_env)
    at = open_page("pages/compare.py")
    assert not at.exception, [e.value for e in at.exception]
    options = at.selectbox(key="cmp_metric").options
    assert "training loss (cross-entropy, nats) (not covered by ε)" in options
    assert "test accuracy (fraction)" in options  # public: no label
    assert list(at.dataframe[-1].value["randomness"]) == ["seeded"]
