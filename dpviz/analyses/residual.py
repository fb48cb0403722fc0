"""Prediction residual per layer (He & Su 2024).

PR_l = mean squared error of the least-squares fit (with intercept) from the
layer's representation (the ViT's CLS token, the CNN's pooled channels, the
flattened input for l = 0) to the one-hot label, divided by the label's
variance (summed over the K one-hot columns). 0 is a perfect linear read-out,
1 is no better than predicting the class frequencies. Where the layer has too few
examples for its dimension (n ≤ min_examples_per_dim · (d + 1); a real backbone's
384-dim features over 250 stored examples) the fit is exact on these points, so PR
is not defined there: NaN, and ``unreadable`` says why (it was a meaningless 0 before).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from dpviz.analyses import layers, register
from dpviz.analyses.separability import fit_law


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
    unreadable: str = ""  # why some layers have no PR (not "note": that key is the privacy note)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["residual"] = list(self.residual)
        return d


@register("residual", "per-layer prediction residual PR_l of a linear read-out of the one-hot label",
          min_examples_per_dim=1.0)
def residual(features: dict, *, min_examples_per_dim: float = 1.0) -> Residual:
    y = np.asarray(features["labels"])
    xs = layers(features)
    short = [i for i, x in enumerate(xs) if len(y) <= min_examples_per_dim * (x.shape[1] + 1)]
    pr = tuple(float("nan") if i in short else prediction_residual(x, y) for i, x in enumerate(xs))
    f = fit_law(pr)
    note = (f"not readable at layers {', '.join(map(str, short))}: n = {len(y)} examples for "
            f"d + 1 = {xs[short[0]].shape[1] + 1} read-out weights, so a linear read-out fits them exactly"
            if short else "")
    return Residual(pr, f.rho, f.intercept, f.r2, f.pearson_r, unreadable=note)
