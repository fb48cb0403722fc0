"""A small GroupNorm CNN (GroupNorm, not BatchNorm: per-sample gradients need
layers that do not mix examples of a batch, as in the DP fine-tuning papers)."""

from __future__ import annotations

import torch
from torch import nn


WIDTHS = (16, 32, 64)


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1),
        nn.GroupNorm(min(16, cout // 4), cout),
        nn.ReLU(),
    )


class SmallCNN(nn.Module):
    """Three conv blocks (stride 2, 2, 1) then global average pooling.

    For a 16×16 input the blocks output (B, 16, 8, 8), (B, 32, 4, 4) and
    (B, 64, 4, 4); the penultimate features are the pooled (B, 64). The
    width is chosen so that, pretrained on the public random-process images,
    linear probing on digits stays clearly below full fine-tuning (README).
    Downsampling early keeps the number of output positions T small, which
    is what per-sample gradient norms pay for (ghost norms cost B·T²); the
    default digits are 8×8 upsampled, so the first stride loses nothing.
    """

    def __init__(self, channels: int = 1, widths=WIDTHS):
        super().__init__()
        cins = (channels,) + tuple(widths[:-1])
        strides = (2, 2) + (1,) * (len(widths) - 2)
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


def build_cnn(*, channels: int, size: int, weights=None) -> SmallCNN:
    return SmallCNN(channels)
