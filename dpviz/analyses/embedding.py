"""2-D maps of the penultimate features of the evaluation subset, aligned across checkpoints.

PCA with one basis per run: the principal axes are fitted on the features of
*all* the run's checkpoints stacked together (``reference``), then every
checkpoint is projected onto them, so a point that does not move in feature
space does not move on the map. Axis signs are fixed (largest loading
positive) so maps are reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import layers, register


def pca_basis(stack: np.ndarray, dims: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Mean (d,) and the top principal axes (d, dims) of ``stack`` (N, d)."""
    mu = stack.mean(0)
    _, _, vt = np.linalg.svd(stack - mu, full_matrices=False)
    axes = vt[:dims].T
    axes *= np.sign(axes[np.abs(axes).argmax(0), np.arange(axes.shape[1])])
    return mu, axes


@dataclass(frozen=True)
class Embedding:
    coords: np.ndarray  # (n, 2)
    labels: np.ndarray  # (n,)
    method: str
    explained: tuple  # share of the reference variance on each axis

    def to_dict(self) -> dict:
        return {"method": self.method, "coords": self.coords.round(6).tolist(),
                "labels": self.labels.tolist(), "explained": list(self.explained)}


@register("embedding", "2-D PCA map of the penultimate features (one basis per run)", method="pca")
def embedding(features: dict, method: str = "pca", reference: list | None = None) -> Embedding:
    """Map one checkpoint; ``reference`` = the run's checkpoints' penultimate features."""
    x = layers(features)[-1]
    stack = np.vstack(reference) if reference else x
    mu, axes = pca_basis(stack)
    total = ((stack - mu) ** 2).sum()
    explained = tuple(float((((stack - mu) @ axes[:, j]) ** 2).sum() / total) for j in range(axes.shape[1]))
    return Embedding((x - mu) @ axes, np.asarray(features["labels"]), method, explained)
