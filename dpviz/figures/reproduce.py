"""The reproduction scorecard's figures: one per claim, from its row's measured means ± std."""

from __future__ import annotations

import re

import plotly.graph_objects as go

from dpviz.figures.style import DASHES, SERIES, VERDICT_COLORS, layout as _layout, line

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


def _group_line(group: str, i: int) -> dict:
    """A group named by a strategy ("fft", "lp-fft") in that strategy's colour and DP-SGD's dash (the scorecard's
    runs), as on every page; others in turn."""
    from dpviz import strategies

    return line(group, "dp-sgd") if group in strategies.names() else dict(color=SERIES[i % len(SERIES)],
                                                                          dash=DASHES[i % len(DASHES)])


def scale_figure(rows: dict[str, dict]) -> go.Figure | None:
    """One claim at every size, from its rows (size → row): its curves side by side (`scorecard.curves`): kNN
    accuracy of the backbone features over the DP steps (the dip), or mean log₁₀ D_l over depth (the law);
    for a claim without curves, its groups' bars (mean ± std) with one colour per size."""
    from plotly.subplots import make_subplots

    kind = "knn" if any("knn" in r for r in rows.values()) else "depth" if any("depth" in r for r in rows.values()) else None
    first = next(iter(rows.values()))
    title = f"{first['id']} along the scale axis · {first['task']}<br>{first.get('paper', first['seed'])}"
    if kind is None:
        fig = go.Figure()
        for i, (size, r) in enumerate(rows.items()):
            stats = r["measured"]
            fig.add_trace(go.Bar(x=list(stats), y=[v["mean"] for v in stats.values()], name=f"{size}: {r['verdict']}",
                                 error_y=dict(type="data", array=[v["std"] for v in stats.values()]),
                                 marker_color=SERIES[i % len(SERIES)]))
        return _layout(fig, title, None, "measured (mean ± std over seeds)", barmode="group")
    sizes = [s for s, r in rows.items() if kind in r]
    fig = make_subplots(rows=1, cols=len(sizes), subplot_titles=[f"{s}: {rows[s]['verdict']}" for s in sizes])
    groups = sorted({g for s in sizes for g in rows[s][kind]})
    for col, s in enumerate(sizes, 1):
        for i, g in enumerate(groups):
            data = rows[s][kind].get(g)
            if data is None:
                continue
            x, y = ([p[0] for p in data], [p[1] for p in data]) if kind == "knn" else (list(range(len(data))), data)
            fig.add_trace(go.Scatter(x=x, y=y, name=g, legendgroup=g, showlegend=col == 1, mode="lines+markers",
                                     line=_group_line(g, i)),
                          row=1, col=col)
    x_title, y_title = (("DP step", "kNN accuracy (fraction)") if kind == "knn"
                        else ("layer l", "log₁₀ D_l (mean over seeds)"))
    _layout(fig, title, x_title, y_title)
    for col in range(2, len(sizes) + 1):
        fig.update_xaxes(title_text=x_title, row=1, col=col)
    return fig
