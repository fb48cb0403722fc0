"""The figure package: one style module, strategy colours from the registry, LoRA on the sparse profile."""

import ast
import re
from pathlib import Path

import pandas as pd
import pytest

from dpviz import figures, results, strategies
from dpviz.figures import style

FIGURES = Path(figures.__file__).parent


@pytest.mark.parametrize("path", sorted(p.name for p in FIGURES.glob("*.py")
                                        if p.name not in ("__init__.py", "style.py", "export.py")))
def test_figure_modules_take_their_style_from_the_style_module_only(path):
    src = (FIGURES / path).read_text()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom) and node.module == "dpviz.figures.style":
            assert not [a.name for a in node.names if a.name.startswith("_")], f"{path} imports a private helper"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("dpviz.figures", "dpviz.results")):
            raise AssertionError(f"{path} imports {node.module}")
    assert not re.findall(r"#[0-9a-fA-F]{6}\b", src), f"{path} keeps its own colours (palette: style.py)"


def curves(strats) -> pd.DataFrame:
    return pd.DataFrame([{"run_id": s, "label": s, "strategy": s, "epsilon": 1.0, "seed": 0, "group": s, "step": k,
                          "metric": "loss", "value": 1.0 / (k + 1)} for s in strats for k in range(3)])


def test_every_registered_strategy_is_drawn_in_its_declared_colour(monkeypatch):
    class Toy:  # a strategy registered after figures was imported
        color = "#123456"

    monkeypatch.setitem(strategies.REGISTRY, "toy", Toy)
    names = [*strategies.names(), "unregistered"]
    fig = figures.metric_curves(curves(names), "loss")
    drawn = {tr.name: tr.line.color for tr in fig.data}
    safe = {n: strategies.get(n).color for n in strategies.names()}
    assert drawn == {**safe, "unregistered": style.GREY}  # each strategy in its declared colour
    assert drawn["toy"] == "#123456" and drawn["continual"] != style.GREY
    builtin = {n for n in strategies.names() if strategies.get(n).__module__.startswith("dpviz.strategies.")}
    assert {safe[n] for n in builtin} <= set(style.OKABE_ITO.values())  # the built-ins: colour-blind safe


def test_sparse_profile_draws_lora_ranks_in_the_lora_colour():
    rows = pd.DataFrame([{"epsilon": e, "strategy": "lora", "selection": "sparta", "sparsity": 0.2, "lora_rank": r,
                          "seed": 0, "test_accuracy": 0.5 + r / 100, "trainable_fraction": 0.01 * r}
                         for e in (1.0, 8.0) for r in (8, 1, 4, 2)]
                        + [{"epsilon": e, "strategy": "sparse", "selection": "sparta", "sparsity": 0.2, "lora_rank": 4,
                            "seed": 0, "test_accuracy": 0.6, "trainable_fraction": 0.2} for e in (1.0, 8.0)])
    fig = figures.sparse.profile_figure(results.profile_table(rows))
    lora = [tr for tr in fig.data if tr.legendgroup == "lora"]
    assert len(lora) == 2 and [tr.showlegend for tr in lora] == [True, False]  # one panel per ε, one legend entry
    for tr in lora:
        assert tr.marker.color == tr.line.color == style.color("lora")
        assert list(tr.x) == pytest.approx([1.0, 2.0, 4.0, 8.0])  # 100 · trainable_fraction, sorted
        assert tr.text == ("r = 1", "r = 2", "r = 4", "r = 8") and "text" in tr.mode
    sparta = [tr for tr in fig.data if tr.legendgroup == "sparta"][0]
    assert sparta.marker.color == style.color("sparse") and sparta.text is None


def test_private_caption_marks_statistics_of_private_data():
    assert figures.private_caption("dpviz: fft") == \
        "dpviz: fft — statistics of private data, NOT covered by the DP guarantee"


# --- figures fit for a paper: planted data through every builder --------------------------------------
import math  # noqa: E402
import struct  # noqa: E402

import numpy as np  # noqa: E402


def _curves(strats, metric="epsilon"):
    return pd.DataFrame([{"run_id": f"{s}{j}", "label": f"{s} ε=1 seed={j} [{s}{j}]", "strategy": s, "epsilon": 1.0 + j, "seed": j,
                          "group": '{"a": 1}', "step": k, "metric": metric, "value": 1.0 / (k + 1)}
                         for s in strats for j in range(2) for k in range(5)])

