"""Backbones by name, and the classifier that puts a linear head on one.

Every backbone is an ``nn.Module`` with:

* ``blocks``: ``nn.ModuleList`` of its L blocks, input side first (partial
  fine-tuning trains the last k of them); parameters outside ``blocks`` (stem,
  final norm) train only in full fine-tuning.
* ``feature_dim``: width of the penultimate representation.
* ``forward_features(x)``: (B, C, H, W) -> (B, feature_dim).
* ``layer_features(x)``: list of L + 1 tensors (B, d_l); index 0 is the
  flattened input, index l the representation after block l (pooled channels
  for CNNs, the CLS token for ViTs). The separability analyses read these.
"""

from __future__ import annotations

import contextlib
import contextvars
from pathlib import Path

import torch
from torch import nn

from dpviz import catalog

_BUILT: contextvars.ContextVar[Path | None] = contextvars.ContextVar("dpviz_built_backbones", default=None)


class Classifier(nn.Module):
    """Backbone followed by a linear head on its penultimate features."""

    def __init__(self, backbone: nn.Module, num_classes: int):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(backbone.feature_dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone.forward_features(x))


def build_backbone(name: str, *, channels: int, size: int, weights: str | None = None) -> nn.Module:
    """Build the backbone ``name`` (an entry of `dpviz.catalog`) for inputs of shape (channels, size, size).

    Built-in backbones come back randomly initialised (`prepare` pretrains
    them on public data and caches the weights); torchvision/timm backbones
    load ``weights``.
    """
    return catalog.backbone(name).build(channels=channels, size=size, weights=weights)


@contextlib.contextmanager
def cache_in(cache_dir):
    """Backbones built while this is open, in this thread, may keep what they derived from their weights under
    ``<cache_dir>/backbones/`` (`built_cache`): the store of the run that builds them
    (`dpviz.training.prepare.prepare`). EfficientNet-Lite keeps its private-ready network there."""
    token = _BUILT.set(Path(cache_dir) if cache_dir else None)
    try:
        yield
    finally:
        _BUILT.reset(token)


def built_cache() -> Path | None:
    """The folder `cache_in` opened for this thread's builds (None: build from scratch, keep nothing)."""
    base = _BUILT.get()
    return base / "backbones" if base is not None else None


def count_blocks(backbone: nn.Module) -> int:
    return len(backbone.blocks)
