"""Figures of the studies (`dpviz.studies`), drawn from the numbers each study reads off its results: mean ± sd over seeds per cell,
one colour per ε, one dash per mechanism (`style.MECHANISM_DASHES`)."""

from __future__ import annotations

import plotly.graph_objects as go

from dpviz.figures.style import MECHANISM_DASHES, SERIES, layout


def _dash(mech: str) -> str:
    return MECHANISM_DASHES["dp-sgd" if mech == "DP-SGD" else "bandmf"]


def _eps_colours(values) -> dict:
    return {e: SERIES[i % len(SERIES)] for i, e in enumerate(sorted(set(values)))}


def split_figure(got: dict) -> go.Figure:
    """Test accuracy over the LP share p, one line per (ε, mechanism), error bars one sd over seeds.
    ``got``: (ε, mechanism) → [(p, (mean, sd, seeds))] in order of p."""
    colours = _eps_colours(e for e, _ in got)
    fig = go.Figure()
    for (eps, mech), pts in got.items():
        fig.add_trace(go.Scatter(x=[p for p, _ in pts], y=[v[0] for _, v in pts], name=f"ε = {eps:g}, {mech}",
                                 mode="lines+markers", line=dict(color=colours[eps], dash=_dash(mech)),
                                 error_y=dict(type="data", array=[v[1] for _, v in pts], visible=True)))
    return layout(fig, "Test accuracy over the LP share p<br>mean ± sd over seeds", "LP share p", "test accuracy")


def noise_figure(got: dict) -> go.Figure:
    """Test accuracy per mechanism, one group of bars per ε, error bars one sd over seeds.
    ``got``: ε → {mechanism: (mean, sd, seeds)}."""
    mechs = list(dict.fromkeys(m for rows in got.values() for m in rows))
    fig = go.Figure()
    for i, mech in enumerate(mechs):
        xs, ys, es = [], [], []
        for eps, rows in got.items():
            if (st := rows.get(mech)) is not None:
                xs.append(f"ε = {eps:g}")
                ys.append(st[0])
                es.append(st[1])
        fig.add_trace(go.Bar(x=xs, y=ys, name=mech, marker_color=SERIES[i % len(SERIES)],
                             error_y=dict(type="data", array=es, visible=True)))
    fig.update_layout(barmode="group")
    return layout(fig, "Test accuracy per mechanism<br>mean ± sd over seeds", "privacy budget", "test accuracy")


PATTERNS = ("", "/", ".", "x", "-", "|", "+")
"""Bar fills, one per pass through the palette, so a figure of more cells than colours names each once."""


def cells_figure(rows: list[tuple[str, str, tuple]], measure: str) -> go.Figure:
    """A study's first measure per cell, mean ± sd over seeds: one bar per cell, grouped by its first column.
    ``rows``: (group, label, (mean, sd, seeds)) per cell, in the study's order."""
    groups = list(dict.fromkeys(g for g, _, _ in rows))
    labels = list(dict.fromkeys(lab for _, lab, _ in rows))
    fig = go.Figure()
    for i, lab in enumerate(labels):
        got = [(g, st) for g, l2, st in rows if l2 == lab]
        fig.add_trace(go.Bar(x=[g for g, _ in got], y=[st[0] for _, st in got], name=lab,
                             marker_color=SERIES[i % len(SERIES)],
                             marker_pattern_shape=PATTERNS[i // len(SERIES) % len(PATTERNS)],  # past the palette
                             error_y=dict(type="data", array=[st[1] for _, st in got], visible=True)))
    fig.update_layout(barmode="group")
    return layout(fig, f"{measure[0].upper() + measure[1:]} per cell<br>mean ± sd over seeds", None, measure)