def audit_report(eps=1.0):
    rng = np.random.default_rng(0)
    return {"config": {"strategy": "fft"}, "epsilon": eps, "threat": "white-box", "canaries": 1000,
            "epsilon_lb": 0.3, "epsilon_lb_fdp": 0.4, "ideal": {"epsilon_lb": 0.9, "epsilon_lb_fdp": 1.0},
            "epsilon_spent": 0.98, "ceiling": 3.2, "confidence": 0.95, "scores_in": list(rng.normal(1, 1, 500)),
            "scores_out": list(rng.normal(0, 1, 500)), "auc": 0.576, "tpr_at_fpr_1pct": 0.02}


def tuning_study():
    """An in-memory search over two learning rates (log scale) whose accuracy follows lr_ft."""
    import math

    import optuna
    from optuna.distributions import FloatDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("base", {"strategy": "lp-fft", "epsilon": 2.0, "dataset": "digits"})
    study.set_user_attr("proxy", "glyphs")
    dists = {"lr_lp": FloatDistribution(0.05, 5.0, log=True), "lr_ft": FloatDistribution(0.001, 0.3, log=True)}
    rng = np.random.default_rng(0)
    for _ in range(8):
        p = {"lr_lp": float(0.05 * 100 ** rng.random()), "lr_ft": float(0.001 * 300 ** rng.random())}
        study.add_trial(optuna.trial.create_trial(params=p, distributions=dists,
                                                  value=0.3 + 0.2 * math.log10(p["lr_ft"] / 0.001) / 2.5))
    return study


