"""Real image datasets, read from local files in the format their authors distribute.

Nothing is downloaded: ``cfg.data_dir`` (or an installed package's folder) must already hold the files.

    mnist          <data_dir>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte
    fashion-mnist  <data_dir>/FashionMNIST/raw/ (or <data_dir>/) with the same four names, each may be
                   .gz; without a data_dir, Debian's /usr/share/datasets/fashion-mnist/*.gz
    cifar10        <data_dir>/cifar-10-batches-py/{data_batch_1..5,test_batch}
    stl10          <data_dir>/stl10_binary/{train,test}_{X,y}.bin (labelled splits only)
    folder         <data_dir>/{train,test}/<class>/*.png|jpg|..., or <data_dir>/<class>/*
                   split 80/20 by class (fixed seed); images become RGB 32×32

A missing, empty or unreadable file raises a one-line `ConfigError` on
``data_dir`` that names the file, never a traceback from inside a parser. A folder of images has at
most `MAX_CLASSES` (1,000) classes, and each image at most `MAX_IMAGE_PIXELS` (2^26 ≈ 67 million
pixels, e.g. 8192 × 8192; checked from its header, before it is decoded): a larger one, such as a
small file declaring a huge size (a decompression bomb), is refused naming it.
"""

from __future__ import annotations

import gzip
import pickle
import struct
import warnings
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from dpviz import catalog
from dpviz.errors import ConfigError
from dpviz.data import Bundle, check_class_count, to_unit_range

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
FOLDER_SIZE = 32
# Below PIL's own limit (Image.MAX_IMAGE_PIXELS, ≈ 89.5 million: a warning, and an error at twice it), so
# an image is refused by this one rule, in one line, before it is decoded; above most cameras' photos.
MAX_IMAGE_PIXELS = 2**26
_PARSE_ERRORS = (OSError, ValueError, TypeError, RuntimeError, AssertionError, EOFError,
                 KeyError, IndexError, AttributeError, pickle.UnpicklingError)


@contextmanager
def _reading(path: Path, what: str):
    """Turn any parse failure inside the block into a one-line error naming `path`."""
    try:
        yield
    except ConfigError:
        raise
    except _PARSE_ERRORS as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        if path.is_file() and path.stat().st_size == 0:
            reason = "the file is empty"
        raise ConfigError("data_dir", f"cannot read {path} as {what} ({reason})") from None


def _require(title: str, root: Path, paths: list[Path]) -> None:
    """Raise unless `root` is a folder and every file in `paths` exists."""
    names = f"{', '.join(p.name for p in paths)} in {paths[0].parent}"
    if not root.is_dir():
        raise ConfigError("data_dir", f"{root} is not a folder (expected {title} files {names}, "
                                      "as distributed by its authors; nothing is downloaded)")
    for p in paths:
        if not p.is_file():
            gz = Path(f"{p}.gz")
            hint = f"; found {gz.name}: decompress it with gunzip" if gz.is_file() else ""
            raise ConfigError("data_dir", f"no {title} file {p} (expected {names}, "
                                          f"as distributed by its authors{hint}; nothing is downloaded)")


def _check_labels(n: int, y: np.ndarray, k: int) -> None:
    """Raise ValueError (wrapped by `_reading`) unless there are n labels in [0, k)."""
    if len(y) != n:
        raise ValueError(f"{n} images but {len(y)} labels")
    if len(y) and (y.min() < 0 or y.max() >= k):
        raise ValueError(f"labels outside 0..{k - 1}")


