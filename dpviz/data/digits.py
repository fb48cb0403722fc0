"""The embedded default private task: scikit-learn's handwritten digits.

1,797 images of 8×8 pixels (values 0–16), 10 classes; they ship with
scikit-learn, so nothing is downloaded. Upsampled to 16×16 so that the
built-in backbones see the same resolution as their public pretraining data.
A fixed stratified 80/20 split (independent of the run's seed, stored beside
this module) gives 1,437 training and 360 test images.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from dpviz.data import Bundle, to_unit_range

SIZE = 16
# scikit-learn's ``train_test_split(range(1797), test_size=0.2, stratify=y, random_state=0)``, stored
# (train indices in its order, then test) so that loading the default task needs no scikit-learn;
# tests/test_data.py checks it against scikit-learn.
SPLIT = Path(__file__).with_name("digits_split.npy")
N_TRAIN = 1437


@functools.lru_cache(maxsize=1)
def _arrays():
    images, target = _sk_arrays()
    x = torch.tensor(images, dtype=torch.float32)[:, None]  # (1797, 1, 8, 8)
    x = F.interpolate(x, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
    y = torch.tensor(target, dtype=torch.long)
    order = torch.from_numpy(np.load(SPLIT).astype(np.int64))  # (1797,): train order, then test order
    return to_unit_range(x.clamp(0, 16), 16.0), y, order[:N_TRAIN], order[N_TRAIN:]


def _sk_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8), labels (1797,)) read from the file scikit-learn ships, as its
    ``load_digits`` reads it, without importing scikit-learn (≈ 1 s of a first run)."""
    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def load_digits(cfg=None) -> Bundle:
    x, y, tr, te = _arrays()
    return Bundle("digits", x[tr].clone(), y[tr].clone(), x[te].clone(), y[te].clone(), 10)
