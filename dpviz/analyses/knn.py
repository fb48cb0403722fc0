"""kNN accuracy of backbone (penultimate) features: how well the features alone classify.

Top-1 accuracy of a k-nearest-neighbour vote (cosine similarity, k = 20 as in
Ke et al. 2024, or half the stored examples where fewer than 40 are stored) by 2-fold cross-validation on the stored evaluation subset: points
at even positions vote for those at odd positions and vice versa. Votes tie
to the smallest label, as scikit-learn's `KNeighborsClassifier` does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from dpviz.errors import ConfigError
from dpviz.analyses import layers, register


def knn_predict(ref: np.ndarray, ref_y: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    """Labels predicted for ``query`` (m, d) by a cosine k-NN vote over ``ref`` (n, d)."""
    r = torch.nn.functional.normalize(torch.as_tensor(ref, dtype=torch.float64), dim=1)
    q = torch.nn.functional.normalize(torch.as_tensor(query, dtype=torch.float64), dim=1)
    k = min(k, len(r))
    idx = (q @ r.T).topk(k, dim=1).indices  # (m, k) nearest by cosine similarity
    classes, ry = np.unique(ref_y, return_inverse=True)
    votes = torch.zeros(len(q), len(classes), dtype=torch.long)
    votes.scatter_add_(1, torch.as_tensor(ry)[idx], torch.ones_like(idx))
    return classes[votes.argmax(1).numpy()]  # argmax takes the first max: the smallest label


def folds(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    even, odd = np.arange(0, n, 2), np.arange(1, n, 2)
    return [(even, odd), (odd, even)]


@dataclass(frozen=True)
class KnnResult:
    accuracy: float
    k: int
    n: int
    layer: int

    def to_dict(self) -> dict:
        return asdict(self)


def check_k(k, n: int) -> None:
    """k must be a whole number in [1, n // 2]: each half of the n stored examples votes for the other."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n // 2:
        raise ConfigError("k", f"an integer in [1, {n // 2}] (half of the {n} stored examples vote)", k)


K = 20
"""The default k (Ke et al. 2024); a checkpoint of fewer than 2·K stored examples uses half of them."""


@register("knn", "k-NN accuracy (cosine, 2-fold) of the penultimate features", k=None)
def knn(features: dict, k: int | None = None) -> KnnResult:
    x, y = layers(features)[-1], np.asarray(features["labels"])
    k = min(K, len(y) // 2) if k is None else k  # the default fits a small evaluation subset
    check_k(k, len(y))
    correct = sum((knn_predict(x[a], y[a], x[b], k) == y[b]).sum() for a, b in folds(len(y)))
    return KnnResult(float(correct / len(y)), int(k), int(len(y)), len(layers(features)) - 1)
