"""One truth on every surface: a run's noise mechanism is named wherever the run is (tables, readings, legends,
captions, titles, `list` and `show`), and a run is drawn in one colour (its strategy's) and one dash (its
mechanism's) from one table (`figures.style_table`) in every figure and export — read from real small runs of
three strategies, one of them also under BandMF."""

import json
import os
import re

import plotly.graph_objects as go
import pytest

import dpviz
from dpviz import cli, figures, results
from dpviz.config import RunConfig
from dpviz.figures import style
from dpviz.store import Store
from test_app import app_env, open_page  # noqa: F401  (app_env: the AppTest store fixture)

SMALL = dict(epochs=1, batch_size=256, eval_every=5, checkpoint_every=6, epsilon=1.0)
BANDMF = dict(mechanism="bandmf", bands=2)
CHEAP_HESSIAN = dict(batch=32, max_probes=3, min_probes=2, sigma_samples=2)
"""A real curvature estimate at a few probes, stored as the page's (its default key): the colours, not the
estimate, are under test here."""


def _analyse(store: Store, run_id: str) -> None:
    """Every analysis the pages read, at every feature checkpoint of the run: no page computes in the background."""
    from dpviz.analyses import analyze
    from dpviz.analyses.service import cache_key

    for step in store.feature_steps(run_id):
        for name in ("knn", "separability", "residual"):
            analyze(store, run_id, name, step=step)
        analyze(store, run_id, "embedding", step=step, method="pca")
        out = analyze(store, run_id, "hessian", step=step, **CHEAP_HESSIAN)
        store.put_analysis(run_id, step, "hessian", cache_key(store, run_id, "hessian", {}), out)


@pytest.fixture(scope="module")
def lab(tmp_path_factory, backbone_cache):
    """A store of lp-fft under DP-SGD and under BandMF b = 2 (one configuration otherwise), fft and lp, each
    analysed; the ids by name."""
    d = tmp_path_factory.mktemp("truth") / "cache"
    d.mkdir()
    os.symlink(backbone_cache, d / "backbones")
    ids = {"dp": dpviz.run(RunConfig(strategy="lp-fft", **SMALL), cache_dir=d)["run_id"],
           "bandmf": dpviz.run(RunConfig(strategy="lp-fft", **SMALL, **BANDMF), cache_dir=d)["run_id"],
           "fft": dpviz.run(RunConfig(strategy="fft", **SMALL), cache_dir=d)["run_id"],
           "lp": dpviz.run(RunConfig(strategy="lp", **SMALL), cache_dir=d)["run_id"]}
    store = Store(d)
    for rid in ids.values():
        _analyse(store, rid)
    return d, ids


def _config(store: Store, rid: str) -> dict:
    return store.get_run(rid)["config"]


def _runs(store: Store, ids: dict) -> dict:
    """Run id → config of every run of the lab, BandMF's first: a figure that drew the second run of a strategy
    in the next dash would draw it in DP-SGD's solid line."""
    return {ids[k]: _config(store, ids[k]) for k in ("bandmf", "fft", "dp", "lp")}


# --- 1. the mechanism is named wherever a run is named ---------------------------------------------------------
def test_labels_name_bandmf_always_and_dp_sgd_beside_it(lab):
    d, ids = lab
    store = Store(d)
    both = results.run_labels([store.get_run(ids["dp"]), store.get_run(ids["bandmf"])])
    assert both[ids["dp"]].startswith("lp-fft ε=1 DP-SGD ") and both[ids["bandmf"]].startswith("lp-fft ε=1 BandMF b=2 ")
    alone = results.run_labels([store.get_run(ids["dp"]), store.get_run(ids["fft"])])
    assert "DP-SGD" not in alone[ids["dp"]]  # DP-SGD runs among themselves: short labels
    assert "BandMF b=2" in results.run_labels([store.get_run(ids["bandmf"])])[ids["bandmf"]]
    jobs = results.config_labels({1: _config(store, ids["dp"]), 2: _config(store, ids["bandmf"])})
    assert "DP-SGD" in jobs[1] and "BandMF b=2" in jobs[2]  # the live progress lines


