"""Figures of the representation analyses (law of separation, per-layer heatmaps, embeddings)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dpviz.figures.style import (CLASS_COLORS, MODEL_DASH, drawn, eps_text, log_axis, marker, run_styles,
                                 layout as _layout)


def law_plot(series: list[dict], quantity: str) -> go.Figure:
    """Per-layer values on a log axis with the fitted ρ^l line: a run in its strategy's colour, its mechanism's
    dash and a marker per ε (`style.run_styles`), its fit in the same colour and the dash of no run.

    Each item: run_id, label, strategy, mechanism, epsilon, values (index 0 = input), rho, intercept, r2,
    pearson_r. The fit's ρ and R² are in its legend entry (labels beside the lines overlap when fits are close).
    """
    fig = go.Figure()
    allv, top = [], 0
    ids = [s.get("run_id", str(i)) for i, s in enumerate(series)]
    styles = run_styles((rid, s["strategy"], s.get("mechanism"), s["epsilon"]) for rid, s in zip(ids, series))
    for i, (rid, s) in enumerate(zip(ids, series)):
        l = np.arange(len(s["values"]))
        top = max(top, len(l) - 1)
        line, symbol = styles[rid]
        allv += list(s["values"])
        fig.add_trace(go.Scatter(x=l, y=s["values"], mode="markers+lines", name=s["label"], legendgroup=str(i),
                                 line=dict(line, width=1.5), marker=marker(symbol, color=line["color"], size=8)))
        if np.isfinite(s["rho"]):
            fit = s["intercept"] * s["rho"] ** l
            allv += list(fit)
            fig.add_trace(go.Scatter(x=l, y=fit, mode="lines", legendgroup=str(i), hoverinfo="skip",
                                     name=f"fit: ρ={s['rho']:.3g}, R²={s['r2']:.2f}",
                                     line=dict(color=line["color"], dash=MODEL_DASH, width=2)))
    eps = sorted({eps_text(s["epsilon"]) for s in series})
    fig = _layout(fig, f"{quantity} per layer, fitted ρ<sup>l</sup><br>ε ∈ {{{', '.join(eps)}}}",
                  "layer l (0 = input)", f"{quantity} (log scale)", height=440)
    fig.update_xaxes(tick0=0, dtick=1, range=[-0.3, top + 0.3])  # layers are integers
    fig = log_axis(fig, "y", allv)
    return drawn(fig, ids) if all("run_id" in s for s in series) else fig


def layer_heatmap(table: pd.DataFrame, quantity: str, title_run: str) -> go.Figure:
    """log10 of a per-layer quantity over training: layer × step."""
    m = table.pivot(index="layer", columns="step", values="value").sort_index()
    z = np.log10(m.clip(lower=1e-12).to_numpy())
    fig = go.Figure(go.Heatmap(z=z, x=[str(c) for c in m.columns], y=m.index, colorscale="Viridis",
                               colorbar=dict(title=f"log10 {quantity}")))
    fig = _layout(fig, f"log10 {quantity}, layer × step<br>{title_run}", "training step (checkpoint)",
                  "layer l (0 = input)", showlegend=False)
    return fig.update_yaxes(tick0=0, dtick=1)


def embedding_map(frames: list[tuple[int, np.ndarray, np.ndarray]], title_run: str, method: str,
                  texts: list[str] | None = None, classes_named: tuple[str, ...] | None = None) -> go.Figure:
    """Scatter of 2-D maps per checkpoint, coloured by class, with a step slider that animates them.

    ``texts``: for a text task, the evaluation subset's texts (one per point, in the maps' order), shown
    on hover (cut to 200 characters); ``classes_named``: the label names, for the legend.
    """
    classes = sorted({int(c) for _, _, lab in frames for c in lab})
    palette = CLASS_COLORS
    shown = np.array([t if len(t) <= 200 else t[:199] + "…" for t in texts], dtype=object) if texts else None

    def name(c):
        return f"class {c}: {classes_named[c]}" if classes_named and c < len(classes_named) else f"class {c}"

    def traces(coords, labels):
        return [go.Scatter(x=coords[labels == c, 0], y=coords[labels == c, 1], mode="markers", name=name(c),
                           marker=dict(size=5, color=palette[c % len(palette)], opacity=0.8),
                           **(dict(hovertext=shown[labels == c], hoverinfo="text")
                              if shown is not None and len(shown) == len(labels) else {}))
                for c in classes]

    step0, c0, l0 = frames[-1]
    fig = go.Figure(data=traces(c0, l0), frames=[go.Frame(data=traces(c, l), name=str(s)) for s, c, l in frames])
    allc = np.vstack([c for _, c, _ in frames])
    pad = 0.05 * (allc.max(0) - allc.min(0) + 1e-9)
    steps = [dict(label=str(s), method="animate", args=[[str(s)], dict(mode="immediate", frame=dict(duration=0))])
             for s, _, _ in frames]
    fig.update_layout(sliders=[dict(active=len(frames) - 1, steps=steps, currentvalue=dict(prefix="step "))],
                      updatemenus=[dict(type="buttons", showactive=False, x=0, y=-0.12, buttons=[dict(
                          label="▶ play", method="animate",
                          args=[None, dict(frame=dict(duration=500), fromcurrent=False)])])],
                      xaxis_range=[allc[:, 0].min() - pad[0], allc[:, 0].max() + pad[0]],
                      yaxis_range=[allc[:, 1].min() - pad[1], allc[:, 1].max() + pad[1]])
    fig = _layout(fig, f"{method.upper()} map of penultimate features<br>{title_run}", f"{method} 1", f"{method} 2",
                  height=560)
    return fig.update_layout(legend=dict(orientation="v", x=1.02, y=1, xanchor="left", yanchor="top"),
                             margin=dict(b=90))
