"""Figures of runs: metric curves, seed bands and the budget split's utility curve.

Built from `dpviz.results` tables in the one style of `dpviz.figures.style`: a colour per strategy, a dash
per noise mechanism and a marker per ε (`style.run_styles`), axis labels with units, ε in titles.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dpviz.privacy import names
from dpviz.figures.style import (DASHES, LEGEND_LINE, SERIES, eps_order, eps_text, layout, log_axis, marker,
                                 metric_label, drawn, run_styles, wrap)
from dpviz.figures.style import label as axis_label
from dpviz.privacy import release

LOG_METRICS = ("lr",)
"""Metrics drawn on a log axis: a learning rate spans decades (LP-FFT's head rate is ~30× its backbone's)."""


def _name(metric: str) -> str:
    """``metric``'s label without its unit, capitalised ("kNN" and "ε" kept as they are)."""
    name = axis_label(metric).split(" (")[0]
    return name[:1].upper() + name[1:] if name[:1].isascii() and not name[1:2].isupper() else name


def _title(metric: str, df: pd.DataFrame) -> str:
    eps = sorted({str(e) for e in df["epsilon"]}, key=lambda e: float(e))
    name = _name(metric)
    title = f"{name} vs step, ε ∈ {{{', '.join(eps_text(e) for e in eps)}}}"
    datasets = sorted({str(d) for d in df["dataset"]}) if "dataset" in df else []
    return title + (f"<br>runs on different datasets: {', '.join(datasets)}" if len(datasets) > 1 else "")


def _layout(fig: go.Figure, title: str, ylabel: str) -> go.Figure:
    return layout(fig, title, "training step", ylabel, height=380)