def test_export_captions_name_each_mechanism_on_its_own_line(lab):
    d, ids = lab
    store = Store(d)
    lines = results.caption([_config(store, ids["dp"]), _config(store, ids["bandmf"])]).split("\n")[1:]
    assert len(lines) == 2 and lines[0] != lines[1]
    assert "ε=1, DP-SGD," in lines[0] and "ε=1, BandMF b=2, parts independent," in lines[1]


def test_list_and_show_name_the_mechanism(lab, capsys):
    d, ids = lab
    assert cli.main(["--cache-dir", str(d), "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = {rid: next(line for line in out if rid in line) for rid in (ids["dp"], ids["bandmf"])}
    assert " DP-SGD " in row[ids["dp"]] and "BandMF b=2 " in row[ids["bandmf"]]
    assert cli.main(["--cache-dir", str(d), "show", ids["bandmf"]]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert "BandMF b=2" in shown[0] and "  noise: BandMF b=2, parts independent" in shown


def test_compare_table_reading_legend_and_captions(lab, app_env, monkeypatch):  # noqa: F811
    """Compare with the two lp-fft runs and a chosen run with nothing to draw yet: the table's mechanism column,
    a reading that says the runs differ in their mechanism, a legend that names both, and captions that list
    exactly the two runs drawn."""
    d, ids = lab
    monkeypatch.setenv("DPVIZ_CACHE_DIR", str(d))
    store = Store(d)
    empty = store.create_run("0" * 16, json.dumps(_config(store, ids["fft"])), 6)  # chosen, no point yet
    store.finish_run(empty, "cancelled")
    said = []
    real = figures.release_caption
    monkeypatch.setattr(figures, "release_caption", lambda *a, **k: said.append(real(*a, **k)) or said[-1])
    try:
        at = open_page("pages/compare.py")
        said.clear()  # the page's first selection: its newest runs
        at.multiselect(key="cmp_runs").set_value([ids["dp"], ids["bandmf"], empty]).run()
        assert not at.exception, [e.value for e in at.exception]
        table = at.dataframe[-1].value.set_index("run_id")
        assert table.loc[ids["dp"], "mechanism"] == "DP-SGD" and table.loc[ids["bandmf"], "mechanism"] == "BandMF b=2"
        reading = " ".join(m.value for m in at.markdown if "best final test accuracy" in m.value)
        assert "The runs compared differ in mechanism" in reading
        assert re.search(r"by lp-fft at ε = 1 (under BandMF b=2 )?\(", reading), reading
        fig = json.loads(at.get("plotly_chart")[0].proto.spec)
        legend = {t["name"].replace("<br>", " "): t["line"]["dash"] for t in fig["data"]}
        assert len(legend) == 2, legend  # the run with nothing to draw is not in the plot
        assert sorted(legend.values()) == sorted([style.dash("dp-sgd"), style.dash("bandmf")])
        assert any("DP-SGD" in n for n in legend) and any("BandMF b=2" in n for n in legend)
        assert said, "no export caption was made"
        for caption in said:
            runs = [line for line in caption.split("\n") if line.startswith("• ")]
            assert len(runs) == 2 and "DP-SGD" in runs[0] and "BandMF b=2" in runs[1], caption
    finally:
        store.delete_run(empty)


@pytest.fixture(scope="module")
def audits(lab):
    """White-box audits of the two lp-fft configurations (100 canaries)."""
    from dpviz import audit

    d, _ = lab
    spec = audit.AuditSpec(canaries=100)
    return {k: audit.audit(RunConfig(strategy="lp-fft", **SMALL, **extra), spec, store=Store(d))
            for k, extra in (("dp", {}), ("bandmf", BANDMF))}


def test_audit_titles_and_sweeps_name_the_mechanism(lab, audits):
    from dpviz import audit
    from dpviz.audit import readings, sweep

    titles = {k: [f(r).layout.title.text for f in (figures.audit.bounds_figure, figures.audit.scores_figure)]
              for k, r in audits.items()}
    assert all("BandMF b=2" in t for t in titles["bandmf"]) and not any("BandMF" in t for t in titles["dp"])
    assert titles["dp"] != titles["bandmf"]
    roc = figures.audit.roc_figure(audits["bandmf"], *audit.roc(audits["bandmf"]))
    assert "BandMF b=2" in roc.layout.title.text
    d, _ = lab
    axes = dict(strategies=["lp-fft"], epsilons=[1.0], threats=["white-box"])
    rows = {k: sweep.stored(RunConfig(strategy="lp-fft", **SMALL, **extra), audit.AuditSpec(canaries=100),
                            store=Store(d), **axes) for k, extra in (("dp", {}), ("bandmf", BANDMF))}
    assert [r["mechanism"] for r in rows["dp"]] == ["dp-sgd"] and [r["mechanism"] for r in rows["bandmf"]] == ["bandmf"]
    fig = figures.audit.sweep_figure(rows["bandmf"])
    assert "BandMF b=2" in fig.layout.title.text and "BandMF b=2" not in figures.audit.sweep_figure(
        rows["dp"]).layout.title.text
    both = figures.audit.sweep_figure(rows["dp"] + rows["bandmf"])  # one figure of both: the legend tells them
    assert {t.name for t in both.data if t.mode == "lines+markers"} == {"lp-fft DP-SGD", "lp-fft BandMF b=2"}
    assert "under BandMF b=2" in readings.sweep_reading(rows["bandmf"])
    assert "BandMF b=2" in sweep.row_label(RunConfig(strategy="lp-fft", **SMALL, **BANDMF), rows["bandmf"][0])


# --- 3. one colour per strategy and one dash per mechanism, from one table -------------------------------------
def _run_traces(fig, runs: dict) -> list[tuple[str, object]]:
    """(run id, trace) for each trace of ``fig`` that draws one of ``runs`` (id → config), found by its id in
    the trace's name or legend group."""
    out = []
    for tr in fig.data:
        text = f"{tr.name or ''} {tr.legendgroup or ''}"
        hit = [rid for rid in runs if rid in text]
        if len(hit) == 1:
            out.append((hit[0], tr))
    return out


def _check(fig, runs: dict, what: str) -> int:
    """Every trace of a run in its strategy's colour and (unless it is a fit, in the dash of no run) its
    mechanism's dash, from the table; returns how many traces it checked."""
    table = figures.style_table()
    traced = _run_traces(fig, runs)
    for rid, tr in traced:
        c = runs[rid]
        assert tr.line.color == table["strategy"][c["strategy"]], (what, tr.name, tr.line.color)
        assert tr.line.dash in (table["mechanism"][c.get("mechanism", "dp-sgd")], style.MODEL_DASH), (what, tr.name)
    return len(traced)


def figures_of(store: Store, ids: list[str]) -> dict:
    """Every figure that draws runs, built as its page builds it from these runs' stored results."""
    df = results.curves(store, ids)
    out = {"compare curves": figures.metric_curves(df, "test_accuracy"),
           "live curves": figures.live_curves(df, ("loss", "test_accuracy", "epsilon")),
           "knn": figures.metric_curves(results.analysis_curves(store, ids, "knn", "accuracy"), "knn_accuracy")}
    for name, field in (("separability", "fuzziness"), ("residual", "residual")):
        out[name] = figures.analyses.law_plot(results.law_series(store, ids, name, field)[0], field)
    cdf = results.curvature_table(store, ids)
    out["trace"] = figures.curvature.trace_figure(cdf, {r: results.phase_switch(store.get_run(r)) for r in ids})
    out["terms"] = figures.curvature.terms_figure(cdf)
    return out


def test_every_figure_draws_a_run_in_its_strategys_colour_and_mechanisms_dash(lab):
    d, ids = lab
    store = Store(d)
    runs = _runs(store, ids)
    table = figures.style_table()
    assert len({table["strategy"][c["strategy"]] for c in runs.values()}) == 3  # three strategies, three colours
    for what, fig in figures_of(store, list(runs)).items():
        assert _check(fig, runs, what) >= len(runs), what  # every run drawn, and checked
        assert sorted(figures.drawn_runs(fig)) == sorted(runs), what  # what an export's caption names
    bands = results.seed_bands(results.curves(store, list(runs), ["test_accuracy"]))
    fig = figures.band_curves(bands, "test_accuracy")
    for tr in fig.data:  # named by strategy: the band and its mean line
        strategy = (tr.name or "").split(" ")[0]
        if strategy:
            assert tr.line.color == table["strategy"][strategy], tr.name
    dashes = {tr.name: tr.line.dash for tr in fig.data if tr.name}
    assert sorted(dashes.values()).count(style.dash("bandmf")) == 1  # the BandMF group, named so
    assert any("BandMF b=2" in n for n in dashes if dashes[n] == style.dash("bandmf"))


def test_a_caption_lists_only_the_runs_a_figure_draws(lab):
    """A chosen run whose analysis has not landed is not in the plot, so not in its export's caption."""
    d, ids = lab
    store = Store(d)
    series, _ = results.law_series(store, [ids["dp"], ids["fft"]], "separability", "fuzziness")
    fig = figures.analyses.law_plot(series, "D_l")
    assert figures.drawn_runs(fig) == [ids["dp"], ids["fft"]]
    fig = figures.metric_curves(results.curves(store, [ids["dp"]]), "decelerator_public")  # no run has it
    assert figures.drawn_runs(fig) == []


@pytest.mark.parametrize("page,key", [("pages/compare.py", "cmp_runs"), ("pages/separability.py", "sl_runs"),
                                      ("pages/distortion.py", "fd_runs"), ("pages/curvature.py", "cu_runs")])
def test_every_page_draws_the_runs_from_the_one_table(lab, app_env, monkeypatch, page, key):  # noqa: F811
    """The figures the pages draw (their JSON as the browser gets it), for the three strategies and BandMF."""
    d, ids = lab
    monkeypatch.setenv("DPVIZ_CACHE_DIR", str(d))
    runs = _runs(Store(d), ids)
    at = open_page(page)
    at.multiselect(key=key).set_value(list(runs)).run()
    assert not at.exception, [e.value for e in at.exception]
    checked = 0
    for chart in at.get("plotly_chart"):
        fig = go.Figure(json.loads(chart.proto.spec))
        checked += _check(fig, runs, f"{page} {chart.key}")
    assert checked >= len(runs), page


@pytest.mark.browser
def test_an_exported_svg_keeps_the_figures_colours_and_dashes(lab):
    """The Separability export (kaleido's Chromium): each run's line in the SVG in its strategy's colour, the
    BandMF run's dashed; the caption lists the runs drawn."""
    from dpviz.figures import export

    d, ids = lab
    store = Store(d)
    runs = _runs(store, ids)
    series, _ = results.law_series(store, list(runs), "separability", "fuzziness")
    fig = figures.analyses.law_plot(series, "D_l")
    caption = results.caption([runs[r] for r in figures.drawn_runs(fig)])
    svg = export.figure_bytes(fig, "svg", caption=caption).decode()

    def rgb(hex_color):
        h = hex_color.lstrip("#")
        return f"rgb({int(h[:2], 16)}, {int(h[2:4], 16)}, {int(h[4:], 16)})"

    lines = re.findall(r'<path class="js-line" d="[^"]*" style="([^"]*)"', svg)
    strokes = {re.search(r"stroke: (rgb\([^)]*\))", s).group(1) for s in lines}
    want = {rgb(figures.color(c["strategy"])) for c in runs.values()}
    assert strokes == want, (strokes, want)
    lp_fft = [s for s in lines if rgb(figures.color("lp-fft")) in s]  # DP-SGD's, BandMF's, their fits
    dashes = {(re.search(r"stroke-dasharray: ([^;]*)", s) or [None, "solid"])[1] for s in lp_fft}
    assert len(dashes) == 3 and "solid" in dashes, dashes  # BandMF's dash survives the export, as the fits' does
    assert caption.count("\n• ") == len(runs) and "BandMF b=2, parts independent" in caption
