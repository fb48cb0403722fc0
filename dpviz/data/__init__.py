"""Private datasets, by name, as in-memory tensors.

Every loader returns a `Bundle` of images in (N, C, H, W) float32 scaled to
[-1, 1] with fixed constants: no statistic of the private data is used to
normalise it (a mean computed on private data would itself leak).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import catalog


@dataclass
class Bundle:
    """A private task: train and test splits and its label set.

    Attributes:
        name: dataset name.
        x_train: (N, C, H, W) float32 in [-1, 1].
        y_train: (N,) int64 labels in [0, num_classes).
        x_test: (M, C, H, W).
        y_test: (M,).
        num_classes: K.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int

    @property
    def n(self) -> int:
        return len(self.y_train)

    @property
    def channels(self) -> int:
        return self.x_train.shape[1]

    @property
    def size(self) -> int:
        return self.x_train.shape[-1]

    def eval_subset(self, m: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed subset of the test split (independent of the run's seed)."""
        g = torch.Generator().manual_seed(12345)
        idx = torch.randperm(len(self.y_test), generator=g)[: min(m, len(self.y_test))]
        idx = idx.sort().values
        return self.x_test[idx], self.y_test[idx]


def to_unit_range(x: torch.Tensor, max_value: float) -> torch.Tensor:
    """Scale raw pixels in [0, max_value] to [-1, 1] with fixed constants."""
    return (x.float() / max_value) * 2.0 - 1.0


def load(cfg) -> Bundle:
    """Load the dataset named by ``cfg.dataset`` (an entry of `dpviz.catalog`)."""
    return catalog.dataset(cfg.dataset).load(cfg)
