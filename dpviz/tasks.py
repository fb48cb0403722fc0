"""What a run's schedule needs from its data and backbone, known without loading either.

σ is calibrated for T = epochs · round(n/B) steps (and, for partial fine-tuning, the backbone's block
count), so a preview or an early accounting process needs only n and L. For dpviz's own datasets and
backbones both are fixed: this table gives them without importing torch (≈ 2 s of the dashboard's
first page). Datasets read from files and external backbones are sized by loading them;
`tests/test_data.py` checks every entry here against the loaded dataset and the built backbone.
"""

from __future__ import annotations

from typing import NamedTuple


class Shape(NamedTuple):
    """A dataset's training-set size n, image shape (channels × size × size) and class count."""

    n: int
    channels: int
    size: int
    num_classes: int


DATASETS = {"digits": Shape(1437, 1, 16, 10), "glyphs": Shape(1500, 1, 16, 10),
            "synthetic": Shape(2000, 1, 16, 2)}
BLOCKS = {"cnn": 3, "vit": 4}  # len(backbone.blocks) of dpviz's own backbones, at any input shape


def static_shape(cfg) -> tuple[Shape, int] | None:
    """(dataset shape, block count) of ``cfg``'s private task, or None when only loading tells."""
    if cfg.dataset in DATASETS and cfg.backbone in BLOCKS:
        return DATASETS[cfg.dataset], BLOCKS[cfg.backbone]
    return None
