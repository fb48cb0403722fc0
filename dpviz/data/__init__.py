"""Private datasets, by name, as in-memory tensors.

Every image loader returns a `Bundle` of images in (N, C, H, W) float32 scaled
to [-1, 1] with fixed constants: no statistic of the private data is used to
normalise it (a mean computed on private data would itself leak). A text
loader returns token ids (N, T) int64, padded on the right with the backbone's
tokenizer's pad id (the backbone derives its attention mask from it), and keeps
the test texts for the embedding maps' hover.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .. import catalog


@dataclass
class Bundle:
    """A private task: train and test splits and its label set.

    Attributes:
        name: dataset name.
        x_train: images (N, C, H, W) float32 in [-1, 1], or token ids (N, T) int64 for text.
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
    modality: str = "image"
    classes: tuple[str, ...] | None = None  # label names, where the data has them
    texts_test: list[str] | None = field(default=None, repr=False)  # text: the test split's texts

    @property
    def n(self) -> int:
        return len(self.y_train)

    @property
    def channels(self) -> int:
        """Image channels C (0 for text)."""
        return self.x_train.shape[1] if self.modality == "image" else 0

    @property
    def size(self) -> int:
        """Image side H = W, or the sequence length T for text."""
        return self.x_train.shape[-1]

    def eval_subset(self, m: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed subset of the test split (independent of the run's seed)."""
        g = torch.Generator().manual_seed(12345)
        idx = torch.randperm(len(self.y_test), generator=g)[: min(m, len(self.y_test))]
        idx = idx.sort().values
        return self.x_test[idx], self.y_test[idx]

    def eval_texts(self, m: int) -> list[str] | None:
        """The texts of `eval_subset` (same rows, same order), or None for images."""
        if self.texts_test is None:
            return None
        g = torch.Generator().manual_seed(12345)
        idx = torch.randperm(len(self.y_test), generator=g)[: min(m, len(self.y_test))].sort().values
        return [self.texts_test[i] for i in idx.tolist()]


def to_unit_range(x: torch.Tensor, max_value: float) -> torch.Tensor:
    """Scale raw pixels in [0, max_value] to [-1, 1] with fixed constants."""
    return (x.float() / max_value) * 2.0 - 1.0


def load(cfg) -> Bundle:
    """Load the dataset named by ``cfg.dataset`` (an entry of `dpviz.catalog`)."""
    return catalog.dataset(cfg.dataset).load(cfg)