def _bundle(name: str, train, test, k: int) -> Bundle:
    """Build a Bundle from uint8 (N, C, H, W) arrays/tensors and integer labels."""
    def x(a):
        return to_unit_range(torch.as_tensor(np.ascontiguousarray(a)), 255.0).contiguous()

    def y(a):
        return torch.as_tensor(np.asarray(a), dtype=torch.int64)
    return Bundle(name, x(train[0]), y(train[1]), x(test[0]), y(test[1]), k)


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    """An idx file of unsigned bytes (gzipped when its name ends in .gz) as a uint8 array of ``ndim`` dims."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    if len(data) < 4 + 4 * ndim or data[:3] != b"\0\0\x08" or data[3] != ndim:
        raise ValueError(f"not an idx file of {ndim}-dimensional unsigned bytes (header {data[:4].hex()})")
    dims = struct.unpack(f">{ndim}I", data[4: 4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ValueError(f"{body.size} bytes after the header, expected {int(np.prod(dims))} for {dims}")
    return body.reshape(dims).copy()  # writable (torch refuses to share a read-only buffer)


def _idx_files(raw: Path, title: str, root: Path, gz: bool) -> list[Path]:
    """The four idx files in ``raw`` (train images, train labels, test images, test labels), each
    uncompressed or, where ``gz``, gzipped; `_require` raises for a missing one."""
    stems = [f"{s}-{kind}" for s in ("train", "t10k") for kind in ("images-idx3-ubyte", "labels-idx1-ubyte")]
    paths = [raw / s for s in stems]
    if gz:
        paths = [p if p.is_file() or not Path(f"{p}.gz").is_file() else Path(f"{p}.gz") for p in paths]
    _require(title, root, paths)
    return paths


def _mnist(name: str, title: str, raw: Path, root: Path, *, gz: bool = False,
           classes: tuple[str, ...] | None = None) -> Bundle:
    """MNIST-style idx files in ``raw`` (``root``: the folder given, for errors)."""
    paths = _idx_files(raw, title, root, gz)
    splits = []
    for xp, yp in (paths[:2], paths[2:]):
        with _reading(xp, f"an idx image file of {title}"):
            x = _read_idx(xp, 3)  # (N, 28, 28) uint8
            if tuple(x.shape[1:]) != (28, 28):
                raise ValueError(f"images of {tuple(x.shape[1:])} pixels, expected 28×28")
        with _reading(yp, f"an idx label file of {title}"):
            y = _read_idx(yp, 1)
            _check_labels(len(x), y, 10)
        splits.append((x[:, None], y))  # (N, 1, 28, 28)
    b = _bundle(name, splits[0], splits[1], 10)
    b.classes = classes
    return b


def load_mnist(cfg) -> Bundle:
    root = Path(cfg.data_dir)
    return _mnist("mnist", "MNIST", root / "MNIST" / "raw", root)


FASHION_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot")


def load_fashion_mnist(cfg) -> Bundle:
    """Fashion-MNIST from ``cfg.data_dir`` (its FashionMNIST/raw/, or the files right in it), else from
    the catalogue's default folder (Debian's dataset-fashion-mnist: gzipped idx files)."""
    if cfg is not None and cfg.data_dir:
        root = Path(cfg.data_dir)
        nested = root / "FashionMNIST" / "raw"
        flat = any(root.glob("train-images-idx3-ubyte*")) and not nested.is_dir()
        raw, title = (root if flat else nested), "Fashion-MNIST"
    else:
        root = raw = Path(catalog.dataset("fashion-mnist").default_dir)
        title = "Fashion-MNIST (Debian's dataset-fashion-mnist: apt install it, or give data_dir)"
    return _mnist("fashion-mnist", title, raw, root, gz=True, classes=FASHION_CLASSES)


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickle only plain containers and numpy arrays: a data folder must not run code."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module, name):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 batch: uint8 (N, 3, 32, 32) and labels (N,)."""
    with _reading(path, "a CIFAR-10 python batch"), open(path, "rb") as f:
        # The authors' files are Python 2 pickles: latin1 turns their str keys and
        # the array's raw bytes back into str/bytes unchanged. Keys written by
        # Python 3 (b"data") are accepted too.
        d = _ArrayUnpickler(f, encoding="latin1").load()
        d = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in d.items()}
        x = np.asarray(d["data"], dtype=np.uint8)
        if x.ndim != 2 or x.shape[1] != 3 * 32 * 32:
            raise ValueError(f"data of shape {x.shape}, expected (N, 3072)")
        y = np.asarray(d["labels"], dtype=np.int64)
        _check_labels(len(x), y, 10)
    # Each row holds the red 32×32 plane, then green, then blue, each row-major.
    return x.reshape(-1, 3, 32, 32), y


def load_cifar10(cfg) -> Bundle:
    root = Path(cfg.data_dir)
    d = root / "cifar-10-batches-py"
    paths = [d / f"data_batch_{i}" for i in range(1, 6)] + [d / "test_batch"]
    _require("CIFAR-10", root, paths)
    batches = [_cifar_batch(p) for p in paths]
    train = tuple(np.concatenate(a) for a in zip(*batches[:5]))
    return _bundle("cifar10", train, batches[5], 10)


def _stl_split(d: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """One labelled STL-10 split: uint8 (N, 3, 96, 96) and labels 0..9."""
    xp, yp = d / f"{split}_X.bin", d / f"{split}_y.bin"
    with _reading(xp, "an STL-10 image file"):
        raw = np.fromfile(xp, dtype=np.uint8)
        if raw.size == 0 or raw.size % (3 * 96 * 96):
            raise ValueError(f"{raw.size} bytes is not a whole number of 3×96×96 images")
        # Stored channel by channel, each channel column-major (MATLAB order):
        # (N, 3, W, H) on disk -> (N, 3, H, W), as torchvision reads it.
        x = raw.reshape(-1, 3, 96, 96).transpose(0, 1, 3, 2)
    with _reading(yp, "an STL-10 label file"):
        y = np.fromfile(yp, dtype=np.uint8).astype(np.int64) - 1  # 1..10 on disk
        _check_labels(len(x), y, 10)
    return x, y


def load_stl10(cfg) -> Bundle:
    root = Path(cfg.data_dir)
    d = root / "stl10_binary"
    _require("STL-10", root, [d / f"{s}_{v}.bin" for s in ("train", "test") for v in ("X", "y")])
    return _bundle("stl10", _stl_split(d, "train"), _stl_split(d, "test"), 10)


def _class_dirs(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))