def planted() -> dict:
    """Every figure builder on planted data (the tuning figures on an in-memory Optuna study)."""
    out = {}
    study = tuning_study()
    for kind in figures.tuning.KINDS:
        out[f"tuning_{kind}"] = figures.tuning.tuning_figure(study, kind)
    out["metric_curves"] = figures.metric_curves(_curves(["fft", "lp"]), "epsilon")
    bands = pd.DataFrame([{"group": g, "strategy": g, "epsilon": 1.0, "metric": "loss", "step": k, "mean": 1/(k+1), "std": 0.1, "n": 3}
                          for g in ("fft", "lp") for k in range(5)])
    out["band_curves"] = figures.band_curves(bands, "loss")
    rows = pd.DataFrame([{"epsilon": e, "lp_fraction": p, "test_accuracy": 0.5 + p * (e or 16) / 40, "test_loss": 1 - p / 3}
                         for e in (1.0, 8.0) for p in (0, 0.5, 1)])
    out["utility_curve"] = figures.utility_curve(rows)
    ser = [{"label": f"fft ε={e} [run{e}]", "strategy": "fft", "epsilon": e, "values": list(3 * 0.7 ** np.arange(6) + 0.01 * e),
            "rho": 0.7, "intercept": 3.0, "r2": 0.99, "pearson_r": 0.99} for e in (1.0, 2.0, 8.0)]
    out["law_plot"] = figures.analyses.law_plot(ser, "D_l")
    lt = pd.DataFrame([{"layer": l, "step": s, "value": 10 ** -l * (s + 1)} for l in range(4) for s in (0, 10)])
    out["layer_heatmap"] = figures.analyses.layer_heatmap(lt, "D_l", "fft ε=1 seed=0 [abc]")
    rng = np.random.default_rng(0)
    frames = [(s, rng.normal(size=(40, 2)), np.arange(40) % 3) for s in (0, 10)]
    out["embedding_map"] = figures.analyses.embedding_map(frames, "fft ε=1 seed=0 [abc]", "pca")
    r = audit_report()
    out["bounds"] = figures.audit.bounds_figure(r)
    out["scores"] = figures.audit.scores_figure(r)
    out["roc"] = figures.audit.roc_figure(r, np.linspace(0, 1, 50), np.linspace(0, 1, 50) ** 0.8)
    out["sweep_one"] = figures.audit.sweep_figure([{"strategy": "fft", "epsilon": 1.0, "threat": "white-box", "epsilon_lb": 0.4, "ceiling": 3.2, "canaries": 1000}])
    out["sweep"] = figures.audit.sweep_figure([{"strategy": s, "epsilon": e, "threat": t, "epsilon_lb": 0.1 * (e or 16), "ceiling": 3.2, "canaries": 1000}
                                       for s in ("fft", "lp") for e in (0.5, 1, 2, 4, 8, None) for t in ("white-box", "black-box")])
    cdf = pd.DataFrame([{"run_id": f"r{i}", "label": f"fft [r{i}]", "strategy": "fft", "step": k, "trace": 10 + k + i, "stderr": 1,
                         "curvature": 1 + k, "sampling": 2, "decelerator": 3, "gtg": 4} for i in range(2) for k in range(4)])
    out["trace"] = figures.curvature.trace_figure(cdf)
    out["terms"] = figures.curvature.terms_figure(cdf)
    bl = pd.DataFrame([{"block": f"block{b}", "step": k, "trace": b + k, "stderr": 0.1} for b in range(3) for k in range(4)])
    out["blocks"] = figures.curvature.blocks_figure(bl, "fft [r0]")
    acc = pd.DataFrame([{"accountant": a, "batch_size": b, "noise_multiplier": 1 + b / 1000 * j, "sigma2_over_b": (1 + j) / b}
                        for j, a in enumerate(("rdp", "gdp", "prv")) for b in (16, 64, 256, 1024)])
    out["accountants"] = figures.curvature.accountants_figure(acc, 1.0, 1e-5, 3)
    out["batch_prediction"] = figures.curvature.batch_prediction_figure({"total_improvement": {16: 1.0, 64: 2.0, 256: 1.5}, "best_batch_size": 64}, "fft [r0]")
    out["decelerator"] = figures.curvature.decelerator_figure([(0, 3.0), (10, 2.0), (20, 1.0)], "continual [r0]", switch=10)
    prof = pd.DataFrame([{"epsilon": e, "method": m, "trainable_pct": p, "test_accuracy": 0.5 + p / 300, "std": 0.01, "lora_rank": 4}
                         for e in (1.0, 8.0) for m in ("sparta", "magnitude", "fft") for p in ((100,) if m == "fft" else (1, 5, 20))])
    out["profile"] = figures.sparse.profile_figure(prof)
    out["mask"] = figures.sparse.mask_figure({"l1": [0, 2]}, {"l1": 4, "l2": 8}, "sparse [r0]")
    out["layer_fraction"] = figures.sparse.layer_fraction_figure({"l1": 0.5, "l2": 0.25}, "sparse [r0]")
    class C: pass
    c = C(); c.times = [0, 1, 2, 3]; c.mean = {"lp": {"loss": [1, .8, .6, .5]}, "fft": {"loss": [1, .7, .5, .4]}, "lp-fft": {"loss": [1, .75, .5, .3]}}
    c.std = {k: {"loss": [0.05] * 4} for k in c.mean}; c.closed_form = [1, .8, .6, .5]; c.setting = {"lp_share": 0.5, "time": 3, "epsilon": 1.0}; c.noise = 0.3
    out["theory_time"] = figures.theory.time_figure(c, "loss")
    u = C(); u.epsilons = [0.5, 1.0]; u.shares = [0, 0.5, 1]; u.loss = {"0.5": [0.9, 0.5, 0.7], "1.0": [0.6, 0.3, 0.4]}; u.best_share = {"0.5": 0.5, "1.0": 0.5}
    out["theory_utility"] = figures.theory.utility_figure(u, 0.5)
    out["theory_overlay"] = figures.theory.overlay_figure({"times": [0, 1, 2], "engine": [1, .6, .4], "diffusion": [1, .65, .42], "strategy": "fft", "epsilon": 1.0, "gap": 0.02})
    out["claim"] = figures.reproduce.claim_figure({"id": "C1", "paper": "Ke et al. 2024", "seed": 0, "verdict": "agrees",
                                           "measured": {"ε=1 p=0": {"mean": .5, "std": .01}, "ε=1 p=1": {"mean": .6, "std": .01}, "ε=8 p=0": {"mean": .7, "std": .01}}})
    return out


NAMES = sorted([f"tuning_{kind}" for kind in figures.tuning.KINDS] + [
    "metric_curves", "band_curves", "utility_curve", "law_plot", "layer_heatmap", "embedding_map", "bounds", "scores",
    "roc", "sweep_one", "sweep", "trace", "terms", "blocks", "accountants", "batch_prediction", "decelerator", "profile",
    "mask", "layer_fraction", "theory_time", "theory_utility", "theory_overlay", "claim"])
"""What `planted` builds, known without building it: collecting the suite builds no figure."""


class _Planted(dict):
    """`planted`'s figures, built on the first test that reads one (≈ 2 s: not in every process that collects)."""

    def __missing__(self, name):
        self.update(planted())
        return dict.__getitem__(self, name)


