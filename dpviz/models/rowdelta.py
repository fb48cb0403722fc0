"""`RowDelta`: a frozen layer whose selected output rows train, the layer sparse fine-tuning trains.

It lives with the models (a layer type, as the ViT's `ClsPos` does) so that both the book-keeping
per-sample path (`dpviz.privacy.bk`, which has a rule for it) and the sparse mechanics
(`dpviz.models.sparse`, which inserts it) import it from below.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RowDelta(nn.Module):
    """A frozen Conv2d/Linear ``base`` whose selected output ``rows`` train through ``delta`` (k, …).

    The forward runs one layer with W₀ + scatter(rows, Δ) (the same cost as the dense layer); book-keeping
    then needs only the selected rows' output gradients (B, k, …) for per-sample norms and the clipped sum,
    so the per-sample work scales with k ("row grouping", Makni et al. 2025). ``base.bias`` may train too.
    """

    def __init__(self, base: nn.Module, rows: torch.Tensor):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.conv = isinstance(base, nn.Conv2d)
        self.register_buffer("rows", rows.to(base.weight.device))
        self.delta = nn.Parameter(torch.zeros((len(rows), *base.weight.shape[1:]), device=base.weight.device,
                                              dtype=base.weight.dtype))

    def weight(self) -> torch.Tensor:
        return self.base.weight.index_add(0, self.rows, self.delta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.base
        if self.conv:
            return F.conv2d(x, self.weight(), b.bias, b.stride, b.padding, b.dilation, b.groups)
        return F.linear(x, self.weight(), b.bias)
