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

from dpviz.analyses import layers, register


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


UMAP_ARGS = dict(n_neighbors=15, min_dist=0.1, n_epochs=200, random_state=0, n_jobs=1,
                 force_approximation_algorithm=True)  # a fixed seed is single-threaded anyway


def umap_maps(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """One UMAP fitted on all checkpoints stacked; each checkpoint's rows of it (n_i, 2).

    Fitting once on the stack puts every checkpoint in one coordinate system: a
    point whose features do not change sits on its own duplicate (distance 0,
    each other's nearest neighbour) and lands in the same place. The
    approximate nearest-neighbour path is used (several times faster here).
    """
    import umap  # lazy: numba compiles on first use (warm it with `warm_umap`)

    stack = np.vstack(arrays).astype(np.float32)
    coords = umap.UMAP(**UMAP_ARGS).fit_transform(stack)
    return np.split(coords, np.cumsum([len(a) for a in arrays])[:-1])


def warm_umap() -> None:
    """Trigger numba's compilation (40–75 s on a 2-core CPU) on a tiny problem."""
    rng = np.random.default_rng(0)
    umap_maps([rng.normal(size=(80, 8)), rng.normal(size=(80, 8))])


@register("embedding", "2-D map of the penultimate features (PCA, or UMAP), one fit per run", method="pca")
def embedding(features: dict, method: str = "pca", reference: list | None = None,
              position: int | None = None) -> Embedding:
    """Map one checkpoint; ``reference`` = the run's checkpoints' penultimate features, ``position`` its index."""
    x = layers(features)[-1]
    if method == "umap":
        if reference is None:
            reference, position = [x], 0
        coords = umap_maps(reference)[position]
        return Embedding(coords.astype(np.float64), np.asarray(features["labels"]), "umap", ())
    if method != "pca":
        from dpviz.errors import ConfigError
        raise ConfigError("method", "pca or umap", method)
    stack = np.vstack(reference) if reference else x
    mu, axes = pca_basis(stack)
    total = ((stack - mu) ** 2).sum()
    explained = tuple(float((((stack - mu) @ axes[:, j]) ** 2).sum() / total) for j in range(axes.shape[1]))
    return Embedding((x - mu) @ axes, np.asarray(features["labels"]), method, explained)
