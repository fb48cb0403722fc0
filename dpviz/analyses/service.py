"""Analyses of stored checkpoints, cached in the store by (run, step, analysis, parameters)."""

from __future__ import annotations

import json

from ..errors import ConfigError, StoreError
from ..store import Store
from . import REGISTRY, layers, run_analysis

BACKGROUND = ("knn", "separability", "residual")  # computed at every checkpoint as runs train


def resolve_step(store: Store, run_id: str, step: int | None) -> int:
    steps = store.feature_steps(store.get_run(run_id)["run_id"])
    if not steps:
        raise StoreError(f"run_id: run {run_id} has no feature checkpoints yet")
    if step is None:
        return steps[-1]
    if step not in steps:
        raise StoreError(f"step: run {run_id} has checkpoints at steps {steps}; got {step}")
    return step


def analyze(store: Store, run_id: str, name: str, *, step: int | None = None, **params) -> dict:
    """The result of analysis ``name`` on a checkpoint (the last one by default), computed once."""
    if name not in REGISTRY:
        raise ConfigError("analysis", f"one of {', '.join(sorted(REGISTRY))}", name)
    step = resolve_step(store, run_id, step)
    context, keyed = {}, dict(params)
    if name == "embedding":  # one basis per run: the key includes the checkpoints it was fitted on
        steps = store.feature_steps(run_id)
        keyed["reference_steps"] = steps
        context["reference"] = [layers(store.load_features(run_id, s))[-1] for s in steps]
    key = json.dumps({**REGISTRY[name].params, **keyed}, sort_keys=True)
    if (hit := store.get_analysis(run_id, step, name, key)) is not None:
        return hit
    out = {"run_id": run_id, "step": step,
           **run_analysis(name, store.load_features(run_id, step), context=context, **params)}
    store.put_analysis(run_id, step, name, key, out)
    return out


def analyze_checkpoint(store: Store, run_id: str, step: int) -> None:
    """Compute and cache the background analyses for one new checkpoint."""
    for name in BACKGROUND:
        analyze(store, run_id, name, step=step)
