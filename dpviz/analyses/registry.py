"""Representation analyses, one module each, registered by name.

Each analysis is a pure function of a checkpoint's features (the dict stored
by the training loop: ``layer_0`` … ``layer_L`` and ``labels``) to a small frozen
result whose ``to_dict()`` is JSON-ready. The pages, the command line and the
tests iterate `REGISTRY`.

Every analysis here reads features of *private* data (the evaluation subset of
the private task); its results are statistics of the private data that the
run's DP guarantee does not cover (`PRIVACY_NOTE`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

PRIVACY_NOTE = ("Computed on private data (the evaluation subset); these statistics are NOT covered "
                "by the run's (ε, δ) guarantee.")


@dataclass(frozen=True)
class Analysis:
    """A registered analysis.

    Attributes:
        name: registry key (also the CLI name).
        fn: ``fn(features, **params) -> result`` with ``result.to_dict()``.
        params: default parameters (part of the cache key).
        description: one line for pages and ``--help``.
        kind: "features" (``fn(features, …)``) or "model" (``fn(checkpoint, …)`` with a
            `hessian.Checkpoint`: the model at that step and a fixed private training batch).
    """

    name: str
    fn: Callable
    params: dict
    description: str
    kind: str = "features"


REGISTRY: dict[str, Analysis] = {}


def register(name: str, description: str, kind: str = "features", **params):
    def deco(fn):
        REGISTRY[name] = Analysis(name, fn, params, description, kind)
        return fn
    return deco


def layers(features: dict) -> list[np.ndarray]:
    """The per-layer matrices (n, d_l), input first."""
    L = sum(1 for k in features if k.startswith("layer_"))
    return [np.asarray(features[f"layer_{i}"], dtype=np.float64) for i in range(L)]


def run_analysis(name: str, features, *, context: dict | None = None, **params) -> dict:
    """Run the analysis ``name`` with its defaults overridden by ``params``; JSON-ready dict.

    ``features`` is a checkpoint's feature dict, or a `hessian.Checkpoint` for model analyses;
    ``context`` holds inputs that are not parameters (the embedding's reference checkpoints).
    """
    from dpviz.errors import ConfigError

    if name not in REGISTRY:
        raise ConfigError("analysis", f"one of {', '.join(sorted(REGISTRY))}", name)
    a = REGISTRY[name]
    unknown = set(params) - set(a.params)
    if unknown:
        raise ConfigError(sorted(unknown)[0], f"not a parameter of {name} (has {', '.join(a.params) or 'none'})")
    return {"analysis": name, "params": {**a.params, **params}, "private_data": True, "note": PRIVACY_NOTE,
            **a.fn(features, **(context or {}), **{**a.params, **params}).to_dict()}
