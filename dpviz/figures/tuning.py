"""Figures of a hyperparameter search, built from an Optuna study.

Optuna's own plotly builders (`optuna.visualization`) draw the optimization
history, the parameter importances (fANOVA) and the parallel coordinates; this
module gives them dpviz's template, titles with the strategy and ε, and a
placeholder while a study has too few trials for a figure to mean anything.
"""

from __future__ import annotations

import optuna
import plotly.graph_objects as go

from .style import TEMPLATE, eps_text, legend_below, title_lines, title_margin, title_style, wrap

KINDS = ("history", "importance", "parallel")
MIN_TRIALS = {"history": 1, "importance": 2, "parallel": 2}  # fANOVA and the axes need ≥ 2 finished trials
TITLES = {"history": "Optimization history", "importance": "Parameter importance (fANOVA)",
          "parallel": "Parallel coordinates"}


def _complete(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


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
        fig = ov.plot_optimization_history(study, target_name="test accuracy")
        fig.update_yaxes(title="test accuracy (fraction)")
    elif kind == "importance":
        params = {k for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                  for k in t.params}
        if len(params) < 2:
            return placeholder("Parameter importance: only one parameter is searched (importance 1)")
        fig = ov.plot_param_importances(study, target_name="test accuracy")
    else:
        fig = ov.plot_parallel_coordinate(study, target_name="test accuracy")
    title = wrap(f"{TITLES[kind]}<br>{subtitle(study)}")
    height = 420 + 20 * (title_lines(title) - 2)
    fig.update_layout(template=TEMPLATE, height=height, uirevision="keep", title=title_style(title, height),
                      margin=dict(t=title_margin(title), l=60, r=30, b=50), legend=legend_below())
    if kind == "parallel":
        fig.update_layout(margin=dict(l=80, r=80, b=40))  # the outer axes' names
    else:
        fig.update_xaxes(automargin=True)
        fig.update_yaxes(automargin=True)  # the parameter names of the importance bars
    return fig
