"""Private datasets, by name, as in-memory tensors.

Every image loader returns a `Bundle` of images in (N, C, H, W) float32 scaled
to [-1, 1] with fixed constants: no statistic of the private data is used to
normalise it (a mean computed on private data would itself leak). A text
loader returns token ids (N, T) int64, padded on the right with the backbone's
tokenizer's pad id (the backbone derives its attention mask from it), and keeps
the test texts for the embedding maps' hover.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field

import torch

from dpviz import catalog
from dpviz.errors import ConfigError


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
    pad_id: int = 0  # text: the tokenizer's pad id (right padding)
    x_holdout: torch.Tensor | None = field(default=None, repr=False)  # `RunConfig.holdout`: held-out training examples
    y_holdout: torch.Tensor | None = field(default=None, repr=False)
    skipped: int = 0  # an image folder: entries left out as no image (a README, a .DS_Store), in the summary

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


def digest(bundle: Bundle) -> str:
    """A content digest of the training split (``x_train`` and ``y_train``: their dtypes, shapes and bytes), in
    hex. Every loader ends in these tensors, so one digest covers image folders, MNIST/CIFAR files, text and
    the built-in sets alike; a resumed run compares it with its snapshot's (`dpviz.training.resume`).

    Kept on the bundle for the tensors it was computed from: a run's every snapshot asks, and a loader or a
    caller that swaps or edits a tensor in place (``_version`` counts in-place edits) gets a fresh one."""
    key = tuple((t, t._version) for t in (bundle.x_train, bundle.y_train))
    kept = getattr(bundle, "_digest", None)
    if kept is not None and all(a is b and va == vb for (a, va), (b, vb) in zip(kept[0], key)):
        return kept[1]
    h = hashlib.blake2b(digest_size=16)
    for t in (bundle.x_train, bundle.y_train):
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())  # the bytes as they are: no copy, no float rounding
    bundle._digest = (key, h.hexdigest())
    return bundle._digest[1]


def to_unit_range(x: torch.Tensor, max_value: float) -> torch.Tensor:
    """Scale raw pixels in [0, max_value] to [-1, 1] with fixed constants."""
    return (x.float() / max_value) * 2.0 - 1.0


MAX_CLASSES = 1000  # a user's dataset: its head has one output per class (ImageNet-1k's count)


def check_class_count(count: int, where) -> None:
    """Refuse a user's dataset of more than `MAX_CLASSES` classes (one line on data_dir naming ``where``)."""
    if count > MAX_CLASSES:
        raise ConfigError("data_dir", f"{where}: {count:,} classes, over dpviz's limit of {MAX_CLASSES:,} "
                                      "(each class trains one output of the head)")


TEST_CAP = 1000  # at most this many test examples when a run asks for a training subset (`RunConfig.train_size`)
TEST_MIN = 200  # … and at least this many (or the whole split): a quarter of the training subset in between


def stratified_subset(y: torch.Tensor, k: int, *, seed: int = 54321) -> torch.Tensor:
    """Sorted indices of a fixed subset of k examples with the label proportions of ``y`` (N,).

    Fixed by a constant seed, not the run's, so runs of every seed train on the same examples; which
    examples are kept depends only on the labels' order, so choosing them reads nothing private beyond
    the class counts the dataset's catalogue entry publishes anyway.
    """
    if k >= len(y):
        return torch.arange(len(y))
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(y), generator=g)
    counts = torch.bincount(y)
    quota = torch.floor(counts.double() * k / len(y)).long()
    quota[torch.argsort(-(counts.double() * k / len(y) - quota))[: k - int(quota.sum())]] += 1
    taken, keep = torch.zeros_like(counts), []
    for i in order.tolist():
        c = int(y[i])
        if taken[c] < quota[c]:
            taken[c] += 1
            keep.append(i)
    return torch.tensor(sorted(keep))


def subset(bundle: Bundle, train_size: int) -> Bundle:
    """``bundle`` with `stratified_subset` of its training split and a fixed stratified test subset of a
    quarter of that size, within [`TEST_MIN`, `TEST_CAP`] (a real test split of 10,000 images would take a
    CPU longer to evaluate than to train on)."""
    tr = stratified_subset(bundle.y_train, train_size)
    te = stratified_subset(bundle.y_test, min(TEST_CAP, max(TEST_MIN, train_size // 4)), seed=12345)
    texts = [bundle.texts_test[i] for i in te.tolist()] if bundle.texts_test is not None else None
    return Bundle(bundle.name, bundle.x_train[tr], bundle.y_train[tr], bundle.x_test[te], bundle.y_test[te],
                  bundle.num_classes, modality=bundle.modality, classes=bundle.classes, texts_test=texts,
                  pad_id=bundle.pad_id)


HOLDOUT_SEED = 777  # which examples are held out: fixed, as `stratified_subset`'s, so every trial holds out the same


def hold_out(bundle: Bundle, k: int) -> Bundle:
    """``bundle`` with a fixed class-stratified subset of k training examples moved to ``x_holdout``/``y_holdout``
    (the rest trains). ConfigError (field holdout) unless k leaves at least half the training split."""
    if not 0 < k <= bundle.n // 2:
        raise ConfigError("holdout", f"an integer in [0, {bundle.n // 2}] (at most half of the {bundle.n:,} "
                                     "training examples)", k)
    out = stratified_subset(bundle.y_train, k, seed=HOLDOUT_SEED)
    keep = torch.ones(bundle.n, dtype=torch.bool)
    keep[out] = False
    return dataclasses.replace(bundle, x_train=bundle.x_train[keep], y_train=bundle.y_train[keep],
                               x_holdout=bundle.x_train[out], y_holdout=bundle.y_train[out])


def load(cfg) -> Bundle:
    """Load the dataset named by ``cfg.dataset`` (an entry of `dpviz.catalog`), cut to ``cfg.train_size``, with
    ``cfg.holdout`` training examples held out."""
    bundle = catalog.dataset(cfg.dataset).load(cfg)
    bundle = subset(bundle, cfg.train_size) if getattr(cfg, "train_size", 0) else bundle
    return hold_out(bundle, cfg.holdout) if getattr(cfg, "holdout", 0) else bundle
