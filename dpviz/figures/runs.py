"""Figures of runs: metric curves, seed bands and the budget split's utility curve.

Built from `dpviz.results` tables in the one style of `dpviz.figures.style`: a colour per
strategy (dash per ε), axis labels with units, ε in titles.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dpviz.figures.style import DASHES, SERIES, color, dash_by_eps, eps_order, eps_text, layout, log_axis
from dpviz.figures.style import label as axis_label

LOG_METRICS = ("lr",)
"""Metrics drawn on a log axis: a learning rate spans decades (LP-FFT's head rate is ~30× its backbone's)."""


def _title(metric: str, df: pd.DataFrame) -> str:
    eps = sorted({str(e) for e in df["epsilon"]}, key=lambda e: float(e))
    name = axis_label(metric).split(" (")[0]
    if name[:1].isascii() and not name[1:2].isupper():  # keep "kNN"; ε stays lowercase
        name = name[:1].upper() + name[1:]
    title = f"{name} vs step, ε ∈ {{{', '.join(eps_text(e) for e in eps)}}}"
    datasets = sorted({str(d) for d in df["dataset"]}) if "dataset" in df else []
    return title + (f"<br>runs on different datasets: {', '.join(datasets)}" if len(datasets) > 1 else "")


def _layout(fig: go.Figure, title: str, ylabel: str) -> go.Figure:
    return layout(fig, title, "training step", ylabel, height=380)


def metric_curves(df: pd.DataFrame, metric: str) -> go.Figure:
    """One line per run for ``metric`` (df from `results.curves`)."""
    fig = go.Figure()
    d = df[df["metric"] == metric]
    dash = dash_by_eps(df) if len(df) else {}
    seen: dict = {}
    for (rid, label, strat, eps), g in d.groupby(["run_id", "label", "strategy", "epsilon"], sort=False):
        k = seen[(strat, str(eps))] = seen.get((strat, str(eps)), -1) + 1  # same strategy and ε: vary dash
        style = DASHES[(DASHES.index(dash.get(str(eps), "solid")) + k) % len(DASHES)]
        fig.add_trace(go.Scatter(x=g["step"], y=g["value"], name=label, mode="lines",
                                 line=dict(color=color(strat), dash=style)))
    fig = _layout(fig, _title(metric, df) if len(df) else axis_label(metric), axis_label(metric))
    return log_axis(fig, "y", d["value"]) if metric in LOG_METRICS and len(d) else fig


def band_curves(bands: pd.DataFrame, metric: str) -> go.Figure:
    """Mean ± std over seeds per group (bands from `results.seed_bands`)."""
    fig = go.Figure()
    d = bands[bands["metric"] == metric]
    dash = dash_by_eps(bands) if len(bands) else {}
    for (grp, strat, eps), g in d.groupby(["group", "strategy", "epsilon"], sort=False):
        c, n = color(strat), int(g["n"].max())
        name = f"{strat} ε={eps_text(eps)} (n={n})"
        fig.add_trace(go.Scatter(x=list(g["step"]) + list(g["step"][::-1]),
                                 y=list(g["mean"] + g["std"]) + list((g["mean"] - g["std"])[::-1]),
                                 fill="toself", fillcolor=c, opacity=0.18, line=dict(width=0),
                                 hoverinfo="skip", showlegend=False, legendgroup=grp))
        fig.add_trace(go.Scatter(x=g["step"], y=g["mean"], name=name, mode="lines", legendgroup=grp,
                                 line=dict(color=c, dash=dash.get(str(eps), "solid"))))
    title = (_title(metric, bands) + "<br>mean ± std over seeds") if len(bands) else axis_label(metric)
    return _layout(fig, title, axis_label(metric))


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
