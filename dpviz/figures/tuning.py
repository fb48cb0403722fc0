"""Figures of a hyperparameter search, built from an Optuna study.

Optuna's own plotly builders (`optuna.visualization`) draw the optimization
history and the parameter importances (fANOVA), recoloured in the Okabe–Ito
palette; the parallel coordinates are drawn here, so that a log-scale parameter
(every learning rate) gets a log axis ticked at powers of ten like every other
dpviz figure (`style.log_axis`), not Optuna's ends-and-decades mix. Titles carry
the strategy and ε; a placeholder shows while a study has too few trials for a
figure to mean anything.
"""

from __future__ import annotations

import math

import optuna
import plotly.graph_objects as go

from dpviz.figures.style import (BEST, GREY, OKABE_ITO, TEMPLATE, decades, eps_text, legend_below, power_text, title_lines,
                    title_margin, title_style, wrap)

KINDS = ("history", "importance", "parallel")
MIN_TRIALS = {"history": 1, "importance": 2, "parallel": 2}  # fANOVA and the axes need ≥ 2 finished trials
TITLES = {"history": "Optimization history", "importance": "Parameter importance (fANOVA)",
          "parallel": "Parallel coordinates"}


def _trials(study: optuna.Study) -> list:
    return [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.value is not None]


def _complete(study: optuna.Study) -> int:
    return len(_trials(study))


def subtitle(study: optuna.Study) -> str:
    """strategy · ε · where the trials ran (private data, or which public proxy)."""
    base = study.user_attrs.get("target", study.user_attrs.get("base", {}))
    proxy = study.user_attrs.get("proxy")
    where = f"trials on public proxy '{proxy}'" if proxy else f"trials on private '{base.get('dataset')}'"
    return f"{base.get('strategy')} · ε = {eps_text(base.get('epsilon'))} · {where}"


