"""Separable data of the theory setting (Ke et al. 2024, Assumption "separable data").

Inputs x ~ N(0, I_d) with d = 256 shown as 1×16×16 images; the label is
sign(zᵀx) for a fixed unit direction z, and points with |zᵀx| < margin are
resampled so the classes are separated by a margin.
"""

from __future__ import annotations

import torch

from dpviz.data import Bundle

N_TRAIN, N_TEST, SIZE, MARGIN = 2000, 500, 16, 0.1


def separable(n: int, *, d: int = SIZE * SIZE, margin: float = MARGIN, seed: int = 0):
    """Return x (n, d) and y (n,) in {0, 1}, separated by z with the given margin."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(d, generator=torch.Generator().manual_seed(7))
    z = z / z.norm()
    xs = []
    while sum(len(x) for x in xs) < n:
        x = torch.randn(2 * n, d, generator=g)
        xs.append(x[(x @ z).abs() >= margin])
    x = torch.cat(xs)[:n]
    return x, (x @ z > 0).long()


def load_synthetic(cfg=None) -> Bundle:
    x, y = separable(N_TRAIN + N_TEST, seed=1)
    # Scale so most pixels fall in [-1, 1] like the image datasets.
    x = (x / 3).clamp(-1, 1).reshape(-1, 1, SIZE, SIZE)
    return Bundle("synthetic", x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:], 2)
