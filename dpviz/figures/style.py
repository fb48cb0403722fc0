"""The one style of every dpviz figure: palette, template, layout, axis labels, captions.

Strategy colours come from the strategy registry (each strategy declares its own), so a new
strategy is drawn in its colour everywhere without this module knowing it. Figure modules
import from here only; none reaches into another figure module.
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from .. import strategies

TEMPLATE = "plotly_white"
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
GREY = "#7f7f7f"
SERIES = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")  # curves that are not strategies
ACCOUNTANT_COLORS = {"rdp": "#1f77b4", "gdp": "#2ca02c", "prv": "#d62728"}
BASELINE_COLORS = {"magnitude": "#1f77b4", "random": GREY, "bias": "#2ca02c", "norm": "#9467bd"}
"""Sparse fine-tuning's fixed-mask baselines (not strategies of their own)."""
CLASS_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf")
"""One colour per class label of the feature maps."""
VERDICT_COLORS = {"agrees": "#2ca02c", "partly": "#ff7f0e", "does not": "#d62728"}
"""The scorecard's verdicts."""
BEST = "#d62728"  # the star marking a predicted best point
UNSELECTED = "#f0f0f0"  # rows a mask leaves frozen
LABELS = {
    "loss": "training loss (cross-entropy, nats)", "train_accuracy": "training accuracy (fraction)",
    "test_accuracy": "test accuracy (fraction)", "test_loss": "test loss (cross-entropy, nats)",
    "epsilon": "ε spent (at the run's δ)", "clip_fraction": "per-sample gradients clipped (fraction)",
    "grad_norm": "mean per-sample gradient norm (L2)", "lr": "learning rate",
    "step_ms": "step wall time (ms)", "decelerator_public": "decelerator on public data",
}
"""The run metrics a page offers to compare, with their axis labels."""
ANALYSIS_LABELS = {"knn_accuracy": "kNN accuracy of backbone features (fraction)"}
PRIVATE = "statistics of private data, NOT covered by the DP guarantee"


def color(strategy: str) -> str:
    """The strategy's declared colour (grey for a name no strategy registers)."""
    return strategies.colors().get(strategy, GREY)


def eps_text(eps) -> str:
    return "∞" if str(eps) == "inf" else f"{float(eps):g}"


def eps_order(values) -> list:
    """ε values sorted with None (no privacy) as ∞."""
    return sorted(values, key=lambda e: float("inf") if e is None else float(e))


def dash_by_eps(df: pd.DataFrame) -> dict:
    """One dash style per ε of ``df`` (text keys), in increasing ε."""
    eps = sorted({str(e) for e in df["epsilon"]}, key=lambda e: float(e))
    return {e: DASHES[i % len(DASHES)] for i, e in enumerate(eps)}


def label(metric: str) -> str:
    """Axis label with units for a metric name (the name itself when unknown)."""
    return LABELS.get(metric) or ANALYSIS_LABELS.get(metric, metric)


def layout(fig: go.Figure, title: str, x: str | None, y: str | None, height: int = 420, **kw) -> go.Figure:
    """Template, title, axis titles, margins; ``uirevision`` keeps zoom across live redraws."""
    kw.setdefault("showlegend", True)
    fig.update_layout(template=TEMPLATE, title=title, xaxis_title=x, yaxis_title=y, height=height,
                      margin=dict(t=60, b=50, l=60, r=20), uirevision="keep", **kw)
    return fig


def private_caption(caption: str) -> str:
    """``caption`` marked as describing statistics of private data, which the DP guarantee does not cover."""
    return f"{caption} — {PRIVATE}"


def with_caption(fig: go.Figure, caption: str) -> go.Figure:
    """A copy of ``fig`` with ``caption`` printed under the plot (for exported images).

    The caption is plain text: Plotly reads annotation text as a subset of HTML (``<a href>`` becomes a
    live link in SVG, ``<span style>`` passes CSS), so &, < and > are escaped and line breaks become
    ``<br>``, the only markup a caption gets.
    """
    caption = "<br>".join(html.escape(line, quote=False) for line in caption.split("\n"))
    out = go.Figure(fig)
    out.update_layout(margin=dict(b=110), legend=dict(orientation="h", y=-0.45, yanchor="top"))
    out.add_annotation(text=caption, xref="paper", yref="paper", x=0, y=0, yshift=-55, showarrow=False,
                       xanchor="left", yanchor="top", font=dict(size=12, color="#333"))
    return out
