"""The one style of every dpviz figure: palette, template, layout, axis labels, captions.

A run is drawn from one table wherever it appears, on a page or in an export: its strategy's colour (from the
strategy registry: each strategy declares its own, so a new strategy is drawn in its colour everywhere without
this module knowing it) and its noise mechanism's dash (`MECHANISM_DASHES`); runs that share both are told apart
by a marker (`SYMBOLS`, by ε first). Figure modules import from here only; none reaches into another figure
module.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from dpviz import strategies
from dpviz.privacy import names
from dpviz.privacy import randomness, release

TEMPLATE = "plotly_white"
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
OKABE_ITO = {"blue": "#0072B2", "vermillion": "#D55E00", "bluish green": "#009E73", "reddish purple": "#CC79A7",
             "orange": "#E69F00", "sky blue": "#56B4E9", "black": "#000000", "yellow": "#F0E442"}
"""Okabe & Ito's colour-blind-safe palette: every figure draws its curves in these (dashes are the second cue)."""
GREY = "#999999"
SERIES = tuple(OKABE_ITO.values())  # curves that are not strategies, in this order
BASELINE_COLORS = {"magnitude": OKABE_ITO["blue"], "random": GREY, "bias": OKABE_ITO["bluish green"],
                   "norm": OKABE_ITO["reddish purple"]}
"""Sparse fine-tuning's fixed-mask baselines (not strategies of their own)."""
CLASS_COLORS = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255",
                "#AA4499", "#000000")
"""One colour per class label of the feature maps (Paul Tol's colour-blind-safe "muted" set, then black)."""
VERDICT_COLORS = {"agrees": OKABE_ITO["bluish green"], "partly": OKABE_ITO["orange"],
                  "does not": OKABE_ITO["vermillion"], "not readable": GREY}
"""The scorecard's verdicts."""
BEST = OKABE_ITO["vermillion"]  # the star marking a predicted best point
UNSELECTED = "#f0f0f0"  # rows a mask leaves frozen
LABELS = {
    "loss": "training loss (cross-entropy, nats)", "train_accuracy": "training accuracy (fraction)",
    "test_accuracy": "test accuracy (fraction)", "test_loss": "test loss (cross-entropy, nats)",
    "epsilon": "ε spent (at the run's δ)", "clip_fraction": "per-sample gradients clipped (fraction)",
    "clip_fraction_dp": "per-sample gradients clipped, privatised inside ε (noisy fraction)",
    "grad_norm": "mean per-sample gradient norm (L2)", "lr": "learning rate",
    "step_ms": "step wall time (ms)", "decelerator_public": "decelerator on public data",
}
"""The run metrics a page offers to compare, with their axis labels."""
ANALYSIS_LABELS = {"knn_accuracy": "kNN accuracy of backbone features (fraction)"}
PRIVATE = "statistics of private data, NOT covered by the DP guarantee"


MECHANISM_DASHES = {"dp-sgd": "solid", "bandmf": "dash", "bandmf-momentum": "dot"}
"""One dash per noise mechanism (`RunConfig.mechanism`) in every figure; a mechanism not listed: `OTHER_DASH`."""
OTHER_DASH = "longdash"
MODEL_DASH = "longdashdot"
"""A line that is no run's (a fit, a closed form, a diffusion): a dash no mechanism takes."""
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "cross", "triangle-down")
"""Markers that tell apart the runs of one strategy and mechanism: one per ε, the next for a further run."""
MARKERS = 12
"""Markers a run's curve shows at most: a cue along the line, not a dot at every step."""


def color(strategy: str) -> str:
    """The strategy's declared colour (the built-in ones declare Okabe–Ito's); grey for a name no strategy
    registers."""
    return strategies.colors().get(strategy, GREY)


def dash(mechanism: str | None) -> str:
    """The noise mechanism's dash (a config stored before mechanisms: DP-SGD's)."""
    return MECHANISM_DASHES.get(mechanism or names.DEFAULT, OTHER_DASH)


def line(strategy: str, mechanism: str | None, **kw) -> dict:
    """A run's line: its strategy's colour and its mechanism's dash (``kw``: width and the like)."""
    return dict(color=color(strategy), dash=dash(mechanism), **kw)


def style_table() -> dict:
    """The one table every figure draws runs from: strategy → colour, mechanism → dash."""
    return {"strategy": strategies.colors(), "mechanism": dict(MECHANISM_DASHES)}