PLANTED = _Planted()


def test_the_planted_names_are_what_planted_builds():
    PLANTED[NAMES[0]]  # builds them all, once per process
    assert sorted(PLANTED) == NAMES


def _texts(fig) -> list[str]:
    lay = fig.layout
    out = [lay.title.text or ""] + [a.text or "" for a in lay.annotations]
    for ax in [k for k in lay.to_plotly_json() if k.startswith(("xaxis", "yaxis"))]:
        out.append(lay[ax].title.text or "")
    return out + [tr.name or "" for tr in fig.data]


@pytest.mark.parametrize("name", NAMES)
def test_no_capital_epsilon_and_titles_fit_a_narrow_column(name):
    fig = PLANTED[name]
    assert not [t for t in _texts(fig) if "Ε" in t], "ε is written lowercase"
    title = fig.layout.title.text
    assert title and all(len(line) <= 60 for line in title.split("<br>")), title
    assert fig.layout.margin.t >= 36 + 20 * (title.count("<br>") + 1) - 1  # the top margin holds every line


@pytest.mark.parametrize("name", NAMES)
def test_figures_with_several_traces_name_them(name):
    fig = PLANTED[name]
    shown = [tr for tr in fig.data if tr.showlegend is not False and tr.name]
    if len(fig.data) > 1 and len({tr.legendgroup or tr.name for tr in fig.data}) > 1:
        assert fig.layout.showlegend is not False and len(shown) >= 2 or fig.layout.annotations, name


@pytest.mark.parametrize("name", NAMES)
def test_log_axes_tick_at_powers_of_ten_only(name):
    fig = PLANTED[name]
    lay = fig.layout.to_plotly_json()
    logs = [k for k, v in lay.items() if k.startswith(("xaxis", "yaxis")) and v.get("type") == "log"]
    for k in logs:
        ax = lay[k]
        if "tickvals" in ax:
            finite = [v for v, t in zip(ax["tickvals"], ax["ticktext"]) if t != "∞"]
            assert finite and all(abs(math.log10(v) - round(math.log10(v))) < 1e-9 for v in finite), (k, ax)
        else:
            assert ax.get("dtick") == 1 and ax.get("exponentformat") == "power", (k, ax)
            lo, hi = ax["range"]
            assert hi - lo >= 1  # at least two decades' ticks show


def test_layer_axis_ticks_integers_and_fits_are_in_the_legend():
    fig = PLANTED["law_plot"]
    assert fig.layout.xaxis.dtick == 1 and fig.layout.xaxis.tick0 == 0
    assert not fig.layout.annotations  # no labels to overlap
    runs = [tr for tr in fig.data if tr.marker.symbol]  # the fits draw no markers
    assert {tr.line.color for tr in fig.data} == {style.color("fft")}  # three fft runs: fft's colour
    assert len({tr.marker.symbol for tr in runs}) == 3  # a marker per run (per ε)
    assert sum("ρ=" in tr.name for tr in fig.data) == 3


def test_tuning_figures_put_learning_rates_on_decades_and_leave_room_for_the_importances():
    """Parallel coordinates: each learning-rate axis spans whole decades ticked 10^k only (as `style.log_axis`),
    the accuracy axis round values; the importance axis reaches past the longest bar, whose value label shows;
    the history in Okabe–Ito colours."""
    fig = PLANTED["tuning_parallel"]
    names = list(fig.layout.xaxis.ticktext)
    assert names == ["test accuracy", "lr_ft", "lr_lp"]
    ticks = {n: [(a.y, a.text) for a in fig.layout.annotations if a.x == i] for i, n in enumerate(names)}
    assert [t for _, t in ticks["lr_ft"]] == ["10<sup>−3</sup>", "10<sup>−2</sup>", "10<sup>−1</sup>", "1"]
    assert [t for _, t in ticks["lr_lp"]][0] == "10<sup>−2</sup>" and [t for _, t in ticks["lr_lp"]][-1] == "10"
    assert all(ticks[n][0][0] == 0 and ticks[n][-1][0] == 1 for n in names)  # the axes end on ticks
    assert [t for _, t in ticks["test accuracy"]] == ["0.3", "0.35", "0.4", "0.45", "0.5"]
    lines = [tr for tr in fig.data if tr.mode == "lines"]
    assert len(lines) == 8 and [tr.name for tr in lines if tr.showlegend] == ["best trial"]
    assert all(0 <= y <= 1 for tr in lines for y in tr.y)
    imp = PLANTED["tuning_importance"]
    assert imp.layout.xaxis.range[1] >= 1.15 * max(imp.data[0].x) and imp.data[0].cliponaxis is False
    hist = PLANTED["tuning_history"]
    assert {tr.name for tr in hist.data if tr.y is not None and len(tr.y)} >= {"trial", "best so far"}
    assert {hist.data[0].marker.color, hist.data[1].line.color} <= set(style.OKABE_ITO.values())


