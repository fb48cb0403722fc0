"""The reproduction scorecard's figures: one per claim, from its row's measured means ± std."""

from __future__ import annotations

import re

import plotly.graph_objects as go

from dpviz.figures.style import DASHES, SERIES, VERDICT_COLORS, layout as _layout

_CURVE = re.compile(r"ε=(\S+) p=(\S+)")


def claim_figure(row: dict) -> go.Figure:
    """Bars of the row's groups (mean ± std over seeds), or accuracy vs LP share per ε for a budget sweep."""
    stats = row["measured"]
    fig = go.Figure()
    on = f" · {row['task']}" if row.get("task", "default") != "default" else ""
    title = f"{row['id']}: {row['verdict']}{on}<br>{row.get('paper', row['seed'])}"
    if stats and all(_CURVE.fullmatch(k) for k in stats):
        by_eps: dict = {}
        for k, v in stats.items():
            e, p = _CURVE.fullmatch(k).groups()
            by_eps.setdefault(e, []).append((float(p), v["mean"], v["std"]))
        for i, (e, pts) in enumerate(sorted(by_eps.items(), key=lambda kv: float(kv[0]))):
            pts.sort()
            fig.add_trace(go.Scatter(x=[p for p, _, _ in pts], y=[m for _, m, _ in pts], name=f"ε = {e}",
                                     mode="lines+markers", line=dict(color=SERIES[i % len(SERIES)], dash=DASHES[i % len(DASHES)]),
                                     error_y=dict(type="data", array=[s for _, _, s in pts])))
        return _layout(fig, title, "LP share p", "test accuracy (fraction)")
    fig.add_trace(go.Bar(x=list(stats), y=[v["mean"] for v in stats.values()],
                         error_y=dict(type="data", array=[v["std"] for v in stats.values()]),
                         marker_color=VERDICT_COLORS[row["verdict"]], showlegend=False))
    return _layout(fig, title, None, "measured (mean ± std over seeds)")