def _list_images(d: Path, classes: list[str], index: dict[str, int]) -> tuple[list[Path], list[int], int]:
    """Image paths under d/<class>/ (sorted), their labels, and how many entries were left out: files of other
    kinds (a README, a .DS_Store), counted in the run's summary. An entry named like an image that is not a
    file (a folder "0.png", a FIFO) is refused, as a text folder refuses one named like a text."""
    paths, labels, skipped = [], [], 0
    for c in classes:
        for p in sorted((d / c).iterdir()):
            if p.suffix.lower() in IMAGE_SUFFIXES and not p.is_file():
                raise ConfigError("data_dir", f"{p} is named like an image but is not a file (a folder, a link to "
                                  "none, or a special file): move it away")
            if p.suffix.lower() in IMAGE_SUFFIXES:
                paths.append(p)
                labels.append(index[c])
            else:
                skipped += 1
    return paths, labels, skipped


def _open_image(p: Path) -> Image.Image:
    """The image ``p``, opened (header read, nothing decoded) and refused beyond `MAX_IMAGE_PIXELS`."""
    too_big = f"at most {MAX_IMAGE_PIXELS:,} pixels an image"
    with warnings.catch_warnings():  # PIL warns past its own limit: this rule's error says it instead
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(p)
        except Image.DecompressionBombError:  # past twice PIL's limit: refused by PIL before ours
            raise ConfigError("data_dir", f"{p} declares more pixels than PIL opens ({too_big})") from None
    if im.width * im.height > MAX_IMAGE_PIXELS:
        im.close()
        raise ConfigError("data_dir", f"{p} is {im.width:,} × {im.height:,} pixels ({too_big})")
    return im


def _read_images(paths: list[Path]) -> np.ndarray:
    """Decode images as RGB, resize to FOLDER_SIZE², return uint8 (N, 3, S, S)."""
    out = []
    for p in paths:
        with _reading(p, "an image"), _open_image(p) as im:
            im = im.convert("RGB").resize((FOLDER_SIZE, FOLDER_SIZE), Image.BILINEAR)
            out.append(np.asarray(im))  # (S, S, 3)
    return np.stack(out).transpose(0, 3, 1, 2)


def load_folder(cfg) -> Bundle:
    root = Path(cfg.data_dir)
    expected = (f"expected {root}/<class>/*.png|jpg|... or {root}/train/<class>/* "
                f"and {root}/test/<class>/*, at least two classes; nothing is downloaded")
    if not root.is_dir():
        raise ConfigError("data_dir", f"{root} is not a folder ({expected})")
    tr, te = root / "train", root / "test"
    split = tr.is_dir() or te.is_dir()
    if split and not (tr.is_dir() and te.is_dir()):
        raise ConfigError("data_dir", f"{root} has only one of train/ and test/ ({expected})")
    classes = _class_dirs(tr if split else root)
    index = {c: i for i, c in enumerate(classes)}
    paths, labels, skipped = _list_images(tr if split else root, classes, index)
    if len(classes) < 2 or not paths:
        raise ConfigError("data_dir", f"no class folders with images under {root} ({expected})")
    check_class_count(len(classes), tr if split else root)
    if split:
        extra = sorted(set(_class_dirs(te)) - set(classes))
        if extra:
            raise ConfigError("data_dir", f"{te} has classes not in {tr}: {', '.join(extra)}")
        te_paths, te_labels, te_skipped = _list_images(te, _class_dirs(te), index)
        if not te_paths:
            raise ConfigError("data_dir", f"no images under {te}/<class>/ ({expected})")
        train, test = (_read_images(paths), labels), (_read_images(te_paths), te_labels)
        return replace(_bundle("folder", train, test, len(classes)), skipped=skipped + te_skipped)
    try:  # fixed stratified 80/20 split, independent of the run's seed
        from sklearn.model_selection import train_test_split  # lazy: slow to import

        i_tr, i_te = train_test_split(np.arange(len(paths)), test_size=0.2, stratify=labels, random_state=0)
    except ValueError as e:
        raise ConfigError("data_dir", f"cannot split {root} 80/20 by class; each class needs at least "
                                      f"2 images and the test part one per class ({str(e).splitlines()[0]})") from None
    x, y = _read_images(paths), np.asarray(labels)
    return replace(_bundle("folder", (x[i_tr], y[i_tr]), (x[i_te], y[i_te]), len(classes)), skipped=skipped)
