"""Every dpviz figure, built in one place from result tables (`dpviz.results`).

One style for all: a colour per strategy (dash per ε), axis labels with units,
ε in titles. Pages, notebooks and the export path all call these builders;
none draws its own copy.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

STRATEGY_COLORS = {"lp": "#1f77b4", "fft": "#d62728", "lp-fft": "#2ca02c", "partial": "#9467bd",
                   "sparse": "#ff7f0e"}
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
LABELS = {
    "loss": "training loss (cross-entropy, nats)", "train_accuracy": "training accuracy (fraction)",
    "test_accuracy": "test accuracy (fraction)", "test_loss": "test loss (cross-entropy, nats)",
    "epsilon": "ε spent (at the run's δ)", "clip_fraction": "per-sample gradients clipped (fraction)",
    "grad_norm": "mean per-sample gradient norm (L2)", "lr": "learning rate",
    "step_ms": "step wall time (ms)", "decelerator_public": "decelerator on public data",
}
ANALYSIS_LABELS = {"knn_accuracy": "kNN accuracy of backbone features (fraction)"}
TEMPLATE = "plotly_white"


def color(strategy: str) -> str:
    return STRATEGY_COLORS.get(strategy, "#7f7f7f")


def eps_text(eps) -> str:
    return "∞" if str(eps) == "inf" else f"{float(eps):g}"


def _dash_by_eps(df: pd.DataFrame) -> dict:
    eps = sorted({str(e) for e in df["epsilon"]}, key=lambda e: float(e))
    return {e: DASHES[i % len(DASHES)] for i, e in enumerate(eps)}


def _label(metric: str) -> str:
    return LABELS.get(metric) or ANALYSIS_LABELS.get(metric, metric)


def _title(metric: str, df: pd.DataFrame) -> str:
    eps = sorted({str(e) for e in df["epsilon"]}, key=lambda e: float(e))
    name = _label(metric).split(" (")[0]
    name = name if name[1:2].isupper() else name[:1].upper() + name[1:]  # keep "kNN"
    return f"{name} vs step — ε ∈ {{{', '.join(eps_text(e) for e in eps)}}}"


def _layout(fig: go.Figure, title: str, ylabel: str) -> go.Figure:
    fig.update_layout(template=TEMPLATE, title=title, xaxis_title="training step",
                      yaxis_title=ylabel, legend_title="run", showlegend=True, margin=dict(t=60, b=50, l=60, r=20),
                      height=380, uirevision="keep")  # uirevision: zoom survives live redraws
    return fig


def metric_curves(df: pd.DataFrame, metric: str) -> go.Figure:
    """One line per run for ``metric`` (df from `results.curves`)."""
    fig = go.Figure()
    d = df[df["metric"] == metric]
    dash = _dash_by_eps(df) if len(df) else {}
    seen: dict = {}
    for (rid, label, strat, eps), g in d.groupby(["run_id", "label", "strategy", "epsilon"], sort=False):
        k = seen[(strat, str(eps))] = seen.get((strat, str(eps)), -1) + 1  # same strategy and ε: vary dash
        style = DASHES[(DASHES.index(dash.get(str(eps), "solid")) + k) % len(DASHES)]
        fig.add_trace(go.Scatter(x=g["step"], y=g["value"], name=label, mode="lines",
                                 line=dict(color=color(strat), dash=style)))
    return _layout(fig, _title(metric, df) if len(df) else _label(metric), _label(metric))


def band_curves(bands: pd.DataFrame, metric: str) -> go.Figure:
    """Mean ± std over seeds per group (bands from `results.seed_bands`)."""
    fig = go.Figure()
    d = bands[bands["metric"] == metric]
    dash = _dash_by_eps(bands) if len(bands) else {}
    for (grp, strat, eps), g in d.groupby(["group", "strategy", "epsilon"], sort=False):
        c, n = color(strat), int(g["n"].max())
        name = f"{strat} ε={eps_text(eps)} (n={n})"
        fig.add_trace(go.Scatter(x=list(g["step"]) + list(g["step"][::-1]),
                                 y=list(g["mean"] + g["std"]) + list((g["mean"] - g["std"])[::-1]),
                                 fill="toself", fillcolor=c, opacity=0.18, line=dict(width=0),
                                 hoverinfo="skip", showlegend=False, legendgroup=grp))
        fig.add_trace(go.Scatter(x=g["step"], y=g["mean"], name=name, mode="lines", legendgroup=grp,
                                 line=dict(color=c, dash=dash.get(str(eps), "solid"))))
    title = (_title(metric, bands) + " (mean ± std over seeds)") if len(bands) else metric
    return _layout(fig, title, _label(metric))


def with_caption(fig: go.Figure, caption: str) -> go.Figure:
    """A copy of ``fig`` with ``caption`` printed under the plot (for exported images)."""
    out = go.Figure(fig)
    out.update_layout(margin=dict(b=110), legend=dict(orientation="h", y=-0.45, yanchor="top"))
    out.add_annotation(text=caption, xref="paper", yref="paper", x=0, y=0, yshift=-55, showarrow=False,
                       xanchor="left", yanchor="top", font=dict(size=12, color="#333"))
    return out


def utility_curve(rows: pd.DataFrame, metric: str = "test_accuracy") -> go.Figure:
    """``metric`` (test accuracy or test loss) vs LP fraction, mean ± std over seeds, one curve per ε;
    the best fraction per ε (highest accuracy / lowest loss) marked.

    ``rows``: one row per finished run with epsilon, lp_fraction and the metric.
    """
    fig = go.Figure()
    rows = rows.dropna(subset=[metric]) if metric in rows else rows.iloc[:0]
    lower_better = metric.endswith("loss")
    eps_order = sorted(rows["epsilon"].unique(), key=lambda e: float("inf") if e is None else float(e))
    for i, eps in enumerate(eps_order):
        g = rows[rows["epsilon"] == eps].groupby("lp_fraction")[metric].agg(["mean", "std", "count"])
        g = g.reset_index().fillna({"std": 0.0})
        c = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"][i % 6]
        name = f"ε = {eps_text('inf' if eps is None else eps)}"
        fig.add_trace(go.Scatter(x=g["lp_fraction"], y=g["mean"], error_y=dict(type="data", array=g["std"]),
                                 mode="lines+markers", name=name, line=dict(color=c)))
        best = g.loc[g["mean"].idxmin() if lower_better else g["mean"].idxmax()]
        fig.add_trace(go.Scatter(x=[best["lp_fraction"]], y=[best["mean"]], mode="markers", showlegend=False,
                                 marker=dict(symbol="star", size=16, color=c, line=dict(color="black", width=1)),
                                 hovertext=f"best p = {best['lp_fraction']:g} at {name}"))
    what = "test loss" if lower_better else "test accuracy"
    fig.update_layout(template=TEMPLATE, title=f"Utility curve: {what} vs LP share of the budget "
                      "(mean ± std over seeds; ★ best p per ε)", xaxis_title="LP fraction p (share of steps on LP)",
                      yaxis_title=_label(metric), height=420, showlegend=True, uirevision="keep")
    return fig
