"""The embedded default private task: scikit-learn's handwritten digits.

1,797 images of 8×8 pixels (values 0–16), 10 classes; they ship with
scikit-learn, so nothing is downloaded. Upsampled to 16×16 so that the
built-in backbones see the same resolution as their public pretraining data.
A fixed stratified 80/20 split (independent of the run's seed) gives
1,437 training and 360 test images.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from . import Bundle, register, to_unit_range

SIZE = 16


@functools.lru_cache(maxsize=1)
def _arrays():
    from sklearn.model_selection import train_test_split  # lazy: sklearn takes ~1 s to import

    d = _sk_load()
    x = torch.tensor(d.images, dtype=torch.float32)[:, None]  # (1797, 1, 8, 8)
    x = F.interpolate(x, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
    y = torch.tensor(d.target, dtype=torch.long)
    tr, te = train_test_split(range(len(y)), test_size=0.2, stratify=y.numpy(), random_state=0)
    return to_unit_range(x.clamp(0, 16), 16.0), y, torch.tensor(tr), torch.tensor(te)


def _sk_load():
    from sklearn.datasets import load_digits

    return load_digits()


@register("digits")
def load_digits(cfg=None) -> Bundle:
    x, y, tr, te = _arrays()
    return Bundle("digits", x[tr].clone(), y[tr].clone(), x[te].clone(), y[te].clone(), 10)