def placeholder(text: str, height: int = 380) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=14))
    fig.update_layout(template=TEMPLATE, height=height, xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig


def tuning_figure(study: optuna.Study, kind: str) -> go.Figure:
    """One of `KINDS` for ``study``; a placeholder until it has enough finished trials."""
    import optuna.visualization as ov

    if kind not in KINDS:
        raise ValueError(f"kind: one of {', '.join(KINDS)}")
    n = _complete(study)
    if n < MIN_TRIALS[kind]:
        return placeholder(f"{TITLES[kind]}: waiting for {MIN_TRIALS[kind]} finished trials ({n} so far)")
    if kind == "history":
        fig = _history(ov.plot_optimization_history(study, target_name="test accuracy"), n)
    elif kind == "importance":
        if len({k for t in _trials(study) for k in t.params}) < 2:
            return placeholder("Parameter importance: only one parameter is searched (importance 1)")
        fig = _importance(ov.plot_param_importances(study, target_name="test accuracy"))
    else:
        fig = parallel_figure(study)
    title = wrap(f"{TITLES[kind]}<br>{subtitle(study)}")
    height = 420 + 20 * (title_lines(title) - 2)
    fig.update_layout(template=TEMPLATE, height=height, uirevision="keep", title=title_style(title, height),
                      margin=dict(t=title_margin(title), l=60, r=30, b=50), legend=legend_below())
    if kind == "parallel":
        fig.update_layout(margin=dict(l=40, r=40, b=60))  # the first axis's ticks sit inside the x range
    else:
        fig.update_xaxes(automargin=True)
        fig.update_yaxes(automargin=True)  # the parameter names of the importance bars
    return fig


def _history(fig: go.Figure, n: int) -> go.Figure:
    """Optuna's history in dpviz's colours and words: trials blue, the best so far vermillion; whole trial
    numbers on the x axis (about ten ticks at most)."""
    for t in fig.data:
        if t.mode == "lines":
            t.update(name="best so far", line=dict(color=BEST, width=2))
        elif t.name == "Infeasible Trial":
            t.update(name="infeasible trial", marker=dict(color=GREY))
        else:
            t.update(name="trial", marker=dict(color=OKABE_ITO["blue"], size=8))
    fig.update_xaxes(title="trial (number)", tick0=0, dtick=max(1, math.ceil(n / 10)))
    return fig.update_yaxes(title="test accuracy (fraction)")


def _importance(fig: go.Figure) -> go.Figure:
    """Optuna's fANOVA bars with room for the longest bar's value label beyond its end."""
    top = max((max(t.x) for t in fig.data if t.x is not None and len(t.x)), default=1.0)
    fig.update_traces(marker_color=OKABE_ITO["blue"], cliponaxis=False, textposition="outside")
    fig.update_xaxes(title="importance (fANOVA; the shares sum to 1)", range=[0, 1.18 * top])
    return fig.update_yaxes(title=None)


def _step(span: float) -> float:
    """A round tick step (1, 2, 2.5 or 5 × 10^k) giving about four intervals over ``span``."""
    k = math.floor(math.log10(span / 4))
    return next(m for m in (1, 2, 2.5, 5, 10) if m * 10 ** k >= span / 4) * 10 ** k


def _axis(values: list, log: bool) -> tuple[list, list, list]:
    """One axis of the parallel coordinates: the values' positions in [0, 1] (None where a trial lacks the
    parameter), its tick positions and tick texts. A log axis spans whole decades, ticked at 10^k."""
    shown = [float(v) for v in values if v is not None]
    if log:
        lo, hi = decades(shown)
        pos = lambda v: (math.log10(v) - lo) / (hi - lo)  # noqa: E731
        ticks = [(10.0 ** k, power_text(k)) for k in range(lo, hi + 1)]
    else:
        step = _step((max(shown) - min(shown)) or abs(shown[0]) or 1.0)
        lo, hi = math.floor(min(shown) / step) * step, math.ceil(max(shown) / step) * step
        hi = hi if hi > lo else lo + step
        pos = lambda v: (v - lo) / (hi - lo)  # noqa: E731
        ticks = [(lo + i * step, f"{lo + i * step:.3g}") for i in range(round((hi - lo) / step) + 1)]
    return ([None if v is None else pos(float(v)) for v in values], [pos(t) for t, _ in ticks],
            [text for _, text in ticks])


def parallel_figure(study: optuna.Study) -> go.Figure:
    """Parallel coordinates of the finished trials: test accuracy, then each searched parameter on its own
    axis (log where it was searched on a log scale); a line per trial coloured by its accuracy (cividis,
    colour-blind safe, without its palest fifth), the best trial vermillion on top."""
    from plotly.colors import sample_colorscale

    trials = _trials(study)
    names = sorted({k for t in trials for k in t.params})
    dists = {p: next(t.distributions[p] for t in trials if p in t.params) for p in names}
    cols = [("test accuracy", [t.value for t in trials], False)] + [
        (p, [t.params.get(p) for t in trials], bool(getattr(dists[p], "log", False))) for p in names]
    axes = [_axis(values, log) for _, values, log in cols]
    acc = [t.value for t in trials]
    lo, hi = min(acc), max(acc)
    scale = [[i / 4, c] for i, c in enumerate(sample_colorscale("Cividis", [0, 0.2, 0.4, 0.6, 0.8]))]  # no pale end
    shades = sample_colorscale(scale, [(a - lo) / (hi - lo) if hi > lo else 0.5 for a in acc])
    fig, x = go.Figure(), list(range(len(cols)))
    order = sorted(range(len(trials)), key=lambda i: (acc[i], -trials[i].number))  # the best drawn last
    for i in order:
        best = i == order[-1]
        fig.add_trace(go.Scatter(
            x=x, y=[a[0][i] for a in axes], mode="lines", showlegend=best,
            name="best trial" if best else f"trial {trials[i].number}",
            line=dict(color=BEST if best else shades[i], width=3 if best else 1.5),
            customdata=[f"{n} = {v[i]:.4g}" if v[i] is not None else f"{n}: not searched" for n, v, _ in cols],
            hovertemplate=f"trial {trials[i].number}: %{{customdata}}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", showlegend=False, hoverinfo="skip",
                             marker=dict(color=[lo, hi], colorscale=scale, showscale=True,
                                         colorbar=dict(title="test accuracy", thickness=14))))
    for j, (_, ticks, texts) in enumerate(axes):
        fig.add_shape(type="line", x0=j, x1=j, y0=0, y1=1, line=dict(color=GREY, width=1), layer="below")
        for y, text in zip(ticks, texts):
            fig.add_annotation(x=j, y=y, text=text, showarrow=False, xanchor="right", xshift=-4,
                               font=dict(size=11))
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=[n for n, _, _ in cols], range=(-0.35, len(cols) - 0.75),
                     showgrid=False, zeroline=False)
    return fig.update_yaxes(range=(-0.06, 1.06), visible=False, fixedrange=True)
