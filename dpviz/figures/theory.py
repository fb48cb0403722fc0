"""Figures of the theory lab: the three strategies over diffusion time, the utility curve, the engine overlay."""

from __future__ import annotations

import plotly.graph_objects as go

from dpviz.figures.style import (BEST, DASHES, GREY, MODEL_DASH, SERIES, color, eps_text, line, log_axis,
                                 layout as _layout)

METRIC_LABELS = {
    "loss": "training loss",
    "test_accuracy": "test accuracy of the network<br>(fraction)",
    "alignment": "first layer's alignment with z<br>(mean o<sub>j</sub>·cos(w<sub>j</sub>, z))",
    "probe_accuracy": "linear probe's test accuracy<br>on the hidden features",
    "head_alignment": "head's alignment with<br>the best head (cos)",
}
"""Axis titles of two short lines: one long line ran up into the title of a figure in a half-width column."""
TITLES = {
    "loss": "Training loss (Thms 4.2–4.5)",
    "test_accuracy": "Test accuracy",
    "alignment": "Feature distortion (Thms 3.3, 3.4)",
    "probe_accuracy": "Feature quality: linear probe",
    "head_alignment": "Head's alignment with the features",
}


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    return f"rgba({int(h[:2], 16)}, {int(h[2:4], 16)}, {int(h[4:], 16)}, {alpha})"


def time_figure(c, metric: str) -> go.Figure:
    """``metric`` against diffusion time, mean ± 1 std over seeds per strategy (its colour and DP-SGD's dash, as
    every figure draws its runs); LP's closed form beside, in the dash of no run."""
    fig, t = go.Figure(), c.times
    for name, mean in c.mean.items():
        m, sd, col = mean[metric], c.std[name][metric], color(name)
        fig.add_trace(go.Scatter(x=t + t[::-1], y=[a + b for a, b in zip(m, sd)] + [a - b for a, b in zip(m, sd)][::-1],
                                 fill="toself", fillcolor=_rgba(col, 0.12), line=dict(width=0), hoverinfo="skip", mode="lines",
                                 showlegend=False, legendgroup=name))
        fig.add_trace(go.Scatter(x=t, y=m, mode="lines", name=name, legendgroup=name, line=line(name, "dp-sgd")))
    if metric == "loss" and c.closed_form:
        fig.add_trace(go.Scatter(x=t, y=c.closed_form, mode="lines", name="LP, closed form (OU process)",
                                 line=dict(color=color("lp"), dash=MODEL_DASH, width=3)))
    switch = c.setting["lp_share"] * c.setting["time"]
    if 0 < switch < c.setting["time"]:  # a legend entry, not a label over the curves
        ys = [y for tr in fig.data for y in tr.y]
        fig.add_trace(go.Scatter(x=[switch, switch], y=[min(ys), max(ys)], mode="lines", name="LP-FFT switches",
                                 line=dict(color=GREY, dash="dash", width=1), hoverinfo="skip"))
    s = c.setting
    return _layout(fig, f"{TITLES[metric]}<br>ε = {eps_text(s['epsilon'])}, noise s = {c.noise:.3g}",
                   "diffusion time t", METRIC_LABELS[metric], height=380)


def utility_figure(u, current_share: float | None = None) -> go.Figure:
    """Final training loss of LP-FFT against the LP share p, one curve per ε, its best p starred."""
    fig = go.Figure()
    for i, e in enumerate(u.epsilons):
        key, col = str(float(e)), SERIES[i % len(SERIES)]
        loss = u.loss[key]
        fig.add_trace(go.Scatter(x=u.shares, y=loss, mode="lines+markers", name=f"ε = {eps_text(e)}",
                                 legendgroup=key, line=dict(color=col, dash=DASHES[i % len(DASHES)])))
        best = u.best_share[key]
        fig.add_trace(go.Scatter(x=[best], y=[loss[u.shares.index(best)]], mode="markers", legendgroup=key,
                                 showlegend=i == 0, name="best p per ε",
                                 marker=dict(symbol="star", size=15, color=BEST)))
    if current_share is not None:
        fig.add_vline(x=current_share, line=dict(color=GREY, dash="dash"), annotation_text="p")
    fig = _layout(fig, "Final loss vs LP share p<br>Ke et al. 2024, Fig. 2 right",
                  "LP share p (0 = FFT only, 1 = LP only)", "final training loss (log)", height=400)
    return log_axis(fig, "y", [v for e in u.epsilons for v in u.loss[str(float(e))]])


def overlay_figure(o: dict) -> go.Figure:
    """The engine's DP-SGD loss (at t = η·step) over the diffusion's with the engine's own noise."""
    fig = go.Figure()
    for name, key, dash in (("dpviz DP-SGD (Poisson, clipping, accountant)", "engine", "solid"),
                            ("Langevin diffusion, matched noise", "diffusion", MODEL_DASH)):
        fig.add_trace(go.Scatter(x=o["times"], y=o[key], mode="lines", name=name,
                                 line=dict(color=color(o["strategy"]), dash=dash, width=2 if dash == "solid" else 3)))
    return _layout(fig, f"DP-SGD vs its diffusion: {o['strategy']}, ε = {eps_text(o['epsilon'])}<br>"
                   f"mean gap {o['gap']:.3g}", "time t = η · step", "training loss", height=380)
