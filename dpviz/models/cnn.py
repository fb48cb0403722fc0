"""A small GroupNorm CNN (GroupNorm, not BatchNorm: per-sample gradients need
layers that do not mix examples of a batch, as in the DP fine-tuning papers)."""

from __future__ import annotations

import torch
from torch import nn

from . import register

WIDTHS = (32, 64, 128)


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1),
        nn.GroupNorm(min(16, cout // 4), cout),
        nn.ReLU(),
    )


class SmallCNN(nn.Module):
    """Three conv blocks (stride 1, 2, 2) then global average pooling.

    For a 16×16 input the blocks output (B, 32, 16, 16), (B, 64, 8, 8) and
    (B, 128, 4, 4); the penultimate features are the pooled (B, 128).
    """

    def __init__(self, channels: int = 1, widths=WIDTHS):
        super().__init__()
        cins = (channels,) + tuple(widths[:-1])
        strides = (1,) + (2,) * (len(widths) - 1)
        self.blocks = nn.ModuleList(_block(i, o, s) for i, o, s in zip(cins, widths, strides))
        self.feature_dim = widths[-1]

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x.mean(dim=(2, 3))

    def layer_features(self, x: torch.Tensor) -> list[torch.Tensor]:
        out = [x.flatten(1)]
        for b in self.blocks:
            x = b(x)
            out.append(x.mean(dim=(2, 3)))  # pooled channels, (B, C_l)
        return out


@register("cnn")
def build_cnn(*, channels: int, size: int, weights=None) -> SmallCNN:
    return SmallCNN(channels)
