"""Prediction residual per layer (He & Su 2024).

PR_l = mean squared error of the least-squares fit (with intercept) from the
layer's representation (the ViT's CLS token, the CNN's pooled channels, the
flattened input for l = 0) to the one-hot label, divided by the label's
variance (summed over the K one-hot columns). 0 is a perfect linear read-out,
1 is no better than predicting the class frequencies. Where d ≥ n the fit is
exact on these points and PR = 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from . import layers, register
from .separability import fit_law


def prediction_residual(x: np.ndarray, y: np.ndarray) -> float:
    """PR of the one-hot labels y (n,) on features x (n, d)."""
    x = np.asarray(x, dtype=np.float64)
    classes, inv = np.unique(y, return_inverse=True)
    Y = np.eye(len(classes))[inv]  # (n, K)
    X = np.hstack([x - x.mean(0), np.ones((len(x), 1))])
    coef, *_ = np.linalg.lstsq(X, Y, rcond=None)
    mse = ((Y - X @ coef) ** 2).sum(1).mean()
    var = ((Y - Y.mean(0)) ** 2).sum(1).mean()
    return float(mse / var) if var > 0 else float("nan")


@dataclass(frozen=True)
class Residual:
    """Per-layer PR (index 0 = input) and its geometric fit."""

    residual: tuple
    rho: float
    intercept: float
    r2: float
    pearson_r: float
    target: str = "one-hot label"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["residual"] = list(self.residual)
        return d


@register("residual", "per-layer prediction residual PR_l of a linear read-out of the one-hot label")
def residual(features: dict) -> Residual:
    y = np.asarray(features["labels"])
    pr = tuple(prediction_residual(x, y) for x in layers(features))
    f = fit_law(pr)
    return Residual(pr, f.rho, f.intercept, f.r2, f.pearson_r)
