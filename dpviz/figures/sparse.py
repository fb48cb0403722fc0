"""Figures of sparse fine-tuning: the accuracy / trainable-parameter profile and the chosen rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dpviz.figures.style import BASELINE_COLORS, UNSELECTED, color, eps_order, eps_text, log_axis, layout as _layout


def _methods() -> dict:
    """Method → (legend name, colour, marker); strategies keep their registry colour."""
    b = BASELINE_COLORS
    return {"sparta": ("SPARTA (private rows)", color("sparse"), "circle"),
            "magnitude": ("top-s by public magnitude", b["magnitude"], "square"),
            "random": ("random rows", b["random"], "diamond"), "bias": ("head + biases (DP-BiTFiT)", b["bias"], "x"),
            "norm": ("head + norm layers", b["norm"], "cross"), "fft": ("full DP-FFT", color("fft"), "star"),
            "lora": ("DP-LoRA (rank r)", color("lora"), "triangle-up")}


def profile_figure(table: pd.DataFrame) -> go.Figure:
    """Test accuracy against % trainable backbone parameters, one panel per ε (Makni et al. 2025, Figures 2 and 4)."""
    eps = eps_order(table["epsilon"].unique())
    fig = make_subplots(rows=1, cols=len(eps), shared_yaxes=True,
                        subplot_titles=[f"ε = {eps_text('inf' if e is None else e)}" for e in eps])
    for j, e in enumerate(eps, start=1):
        t = table[table["epsilon"] == e]
        for m, (name, colour, symbol) in _methods().items():
            g = t[t["method"] == m].sort_values("trainable_pct")
            if g.empty:
                continue
            ranks = [f"r = {r:g}" for r in g["lora_rank"]] if m == "lora" and "lora_rank" in g else None
            labels = dict(text=ranks, hovertext=ranks, textposition="top center") if ranks else {}  # r per point
            mode = ("lines+markers" if len(g) > 1 else "markers") + ("+text" if ranks else "")
            fig.add_trace(go.Scatter(x=g["trainable_pct"], y=g["test_accuracy"], name=name, legendgroup=m,
                                     showlegend=j == 1, mode=mode, error_y=dict(type="data", array=g["std"]),
                                     marker=dict(color=colour, symbol=symbol, size=10), line=dict(color=colour),
                                     **labels),
                          row=1, col=j)
    fig.update_yaxes(title="test accuracy (fraction)", col=1)
    fig = _layout(fig, "Accuracy vs trainable parameters<br>mean ± std over seeds", None, None, height=460)
    return log_axis(fig, "x", table["trainable_pct"], title="% backbone params trained")


def mask_figure(mask: dict[str, list[int]], rows_per_layer: dict[str, int], title_run: str) -> go.Figure:
    """Which rows train: one column per layer (rows stretched to a common height), selected = 1."""
    names = list(rows_per_layer)
    h = max(rows_per_layer.values())
    img = np.zeros((h, len(names)))
    for j, n in enumerate(names):
        r = rows_per_layer[n]
        sel = np.zeros(r)
        sel[mask.get(n, [])] = 1
        img[:, j] = sel[(np.arange(h) * r) // h]  # nearest-row stretch so every layer spans the height
    fig = go.Figure(go.Heatmap(z=img, x=names, colorscale=[[0, UNSELECTED], [1, color("sparse")]], showscale=False,
                               hovertemplate="layer %{x}<br>row position %{y}<extra></extra>"))
    fig.update_yaxes(title="row (output neuron / filter), stretched per layer", autorange="reversed")
    return _layout(fig, f"Selected rows per layer<br>{title_run}", "layer", None, height=420, showlegend=False)


def layer_fraction_figure(fractions: dict[str, float], title_run: str) -> go.Figure:
    fig = go.Figure(go.Bar(x=list(fractions), y=[100 * v for v in fractions.values()], marker_color=color("sparse")))
    return _layout(fig, f"Share of each layer's rows that train<br>{title_run}", "layer", "% rows trained",
                   height=320, showlegend=False)