def symbol_by_eps(values) -> dict:
    """One marker per ε of ``values`` (text keys, ∞ last), in increasing ε."""
    eps = sorted({str(e) for e in values}, key=lambda e: float("inf") if e in ("None", "inf") else float(e))
    return {e: SYMBOLS[i % len(SYMBOLS)] for i, e in enumerate(eps)}


def marker(symbol: str, **kw) -> dict:
    """A run's marker: ``symbol``, at most `MARKERS` of them along its curve."""
    return {"symbol": symbol, "size": 7, "maxdisplayed": MARKERS, **kw}


def run_styles(runs) -> dict:
    """Run id → (line, marker) for ``runs`` (id, strategy, mechanism, ε): the table's colour and dash, and a
    marker per ε, the next one for each further run of the same strategy, mechanism and ε."""
    runs = list(runs)
    sym, seen, out = symbol_by_eps(e for *_, e in runs), {}, {}
    for rid, strategy, mechanism, eps in runs:
        k = seen[(strategy, mechanism, str(eps))] = seen.get((strategy, mechanism, str(eps)), -1) + 1
        out[rid] = (line(strategy, mechanism), SYMBOLS[(SYMBOLS.index(sym[str(eps)]) + k) % len(SYMBOLS)])
    return out


def drawn(fig: go.Figure, run_ids) -> go.Figure:
    """``fig`` recording the runs it draws (`drawn_runs`): an export's caption names exactly these."""
    return fig.update_layout(meta={"runs": [str(r) for r in dict.fromkeys(run_ids)]})


def drawn_runs(fig: go.Figure) -> list[str] | None:
    """The ids of the runs ``fig`` draws, or None for a figure that records none."""
    meta = fig.layout.meta
    return list(meta["runs"]) if isinstance(meta, dict) and "runs" in meta else None


def eps_text(eps) -> str:
    return "∞" if str(eps) == "inf" else f"{float(eps):g}"


def eps_order(values) -> list:
    """ε values sorted with None (no privacy) as ∞."""
    return sorted(values, key=lambda e: float("inf") if e is None else float(e))


def label(metric: str) -> str:
    """Axis label with units for a metric name (the name itself when unknown)."""
    return LABELS.get(metric) or ANALYSIS_LABELS.get(metric, metric)


def metric_label(metric: str) -> str:
    """`label`, marked "(not covered by ε)" for a statistic of private batches (`release.PRIVATE_BATCH_METRICS`):
    the axis, menu and column of such a metric say that the DP guarantee does not cover it."""
    return release.metric_label(metric, label(metric))


TITLE_LINE = 56
"""Characters a title line may take: it fits a 450 px Streamlit column at the title's 15 px font."""
LEGEND_LINE = 40
"""Characters a legend entry's line may take: an entry of a horizontal legend stays within a 350 px figure."""


def wrap(text: str, width: int = TITLE_LINE) -> str:
    """``text`` broken with ``<br>`` at spaces so that no line is longer than ``width`` (existing ``<br>`` kept)."""
    out = []
    for part in text.split("<br>"):
        line = ""
        for word in part.split(" "):
            if line and len(line) + 1 + len(word) > width:
                out.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        out.append(line)
    return "<br>".join(out)


def title_lines(title: str | None) -> int:
    return 0 if not title else title.count("<br>") + 1


def title_style(title: str | None, height: int) -> dict:
    """The title at the top left, its lines centred on a point 10 px + half their height under the figure's
    top edge. Anchored by its middle, not its top: plotly.js 3 (the exports' kaleido and standalone HTML)
    ignores the anchor of a title of several lines and puts its first line there, which pushed a top-anchored
    title of two lines out of the image; centred, it stays whole in both that and Streamlit's plotly.js."""
    return dict(text=title, font=dict(size=15), x=0.01, xanchor="left", y=1 - (10 + 10 * title_lines(title)) / height,
                yanchor="middle", yref="container")


def title_margin(title: str | None) -> int:
    """A top margin that fits the title's lines above the plot."""
    return 36 + 20 * title_lines(title)


def legend_below() -> dict:
    """A horizontal legend under the plot: narrow columns keep their width for the data."""
    return dict(orientation="h", x=0, xanchor="left", y=-0.2, yanchor="top", title=None)


LEGEND_ROW = 19
"""Pixels a legend line takes (its 12 px text and the space between entries)."""


def legend_room(fig: go.Figure) -> go.Figure:
    """``fig`` taller by its legend's lines, counted as if each entry had a row of its own (a column too narrow
    for two side by side, as at 1024 px): a legend of many runs under the plot then takes its room from the
    figure, not from the plot, which keeps its height, and the legend stays clear of the x axis's title."""
    lines = sum(str(t.name).count("<br>") + 1 for t in fig.data if t.name and t.showlegend is not False)
    return fig.update_layout(height=(fig.layout.height or 420) + LEGEND_ROW * lines)


