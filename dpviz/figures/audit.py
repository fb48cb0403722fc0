"""Figures of privacy audits: the bounds of one audit, its score histograms and ROC, and sweeps of ε_lb vs ε."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .style import GREY, SERIES, color, eps_text, layout as _layout

INF_AT = 16.0
"""Where ε = ∞ (no noise) sits on a sweep's log ε axis: one octave past the grid's 8."""
SCORE_LABELS = {"white-box": "canary score: log-likelihood ratio of its projections (in vs out)",
                "black-box": "canary score: − loss of the final model on the canary"}


def _title(r: dict) -> str:
    return (f"{r['config']['strategy']} at ε = {eps_text(r['epsilon'] or 'inf')} · {r['threat']}, "
            f"M = {r['canaries']}")


def bounds_figure(r: dict) -> go.Figure:
    """ε_lb by both bounds (and the ideal attack's), the accountant's ε and the ceiling M canaries allow."""
    bars = [("ε_lb one-run (Steinke et al.)", r["epsilon_lb"], SERIES[0]),
            ("ε_lb f-DP (Mahloujifar et al.)", r["epsilon_lb_fdp"], SERIES[0])]
    if r.get("ideal"):
        bars.append(("ideal attack's ε_lb (exact mechanism)", max(r["ideal"]["epsilon_lb"],
                                                                  r["ideal"]["epsilon_lb_fdp"]), GREY))
    if r["epsilon"] is not None:
        bars += [("accountant's ε spent (upper bound)", r["epsilon_spent"], SERIES[1]),
                 ("budget ε", r["epsilon"], SERIES[1])]
    bars.append((f"ceiling: most that {r['canaries']} canaries can show", r["ceiling"], SERIES[2]))
    fig = go.Figure(go.Bar(y=[b[0] for b in bars], x=[b[1] for b in bars], orientation="h",
                           marker_color=[b[2] for b in bars], text=[f"{b[1]:.3g}" for b in bars],
                           textposition="outside", showlegend=False))
    fig.update_yaxes(autorange="reversed")
    fig = _layout(fig, f"Lower bound vs upper bound — {_title(r)} ({r['confidence']:.0%} confidence)",
                  "ε (at the run's δ)", None, height=360)
    return fig.update_layout(margin=dict(l=290, r=40))


def scores_figure(r: dict) -> go.Figure:
    """Histograms of the scores of included and excluded canaries: the further apart, the more leaks."""
    fig = go.Figure()
    for name, key, c in (("included (trained on)", "scores_in", SERIES[1]),
                         ("excluded", "scores_out", SERIES[0])):
        fig.add_trace(go.Histogram(x=r[key], name=f"{name}: {len(r[key])}", opacity=0.6, marker_color=c,
                                   nbinsx=60))
    fig.update_layout(barmode="overlay")
    return _layout(fig, f"Canary scores, in vs out — {_title(r)}", SCORE_LABELS[r["threat"]], "canaries")


def roc_figure(r: dict, fpr, tpr) -> go.Figure:
    """The ROC (``fpr``, ``tpr``: `dpviz.audit.roc(r)`) on log axes, where low false-positive rates are
    readable, with chance."""
    fpr, tpr = np.asarray(fpr), np.asarray(tpr)
    keep = (fpr > 0) & (tpr > 0)  # log axes: the origin has no place
    lo = 1 / max(1, len(r["scores_out"]))
    fig = go.Figure([
        go.Scatter(x=fpr[keep], y=tpr[keep], mode="lines", name=f"audit (AUC {r['auc']:.3f})",
                   line=dict(color=SERIES[1])),
        go.Scatter(x=[lo, 1], y=[lo, 1], mode="lines", name="chance", line=dict(color=GREY, dash="dot"))])
    fig.update_xaxes(type="log", range=[math.log10(lo), 0])
    fig.update_yaxes(type="log", range=[math.log10(lo), 0])
    return _layout(fig, f"ROC of the canary guesses — {_title(r)}", "false-positive rate (log)",
                   "true-positive rate (log)")


def _x(eps) -> float:
    return INF_AT if eps is None else float(eps)


def sweep_figure(rows: list[dict]) -> go.Figure:
    """ε_lb against ε, a panel per threat and a line per strategy, with ε_lb = ε and the ceiling."""
    threats = [t for t in ("white-box", "black-box") if any(r["threat"] == t for r in rows)] or ["white-box"]
    fig = make_subplots(rows=1, cols=len(threats), subplot_titles=threats, shared_yaxes=True)
    xs = sorted({_x(r["epsilon"]) for r in rows}) or [1.0]
    finite = [x for x in xs if x < INF_AT] or [1.0]
    ceiling = max((r["ceiling"] for r in rows), default=0.0)
    for col, threat in enumerate(threats, start=1):
        fig.add_trace(go.Scatter(x=finite, y=finite, mode="lines", name="ε_lb = ε (the accountant's bound)",
                                 line=dict(color=GREY, dash="dot"), showlegend=col == 1), row=1, col=col)
        fig.add_trace(go.Scatter(x=[xs[0], xs[-1]], y=[ceiling] * 2, mode="lines", showlegend=col == 1,
                                 name=f"ceiling for M = {rows[0]['canaries'] if rows else '?'}",
                                 line=dict(color=SERIES[2], dash="dash")), row=1, col=col)
        for strategy in dict.fromkeys(r["strategy"] for r in rows):
            pts = sorted((_x(r["epsilon"]), r["epsilon_lb"]) for r in rows
                         if r["strategy"] == strategy and r["threat"] == threat)
            if pts:
                fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                         name=strategy, legendgroup=strategy, showlegend=col == 1,
                                         line=dict(color=color(strategy))), row=1, col=col)
    fig.update_xaxes(type="log", tickvals=xs, ticktext=[eps_text("inf" if x == INF_AT else x) for x in xs],
                     title="ε (budget; ∞ = no noise)")
    return _layout(fig, "Audited lower bound ε_lb against the budget ε", None, "ε_lb (best of both bounds)",
                   height=420)