def test_the_learning_rate_is_drawn_on_a_log_axis():
    df = pd.DataFrame([{"run_id": "r", "label": "lp-fft [r]", "strategy": "lp-fft", "epsilon": 1.0, "seed": 0,
                        "group": "g", "step": k, "metric": "lr", "value": 2.0 if k < 3 else 0.05} for k in range(6)])
    ax = figures.metric_curves(df, "lr").layout.yaxis
    assert ax.type == "log" and ax.dtick == 1 and list(ax.range)[0] < -1.9 and list(ax.range)[1] > 0.9


def test_a_one_point_audit_sweep_draws_the_diagonal_and_the_ceiling():
    fig = PLANTED["sweep_one"]
    diag = [tr for tr in fig.data if tr.name.startswith("ε_lb = ε")][0]
    ceiling = [tr for tr in fig.data if tr.name.startswith("ceiling")][0]
    assert max(diag.x) / min(diag.x) >= 8 and list(diag.x) == list(diag.y)
    assert max(ceiling.x) > min(ceiling.x)


def test_the_palette_is_colour_blind_safe_with_dashes_and_markers_as_further_cues():
    fig = PLANTED["metric_curves"]
    assert {tr.line.color for tr in fig.data} <= set(style.OKABE_ITO.values())
    assert {tr.line.dash for tr in fig.data} == {style.dash("dp-sgd")}  # one mechanism: one dash
    assert len({(tr.line.color, tr.line.dash, tr.marker.symbol) for tr in fig.data}) == len(fig.data)  # told apart


def _pdf_title(pdf: bytes) -> str:
    """The Title of the PDF's document information, by its last trailer (no PDF library needed)."""
    trailer = pdf[pdf.rfind(b"trailer"):]
    n, g = re.search(rb"/Info\s+(\d+)\s+(\d+)\s+R", trailer).groups()
    obj = re.findall(rb"\b" + n + rb"\s+" + g + rb"\s+obj\s*<<(.*?)>>\s*endobj", pdf, re.S)[-1]
    hexed = re.search(rb"/Title\s*<([0-9A-Fa-f]+)>", obj).group(1)
    raw = bytes.fromhex(hexed.decode())
    assert raw[:2] == b"\xfe\xff"
    start = int(re.findall(rb"startxref\s+(\d+)", pdf)[-1])
    assert pdf[start:start + 4] == b"xref"  # the update's cross-reference section is where it says
    prev = int(re.search(rb"/Prev\s+(\d+)", trailer).group(1))
    assert pdf[prev:prev + 4] == b"xref"  # and the original's is kept
    return raw[2:].decode("utf-16-be")


@pytest.mark.browser
def test_exports_png_at_2x_vector_titles_and_a_caption_naming_every_run():
    from browser_util import need_chromium

    from dpviz.figures import export

    need_chromium()
    configs = [dict(strategy=s, epsilon=e, delta=1e-5, dataset="cifar10", backbone="cnn", seed=0, lp_fraction=0.5)
               for s in ("fft", "lp", "lp-fft", "sparse", "lora") for e in (1.0, "inf")]
    caption = results.caption(configs)
    fig = PLANTED["law_plot"]
    title = export.figure_title(fig)
    assert title == "D_l per layer, fitted ρl — ε ∈ {1, 2, 8}"
    png = export.figure_bytes(fig, "png", caption=caption)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">I", png[16:20])[0] >= 1800
    pdf = export.figure_bytes(fig, "pdf", caption=caption)
    assert _pdf_title(pdf) == title and b"Kaleido-fier" not in pdf[pdf.rfind(b"trailer") - 2000:]
    svg = export.figure_bytes(fig, "svg", caption=caption).decode()
    assert f"<title>{title}</title>" in svg
    assert all(line.replace("ε=∞", "ε=∞") in svg for line in caption.split("\n")[1:])  # every run, in full