def power_text(k: int) -> str:
    """10^k written as plotly writes a log axis's ticks (`log_axis`): 1, 10, 10<sup>2</sup>, 10<sup>−3</sup>…, for
    axes that plotly does not tick itself (the tuning study's parallel coordinates)."""
    return "1" if k == 0 else "10" if k == 1 else f"10<sup>{'' if k > 0 else '−'}{abs(k)}</sup>"


def decades(values) -> tuple[int, int]:
    """The whole decades (lo, hi exponents, hi > lo) that span the positive ``values``: a log axis's range."""
    import math

    v = [math.log10(float(x)) for x in values if x is not None and math.isfinite(float(x)) and float(x) > 0]
    lo, hi = math.floor(min(v)), math.ceil(max(v))
    return lo, max(hi, lo + 1)


def log_axis(fig: go.Figure, axis: str, values=(), **selector) -> go.Figure:
    """Make ``axis`` ("x" or "y") of ``fig`` a log axis with ticks at powers of ten only, labelled 10^k.

    ``values`` (the data drawn on it, when known) set a range that spans whole decades, so that at least
    two ticks show even when the data stay within one decade."""
    import math

    kw = dict(type="log", dtick=1, exponentformat="power", showexponent="all", minor=dict(showgrid=False))
    if any(x is not None and math.isfinite(float(x)) and float(x) > 0 for x in values):
        lo, hi = decades(values)
        kw["range"] = [lo - 0.03 * (hi - lo), hi + 0.03 * (hi - lo)]  # points on a decade stay whole
    (fig.update_xaxes if axis == "x" else fig.update_yaxes)(**kw, **selector)
    return fig


def layout(fig: go.Figure, title: str, x: str | None, y: str | None, height: int = 420, **kw) -> go.Figure:
    """Template, title (wrapped to fit a narrow column), axis titles, a legend under the plot, margins that fit
    them; ``uirevision`` keeps zoom across live redraws."""
    kw.setdefault("showlegend", True)
    kw.setdefault("legend", legend_below())
    title = wrap(title) if title else title
    height += 20 * max(0, title_lines(title) - 1)
    fig.update_layout(template=TEMPLATE, title=title_style(title, height), xaxis_title=x, yaxis_title=y,
                      height=height, margin=dict(t=title_margin(title), b=50, l=60, r=20), uirevision="keep",
                      font=dict(size=12), **kw)
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


def private_caption(caption: str) -> str:
    """``caption`` marked as describing statistics of private data, which the DP guarantee does not cover."""
    return f"{caption} — {PRIVATE}"


def release_caption(caption: str, configs=(), summaries=(), metrics=()) -> str:
    """``caption`` with what the figure's runs release that their ε does not cover: the statistics of private
    batches among ``metrics``, the randomness line of its private ``configs`` (each distinct one once) and the
    privacy check line of each of its run ``summaries`` that has one."""
    lines = [caption]
    batch = [m for m in dict.fromkeys(metrics) if release.is_private_batch_metric(m)]
    if batch:
        lines.append(f"{', '.join(batch)}: statistics of private batches, {release.NOT_COVERED}")
    private = [c for c in configs if str(c.get("epsilon")) not in ("inf", "None")]
    lines += [randomness.line(r) for r in dict.fromkeys(c.get("randomness", "seeded") for c in private)]
    lines += [f"{s['run_id']}: {s['privacy_check']['line']}" for s in summaries if (s or {}).get("privacy_check")]
    return "\n".join(lines)


def with_caption(fig: go.Figure, caption: str) -> go.Figure:
    """A copy of ``fig`` with ``caption`` printed under the plot (for exported images).

    The caption is plain text: Plotly reads annotation text as a subset of HTML (``<a href>`` becomes a
    live link in SVG, ``<span style>`` passes CSS), so &, < and > are escaped and line breaks become
    ``<br>``, the only markup a caption gets.
    """
    lines = caption.split("\n")
    caption = "<br>".join(html.escape(line, quote=False) for line in lines)
    out = go.Figure(fig)
    # an export is wide: the legend goes to the right, and the space under the plot is the caption's
    out.update_layout(margin=dict(b=64 + 17 * len(lines), r=20),
                      legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"))
    out.add_annotation(text=caption, xref="paper", yref="paper", x=0, y=0, yshift=-52, showarrow=False,
                       xanchor="left", yanchor="top", align="left", font=dict(size=12, color="#333"))
    return out
