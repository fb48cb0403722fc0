"""Figures of privacy audits: the bounds of one audit, its score histograms and ROC, and sweeps of ε_lb vs ε."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dpviz.privacy import names
from dpviz.figures.style import GREY, SERIES, eps_text, line, log_axis, layout as _layout

INF_AT = 32.0
"""Where ε = ∞ (no noise) sits on a sweep's log ε axis: two octaves past the grid's 8 (clear of the 10¹ tick)."""
SCORE_LABELS = {"white-box": "canary score: log-likelihood ratio of its projections (in vs out)",
                "black-box": "canary score: − loss of the final model on the canary"}


def _title(r: dict) -> str:
    """The audited run as every surface names it (its mechanism where it is not DP-SGD), the threat and M."""
    noise = names.named(r["config"])
    return (f"{r['config']['strategy']}, ε = {eps_text(r['epsilon'] or 'inf')}{', ' + noise if noise else ''}, "
            f"{r['threat']}, M = {r['canaries']}")


def _confidence(r: dict) -> str:
    """The title's confidence: for both bounds together (each at half the significance), where the report says so."""
    c = r["confidence"]
    return (f"{c:.0%} confidence for both bounds together" if "confidence_covers" in r
            else f"{c:.0%} confidence for each bound alone")


def bounds_figure(r: dict) -> go.Figure:
    """ε_lb by both bounds (and the ideal attack's), the accountant's ε and the ceiling M canaries allow; the title
    says what the confidence covers (both bounds together) and the f-DP bar its assumption (a Gaussian trade-off)."""
    bars = [("ε_lb one-run (Steinke et al.)", r["epsilon_lb"], SERIES[0]),
            ("ε_lb f-DP (Mahloujifar et al.; assumes a Gaussian trade-off)", r["epsilon_lb_fdp"], SERIES[0])]
    spread = (r.get("ideal") or {}).get("spread")
    if spread:  # the median of its draws, the bar's whisker from their 5 % to 95 % quantile
        bars.append((f"ideal attack's ε_lb (exact mechanism, median of {spread['draws']} runs)", spread["median"],
                     GREY))
    elif r.get("ideal"):  # a report stored before the spread was: one draw
        bars.append(("ideal attack's ε_lb (exact mechanism, one run)", max(r["ideal"]["epsilon_lb"],
                                                                           r["ideal"]["epsilon_lb_fdp"]), GREY))
    if r["epsilon"] is not None:
        bars += [("accountant's ε spent (upper bound)", r["epsilon_spent"], SERIES[1]),
                 ("budget ε", r["epsilon"], SERIES[1])]
    bars.append((f"ceiling: most that {r['canaries']} canaries can show", r["ceiling"], SERIES[2]))
    whisker = [(spread["high"] - spread["median"], spread["median"] - spread["low"]) if spread and "median of" in b[0]
               else (0, 0) for b in bars]
    fig = go.Figure(go.Bar(y=[b[0] for b in bars], x=[b[1] for b in bars], orientation="h",
                           marker_color=[b[2] for b in bars], text=[f"{b[1]:.3g}" for b in bars],
                           textposition="outside", showlegend=False,
                           error_x=dict(type="data", array=[w[0] for w in whisker],
                                        arrayminus=[w[1] for w in whisker], visible=bool(spread), color=GREY)))
    fig.update_yaxes(autorange="reversed")
    fig = _layout(fig, f"Lower vs upper bound ({_confidence(r)})<br>{_title(r)}",
                  "ε (at the run's δ)", None, height=360, showlegend=False)
    return fig.update_layout(margin=dict(r=40))  # the bar names: automargin


def scores_figure(r: dict) -> go.Figure:
    """Histograms of the scores of included and excluded canaries: the further apart, the more leaks."""
    fig = go.Figure()
    for name, key, c in (("included (trained on)", "scores_in", SERIES[1]),
                         ("excluded", "scores_out", SERIES[0])):
        fig.add_trace(go.Histogram(x=r[key], name=f"{name}: {len(r[key])}", opacity=0.6, marker_color=c,
                                   nbinsx=60))
    fig.update_layout(barmode="overlay")
    return _layout(fig, f"Canary scores, in vs out<br>{_title(r)}", SCORE_LABELS[r["threat"]], "canaries")


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
    fig = _layout(fig, f"ROC of the canary guesses<br>{_title(r)}", "false-positive rate (log)",
                  "true-positive rate (log)")
    log_axis(fig, "x", [lo, 1])
    return log_axis(fig, "y", [lo, 1])


def _x(eps) -> float:
    return INF_AT if eps is None else float(eps)


def sweep_figure(rows: list[dict]) -> go.Figure:
    """ε_lb against ε, a panel per threat and a line per strategy and mechanism (the table's colour and dash), with
    ε_lb = ε and the ceiling; the title names the mechanism where it is not DP-SGD.

    The diagonal and the ceiling span at least the default grid's ε (0.5 to ∞), so a sweep of one point
    still shows where it stands between them."""
    threats = [t for t in ("white-box", "black-box") if any(r["threat"] == t for r in rows)] or ["white-box"]
    fig = make_subplots(rows=1, cols=len(threats), subplot_titles=threats, shared_yaxes=True,
                        horizontal_spacing=0.06)
    xs = sorted({_x(r["epsilon"]) for r in rows})
    finite = [x for x in xs if x < INF_AT]
    lo, hi = min([0.5, *finite]), max([8.0, *finite])
    diag = list(np.geomspace(lo, hi, 2))
    ceiling = max((r["ceiling"] for r in rows), default=0.0)
    mixed = names.mixed(rows)
    for col, threat in enumerate(threats, start=1):
        fig.add_trace(go.Scatter(x=diag, y=diag, mode="lines", name="ε_lb = ε (accountant's bound)",
                                 legendgroup="diag", line=dict(color=GREY, dash="dot"), showlegend=col == 1),
                      row=1, col=col)
        fig.add_trace(go.Scatter(x=[lo, INF_AT], y=[ceiling] * 2, mode="lines", showlegend=col == 1,
                                 legendgroup="ceiling", name=f"ceiling for M = {rows[0]['canaries'] if rows else '?'}",
                                 line=dict(color=SERIES[2], dash="dash")), row=1, col=col)
        for strategy, noise in dict.fromkeys((r["strategy"], names.mechanism(r)) for r in rows):
            same = [r for r in rows if (r["strategy"], names.mechanism(r)) == (strategy, noise)]
            pts = sorted((_x(r["epsilon"]), r["epsilon_lb"]) for r in same if r["threat"] == threat)
            name = f"{strategy} {noise}" if mixed else strategy
            if pts:
                fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                         name=name, legendgroup=name, showlegend=col == 1,
                                         line=line(strategy, names.mechanism_of(same[0]))), row=1, col=col)
    decades = [10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    conf = (f"{rows[0]['confidence']:.0%} confidence for both bounds together; "
            if rows and rows[0].get("bound_significance") is not None else "")
    noise = "" if mixed or not rows else names.named(rows[0])
    fig = _layout(fig, f"Audited lower bound ε_lb vs budget ε{' under ' + noise if noise else ''}<br>({conf}the f-DP "
                  "bound assumes a Gaussian trade-off)", None, "ε_lb (larger of both bounds)", height=440)
    fig.update_xaxes(type="log", range=[math.log10(decades[0]), math.log10(INF_AT * 1.3)],
                     tickvals=[*decades, INF_AT], ticktext=[*(f"10<sup>{round(math.log10(d))}</sup>" for d in decades), "∞"],
                     title="ε (∞ = no noise)")
    return fig