@pytest.mark.browser
def test_a_long_caption_wraps_to_the_exports_width_instead_of_being_cut():
    """The Theory lab's one-line caption (≈ 220 characters) was cut at the PNG's right edge."""
    import re as _re

    from browser_util import need_chromium

    from dpviz.figures import export
    from dpviz.theory import readings
    from dpviz.theory import Setting

    caption = readings.caption(Setting())
    assert len(caption) > 150
    wrapped = export.wrap_caption(caption, 900)
    assert wrapped.replace("\n", " ") == caption and max(map(len, wrapped.split("\n"))) <= (900 - 40) // 7
    need_chromium()
    svg = export.figure_bytes(PLANTED["law_plot"], "svg", caption=caption).decode()
    text = svg[svg.index("theory lab: m="):]
    lines = _re.findall(r'>([^<]+)</tspan>', "<tspan>" + text[:text.index("</text>")])
    assert len(lines) >= 2 and " ".join(lines) == caption, lines  # drawn on several lines, every word of it


def test_html_export_is_one_offline_file_under_2_5_mb():
    from dpviz.figures import export

    page = export.figure_bytes(PLANTED["metric_curves"], "html", caption="dpviz: a run").decode()
    assert len(page) < 2_500_000 and "<script src" not in page and not re.search(r"(src|href)=\"https?:", page)
    assert "<title>ε spent vs step, ε ∈ {1, 2}</title>" in page


def test_csv_export_is_tidy_one_column_per_field():
    from dpviz.figures import export

    df = _curves(["fft", "lp"])
    df["group"] = [results.group_key({"strategy": s, "epsilon": 1.0, "lr": [0.1, 0.2]}) for s in df["strategy"]]
    out = pd.read_csv(__import__("io").BytesIO(export.csv_bytes(df)))
    assert "group" not in out and "group.lr" in out and "group.strategy" not in out  # the same as "strategy"
    assert not [c for c in out if out[c].astype(str).str.lstrip().str.startswith(("{", "[")).any()]


def test_live_curves_draw_each_run_once_in_the_legend_and_alike_in_every_panel():
    df = pd.concat([curves(["lp", "fft", "lp"]).assign(metric=m) for m in ("loss", "test_accuracy", "epsilon")])
    df["run_id"] = df["label"] = [f"{s} {i // 3 % 3}" for i, s in enumerate(df["strategy"])]  # two lp runs
    fig = figures.live_curves(df, ("loss", "test_accuracy", "epsilon"))
    assert [a.text for a in fig.layout.annotations] == ["Training loss (not covered by ε)", "Test accuracy", "ε spent"]
    assert [fig.layout[f"xaxis{k}"].title.text for k in ("", 2, 3)] == ["training step"] * 3
    assert fig.layout.yaxis.title.text == "cross-entropy, nats" and fig.layout.yaxis2.title.text == "fraction"
    shown = [tr.name for tr in fig.data if tr.showlegend is not False]
    assert shown == ["lp 0", "fft 1", "lp 2"]  # one legend entry per run
    for rid in shown:  # the same colour, dash and marker in every panel
        lines = {(tr.line.color, tr.line.dash, tr.marker.symbol) for tr in fig.data if tr.legendgroup == rid}
        assert len(lines) == 1 and len([tr for tr in fig.data if tr.legendgroup == rid]) == 3
    lp = {tr.legendgroup: tr.marker.symbol for tr in fig.data if tr.name.startswith("lp")}
    assert lp["lp 0"] != lp["lp 2"]  # two runs of one strategy, mechanism and ε: two markers


def test_the_curvature_chart_marks_where_lp_fft_switched_to_fft():
    df = pd.DataFrame([{"run_id": r, "label": r, "strategy": s, "step": k, "trace": 10.0 + k, "stderr": 1.0}
                       for r, s in (("a", "lp-fft"), ("b", "fft")) for k in (0, 5, 10)])
    fig = figures.curvature.trace_figure(df, {"a": 4, "b": None})
    marks = [sh for sh in fig.layout.shapes if sh.type == "line"]
    assert [(m.x0, m.line.color) for m in marks] == [(4, style.color("lp-fft"))]
    assert [a.text for a in fig.layout.annotations] == ["LP → FFT"]
    assert results.phase_switch({"summary": {"phases": [{"name": "lp", "steps": 4}, {"name": "fft", "steps": 8}]}}) == 4
    assert results.phase_switch({"summary": {"phases": [{"name": "fft", "steps": 8}]}}) is None
    assert results.phase_switch({"summary": None}) is None
