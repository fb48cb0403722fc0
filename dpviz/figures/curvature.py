"""Figures of curvature, the per-step improvement's terms, accountants and the batch-size prediction."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dpviz.privacy import accountants
from dpviz.figures.style import (BEST, DASHES, GREY, SERIES, drawn, log_axis, marker, run_styles,
                                 layout as _layout)

SYMBOLS = ("circle", "square", "diamond")

TERMS = (("curvature", "GᵀHG (curvature along G)"), ("sampling", "tr(HΣ)/B (sampling noise)"),
         ("decelerator", "σ²C²·tr(H)/(B²c²) (decelerator)"))


def trace_figure(df: pd.DataFrame, switches: dict[str, int] | None = None) -> go.Figure:
    """tr(H) with ± 1 standard error bars against step, one line per run in the table's colour and dash of its
    strategy and mechanism (`style.run_styles`); ``switches`` (run id → step) mark where an LP-FFT run's LP phase
    ended with a dotted line in that run's colour."""
    fig = go.Figure()
    styles = _styles(df)
    for rid, g in df.groupby("run_id", sort=False):
        g = g.sort_values("step")
        line, symbol = styles[rid]
        fig.add_trace(go.Scatter(x=g["step"], y=g["trace"], error_y=dict(type="data", array=g["stderr"]),
                                 mode="lines+markers", name=g["label"].iloc[0], line=line,
                                 marker=marker(symbol, color=line["color"])))
        if (switches or {}).get(rid) is not None:
            fig.add_vline(x=switches[rid], line=dict(color=line["color"], dash="dot", width=1.5),
                          annotation_text="LP → FFT", annotation_position="top",
                          annotation_font=dict(size=11, color=line["color"]))
    fig = _layout(fig, "Hessian trace tr(H)<br>Hutchinson ± 1 s.e.", "training step", "tr(H)")
    return drawn(fig, df["run_id"]) if len(df) else fig


def _styles(df: pd.DataFrame) -> dict:
    """Run id → (line, marker symbol) of `style.run_styles` for the runs of a `curvature_table`."""
    runs = df.drop_duplicates("run_id")
    mech = runs["mechanism"] if "mechanism" in runs else [None] * len(runs)
    eps = runs["epsilon"] if "epsilon" in runs else [None] * len(runs)
    return run_styles(zip(runs["run_id"], runs["strategy"], mech, eps))


def terms_figure(df: pd.DataFrame) -> go.Figure:
    """The improvement's denominator terms (and GᵀG) against step: a run in the table's colour and dash of its
    strategy and mechanism, as in `trace_figure` beside it; a marker per term (hollow for every second run that
    shares a colour and dash with another)."""
    fig = go.Figure()
    styles, shared = _styles(df), {}
    for rid, g in df.groupby("run_id", sort=False):
        g = g.sort_values("step")
        line = styles[rid][0]
        k = shared[(line["color"], line["dash"])] = shared.get((line["color"], line["dash"]), -1) + 1
        for j, (key, name) in enumerate(TERMS):
            fig.add_trace(go.Scatter(x=g["step"], y=g[key], mode="lines+markers", name=f"{name} · {rid}", line=line,
                                     marker=dict(symbol=SYMBOLS[j] + ("-open" if k % 2 else ""), color=line["color"])))
        fig.add_trace(go.Scatter(x=g["step"], y=g["gtg"], mode="lines", name=f"GᵀG · {rid}",
                                 line=dict(line, width=1)))
    fig = _layout(fig, "Terms of D in the per-step improvement<br>(GᵀG)²/(2·D)", "training step", "value",
                  height=460)
    return drawn(fig, df["run_id"]) if len(df) else fig


def blocks_figure(blocks: pd.DataFrame, title_run: str) -> go.Figure:
    """Per-block diagonal traces tr(H_bb) ± s.e. against step for one run."""
    fig = go.Figure()
    for i, (b, g) in enumerate(blocks.groupby("block", sort=False)):
        g = g.sort_values("step")
        fig.add_trace(go.Scatter(x=g["step"], y=g["trace"], error_y=dict(type="data", array=g["stderr"]),
                                 mode="lines+markers", name=b,
                                 line=dict(color=SERIES[i % len(SERIES)], dash=DASHES[i % len(DASHES)])))
    return _layout(fig, f"Per-block trace tr(H_bb)<br>{title_run}", "training step", "tr(H_bb)")


def accountants_figure(rows: pd.DataFrame, epsilon: float, delta: float, epochs: int) -> go.Figure:
    """σ(B) and σ²/B against B for each accountant (Bu et al. 2024's comparison)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("σ (noise multiplier)", "σ²/B"),
                        horizontal_spacing=0.12)
    for i, (acc, g) in enumerate(rows.groupby("accountant", sort=False)):
        g = g.sort_values("batch_size")
        for col, y in ((1, "noise_multiplier"), (2, "sigma2_over_b")):
            fig.add_trace(go.Scatter(x=g["batch_size"], y=g[y], mode="lines+markers", name=acc.upper(),
                                     legendgroup=acc, showlegend=col == 1,
                                     line=dict(color=accountants.colors().get(acc), dash=DASHES[i % len(DASHES)])),
                          row=1, col=col)
    fig = _layout(fig, f"σ each accountant needs<br>ε = {epsilon:g}, δ = {delta:.0e}, {epochs} epochs",
                  None, None, height=420)
    log_axis(fig, "x", rows["batch_size"], title="batch size B")
    return log_axis(fig, "y", rows["sigma2_over_b"], col=2)


def batch_prediction_figure(pred: dict, title_run: str) -> go.Figure:
    """Predicted total improvement over the run's epochs against B, the best B marked."""
    xs = sorted(pred["total_improvement"])
    fig = go.Figure(go.Scatter(x=xs, y=[pred["total_improvement"][b] for b in xs], mode="lines+markers",
                               name="epochs·n/B · (GᵀG)²/(2·D(B))"))
    best = pred["best_batch_size"]
    if best is not None:
        fig.add_trace(go.Scatter(x=[best], y=[pred["total_improvement"][best]], mode="markers", name=f"best B = {best}",
                                 marker=dict(symbol="star", size=16, color=BEST)))
    fig = _layout(fig, f"Predicted loss decrease vs batch size<br>{title_run}", "batch size B",
                  "predicted total improvement (nats)")
    return log_axis(fig, "x", xs)


def decelerator_figure(points, title_run: str, switch: int | None = None) -> go.Figure:
    """The decelerator measured on a public batch against step (``points``: (step, value) pairs), the step
    at which a continual run switched to the private data marked."""
    pts = sorted((int(s), float(v)) for s, v in points)
    fig = go.Figure(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                               name="decelerator (public batch)", line=dict(color=SERIES[0])))
    if switch is not None:
        fig.add_vline(x=switch, line=dict(color=GREY, dash="dot"), annotation_text="public → private")
    return _layout(fig, f"Decelerator on public data<br>{title_run}", "training step",
                   "σ²C²·tr(H)/(B²c²)", height=300, showlegend=False)