def _mechanisms(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``mechanism`` column (a table without one: runs of DP-SGD)."""
    return df if "mechanism" in df else df.assign(mechanism=names.DEFAULT)


def _run_lines(d: pd.DataFrame, styles: dict):
    """(run id, label, rows, line, marker) per run of ``d``, styled by ``styles`` (`style.run_styles`)."""
    for (rid, label), g in d.groupby(["run_id", "label"], sort=False):
        line, symbol = styles[rid]
        yield rid, label, g, line, marker(symbol, color=line["color"])


def _styles(df: pd.DataFrame) -> dict:
    """Run id → (line, marker) over every run of ``df`` (all its metrics: a run looks alike in every panel)."""
    runs = _mechanisms(df).drop_duplicates("run_id")
    return run_styles(zip(runs["run_id"], runs["strategy"], runs["mechanism"], runs["epsilon"]))


def metric_curves(df: pd.DataFrame, metric: str) -> go.Figure:
    """One line per run for ``metric`` (df from `results.curves`)."""
    fig = go.Figure()
    d = df[df["metric"] == metric]
    for _, label, g, line, mark in _run_lines(d, _styles(df)):
        fig.add_trace(go.Scatter(x=g["step"], y=g["value"], name=wrap(label, LEGEND_LINE), mode="lines+markers",
                                 line=line, marker=mark))
    fig = drawn(_layout(fig, _title(metric, df) if len(df) else axis_label(metric), metric_label(metric)), d["run_id"])
    return log_axis(fig, "y", d["value"]) if metric in LOG_METRICS and len(d) else fig


def live_curves(df: pd.DataFrame, metrics: tuple[str, ...]) -> go.Figure:
    """``metrics`` side by side, one panel each, and one legend under them all: a line per run (df from
    `results.curves`), the same run in the same colour and dash in every panel.

    One figure rather than a figure per metric: the panels share the page's width, the title and the legend
    take all of it, so neither is cut nor covers an axis title in a narrow window.
    """
    from plotly.subplots import make_subplots

    titles = [release.metric_label(m, _name(m)) for m in metrics]  # a private batch's loss: not covered by ε
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=titles,
                        horizontal_spacing=0.1)
    styles = _styles(df)
    for col, metric in enumerate(metrics, start=1):
        for rid, label, g, line, mark in _run_lines(df[df["metric"] == metric], styles):
            fig.add_trace(go.Scatter(x=g["step"], y=g["value"], name=wrap(label, LEGEND_LINE), mode="lines+markers",
                                     line=line, marker=mark, legendgroup=rid, showlegend=col == 1), row=1, col=col)
    title = _title(metrics[0], df).split(", ", 1)[-1] if len(df) else ""
    fig = drawn(layout(fig, f"Live runs, {title}" if title else "Live runs", None, None, height=400), df["run_id"])
    for col, metric in enumerate(metrics, start=1):  # after `layout`, which sets the first panel's titles
        fig.update_yaxes(title_text=_unit(metric), row=1, col=col)
    fig.update_xaxes(title_text="training step")
    fig.update_annotations(font=dict(size=13))  # the panels' titles
    return fig.update_layout(legend_y=-0.25)  # an entry of two lines stays clear of the axis titles


def _unit(metric: str) -> str:
    """The unit part of ``metric``'s axis label ("fraction", "cross-entropy, nats"), or the label itself."""
    if metric == "epsilon":
        return "ε at the run's δ"
    text = axis_label(metric)
    return text[text.index("(") + 1:-1] if text.endswith(")") and "(" in text else text


def band_curves(bands: pd.DataFrame, metric: str) -> go.Figure:
    """Mean ± std over seeds per group (bands from `results.seed_bands`), in the table's colour and dash of the
    group's strategy and mechanism, a marker per ε; a group's mechanism is named where the groups' differ."""
    fig = go.Figure()
    bands = _mechanisms(bands)
    d = bands[bands["metric"] == metric]
    keys = bands.drop_duplicates("group")
    styles = run_styles(zip(keys["group"], keys["strategy"], keys["mechanism"], keys["epsilon"]))
    mixed = names.mixed(_noise(r) for _, r in keys.iterrows())
    for (grp, strat, eps), g in d.groupby(["group", "strategy", "epsilon"], sort=False):
        line, symbol = styles[grp]
        n, noise = int(g["n"].max()), names.named(_noise(g.iloc[0]), mixed)
        name = f"{strat} ε={eps_text(eps)}{' ' + noise if noise else ''} (n={n})"
        fig.add_trace(go.Scatter(x=list(g["step"]) + list(g["step"][::-1]),
                                 y=list(g["mean"] + g["std"]) + list((g["mean"] - g["std"])[::-1]),
                                 fill="toself", fillcolor=line["color"], opacity=0.18, line=dict(width=0),
                                 hoverinfo="skip", showlegend=False, legendgroup=grp))
        fig.add_trace(go.Scatter(x=g["step"], y=g["mean"], name=name, mode="lines+markers", legendgroup=grp,
                                 line=line, marker=marker(symbol, color=line["color"])))
    title = (_title(metric, bands) + "<br>mean ± std over seeds") if len(bands) else axis_label(metric)
    return _layout(fig, title, metric_label(metric))


def _noise(row) -> dict:
    """The mechanism fields of a table's row, as `names` reads them."""
    bands = row.get("bands")
    return {"mechanism": row.get("mechanism"), "bands": 1 if pd.isna(bands) else int(bands)}


def utility_curve(rows: pd.DataFrame, metric: str = "test_accuracy") -> go.Figure:
    """``metric`` (test accuracy or test loss) vs LP fraction, mean ± std over seeds, one curve per ε;
    the best fraction per ε (highest accuracy / lowest loss) marked.

    ``rows``: one row per finished run with epsilon, lp_fraction and the metric.
    """
    fig = go.Figure()
    rows = rows.dropna(subset=[metric]) if metric in rows else rows.iloc[:0]
    lower_better = metric.endswith("loss")
    for i, eps in enumerate(eps_order(rows["epsilon"].unique())):
        g = rows[rows["epsilon"] == eps].groupby("lp_fraction")[metric].agg(["mean", "std", "count"])
        g = g.reset_index().fillna({"std": 0.0})
        c = SERIES[i % len(SERIES)]
        name = f"ε = {eps_text('inf' if eps is None else eps)}"
        fig.add_trace(go.Scatter(x=g["lp_fraction"], y=g["mean"], error_y=dict(type="data", array=g["std"]),
                                 mode="lines+markers", name=name, line=dict(color=c, dash=DASHES[i % len(DASHES)])))
        best = g.loc[g["mean"].idxmin() if lower_better else g["mean"].idxmax()]
        fig.add_trace(go.Scatter(x=[best["lp_fraction"]], y=[best["mean"]], mode="markers", showlegend=False,
                                 marker=dict(symbol="star", size=16, color=c, line=dict(color="black", width=1)),
                                 hovertext=f"best p = {best['lp_fraction']:g} at {name}"))
    what = "Test loss" if lower_better else "Test accuracy"
    return layout(fig, f"{what} vs LP share p<br>mean ± std over seeds; ★ best p per ε",
                  "LP fraction p (share of steps on LP)", axis_label(metric), height=420)
