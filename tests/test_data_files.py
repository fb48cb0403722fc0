"""Loaders of real datasets, fed tiny files written in each dataset's real on-disk format.

Every image carries a marker pixel at an asymmetric (row, col) whose value
encodes its label, so a transposed or mis-ordered read shows up as a wrong value.
"""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest
import torch
from PIL import Image

from dpviz.config import RunConfig
from dpviz.data import load, to_unit_range
from dpviz.errors import ConfigError

N_TRAIN, N_TEST = 20, 10
ROW, COL = 3, 17  # marker position: row != col catches row/column-major mix-ups


def _images(n: int, c: int, s: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 (n, c, s, s) with full-range noise and a marker = 100 + 10·label + channel."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, c, s, s), dtype=np.uint8)
    x[0, 0, 0, 0], x[0, 0, 0, 1] = 0, 255
    y = np.arange(n) % 10
    for i in range(n):
        for ch in range(c):
            x[i, ch, ROW, COL] = 100 + 10 * y[i] + ch
            x[i, ch, COL, ROW] = 7  # the transposed position holds something else
    return x, y


def _cfg(name: str, path) -> RunConfig:
    return RunConfig(dataset=name, data_dir=str(path))


def _check(b, name: str, c: int, s: int, train, test, k: int = 10) -> None:
    assert b.name == name and b.num_classes == k
    for x, y, (xr, yr) in ((b.x_train, b.y_train, train), (b.x_test, b.y_test, test)):
        assert x.shape == (len(yr), c, s, s) and x.dtype == torch.float32 and x.is_contiguous()
        assert y.dtype == torch.int64 and y.tolist() == list(yr)
        assert x.min() >= -1 and x.max() <= 1
        assert torch.equal(x, to_unit_range(torch.from_numpy(xr), 255.0))
        for i in range(len(yr)):
            for ch in range(c):
                assert round((x[i, ch, ROW, COL].item() + 1) / 2 * 255) == 100 + 10 * yr[i] + ch
                assert round((x[i, ch, COL, ROW].item() + 1) / 2 * 255) == 7
    assert b.x_train.min() == -1 and b.x_train.max() == 1


def _one_line_error(cfg, *needles: str) -> str:
    with pytest.raises(ConfigError) as e:
        load(cfg)
    msg = str(e.value)
    assert e.value.field == "data_dir" and msg.startswith("data_dir: ") and "\n" not in msg
    for n in needles:
        assert n in msg
    return msg


# ---- MNIST / Fashion-MNIST: big-endian idx files ------------------------------------------

def _write_mnist(root, folder: str):
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    splits = {"train": _images(N_TRAIN, 1, 28, 1), "t10k": _images(N_TEST, 1, 28, 2)}
    for s, (x, y) in splits.items():
        (raw / f"{s}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x803, len(x), 28, 28) + x.tobytes())
        (raw / f"{s}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, len(y)) + y.astype(np.uint8).tobytes())
    return splits["train"], splits["t10k"], raw


@pytest.mark.parametrize("name,folder", [("mnist", "MNIST"), ("fashion-mnist", "FashionMNIST")])
def test_mnist_formats(tmp_path, name, folder):
    train, test, _ = _write_mnist(tmp_path, folder)
    _check(load(_cfg(name, tmp_path)), name, 1, 28, train, test)


def test_mnist_truncated_and_gz(tmp_path):
    _, _, raw = _write_mnist(tmp_path, "MNIST")
    f = raw / "train-images-idx3-ubyte"
    f.write_bytes(f.read_bytes()[:-100])
    _one_line_error(_cfg("mnist", tmp_path), "cannot read", str(f))
    f.rename(raw / "train-images-idx3-ubyte.gz")  # torchvision reads only uncompressed idx files
    _one_line_error(_cfg("mnist", tmp_path), "no MNIST file", str(f), "gunzip")


# ---- CIFAR-10: pickled dicts, rows of 3072 = R, G, B planes, each row-major ---------------

def _py2_style(blob: bytes) -> bytes:
    """Make a protocol-2 pickle look like the authors' Python 2 files (str keys, numpy.core)."""
    for key in (b"data", b"labels", b"batch_label"):
        blob = blob.replace(b"X" + struct.pack("<I", len(key)) + key, b"U" + bytes([len(key)]) + key)
    return blob.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def _write_cifar(root, *, py2: bool = False):
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    train, test = _images(N_TRAIN, 3, 32, 3), _images(N_TEST, 3, 32, 4)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for j, name in enumerate(names):
        x, y = (test if j == 5 else tuple(a[4 * j: 4 * j + 4] for a in train))
        if py2:
            batch = {"batch_label": name, "data": x.reshape(len(x), -1), "labels": [int(v) for v in y]}
            (d / name).write_bytes(_py2_style(pickle.dumps(batch, protocol=2)))
        else:
            batch = {b"batch_label": name.encode(), b"data": x.reshape(len(x), -1), b"labels": [int(v) for v in y]}
            (d / name).write_bytes(pickle.dumps(batch))
    (d / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"c%d" % i for i in range(10)]}))
    return train, test, d


@pytest.mark.parametrize("py2", [False, True])
def test_cifar10_format(tmp_path, py2):
    train, test, _ = _write_cifar(tmp_path, py2=py2)
    _check(load(_cfg("cifar10", tmp_path)), "cifar10", 3, 32, train, test)


def test_cifar10_corrupt_missing_and_unsafe(tmp_path):
    _, _, d = _write_cifar(tmp_path)
    f = d / "data_batch_3"
    f.write_bytes(f.read_bytes()[:500])
    _one_line_error(_cfg("cifar10", tmp_path), "cannot read", str(f), "CIFAR-10")
    f.write_bytes(pickle.dumps({b"data": np.zeros((2, 1024), np.uint8), b"labels": [0, 1]}))
    _one_line_error(_cfg("cifar10", tmp_path), str(f), "(N, 3072)")
    f.write_bytes(pickle.dumps(print))  # a pickle that would run code is refused
    _one_line_error(_cfg("cifar10", tmp_path), str(f), "refusing")
    (d / "test_batch").unlink()
    _one_line_error(_cfg("cifar10", tmp_path), "no CIFAR-10 file", str(d / "test_batch"), "nothing is downloaded")


# ---- STL-10: uint8 .bin, each channel column-major; labels 1..10 -------------------------

def _write_stl(root):
    d = root / "stl10_binary"
    d.mkdir(parents=True)
    splits = {"train": _images(N_TRAIN, 3, 96, 5), "test": _images(N_TEST, 3, 96, 6)}
    for s, (x, y) in splits.items():
        (d / f"{s}_X.bin").write_bytes(np.ascontiguousarray(x.transpose(0, 1, 3, 2)).tobytes())
        (d / f"{s}_y.bin").write_bytes((y + 1).astype(np.uint8).tobytes())
    return splits["train"], splits["test"], d


def test_stl10_format_and_errors(tmp_path):
    train, test, d = _write_stl(tmp_path)
    _check(load(_cfg("stl10", tmp_path)), "stl10", 3, 96, train, test)
    f = d / "test_X.bin"
    f.write_bytes(f.read_bytes()[:-1])
    _one_line_error(_cfg("stl10", tmp_path), "cannot read", str(f), "3×96×96")
    (d / "train_y.bin").write_bytes(bytes([0] * N_TRAIN))  # label 0 does not exist on disk
    _one_line_error(_cfg("stl10", tmp_path), str(d / "train_y.bin"), "labels outside 0..9")


# ---- folder of images ---------------------------------------------------------------------

def _write_png(path, label: int, j: int) -> int:
    """A 32×32 RGB PNG whose red marker encodes (label, j); returns the marker value."""
    a = np.full((32, 32, 3), 50, np.uint8)
    a[ROW, COL, 0] = v = 100 + 50 * label + j
    a[COL, ROW, 0] = 7
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(a).save(path)
    return v


def _marker(x: torch.Tensor) -> int:
    return round((x[0, ROW, COL].item() + 1) / 2 * 255)


def test_folder_flat_layout_split(tmp_path):
    for label, cls in enumerate(["cat", "dog"]):
        for j in range(5):
            _write_png(tmp_path / cls / f"{j}.png", label, j)
    (tmp_path / "dog" / "notes.txt").write_text("not an image")
    Image.new("L", (40, 50), 200).save(tmp_path / "cat" / "big.jpg")  # grey, other size: converted
    b = load(_cfg("folder", tmp_path))
    assert b.name == "folder" and b.num_classes == 2 and b.x_train.shape[1:] == (3, 32, 32)
    assert (len(b.y_train), len(b.y_test)) == (8, 3) and sorted(b.y_test.tolist()) == [0, 0, 1]
    assert b.skipped == 1  # notes.txt, left out and counted
    assert b.x_train.dtype == torch.float32 and b.y_train.dtype == torch.int64
    for x, y in zip(torch.cat([b.x_train, b.x_test]), torch.cat([b.y_train, b.y_test])):
        m = _marker(x)
        if m == 200:  # the grey JPEG
            assert y == 0 and torch.all(x[:, 0, 0] == x[0, 0, 0])
        else:
            assert (m - 100) // 50 == y and round((x[0, COL, ROW].item() + 1) / 2 * 255) == 7
    assert torch.equal(load(_cfg("folder", tmp_path)).y_test, b.y_test)  # split is deterministic


def test_a_runs_summary_counts_the_entries_its_folder_left_out(fast_cfg, cache_dir):
    from dataclasses import replace

    from dpviz.training import loop, prepare

    prep = prepare.prepare(fast_cfg(strategy="lp", lr_lp=0.5, epochs=1).fixed_rates(), cache_dir=cache_dir)
    assert "skipped_files" not in loop.train(prep, store=None, run_id="folder")
    prep.bundle = replace(prep.bundle, skipped=2)  # as an image folder with a README and a .DS_Store
    assert loop.train(prep, store=None, run_id="folder")["skipped_files"] == 2


def test_folder_train_test_layout(tmp_path):
    for label, cls in enumerate(["a", "b", "c"]):
        for j in range(2):
            _write_png(tmp_path / "train" / cls / f"{j}.png", label, j)
    _write_png(tmp_path / "test" / "c" / "x.png", 2, 9)
    _write_png(tmp_path / "test" / "a" / "y.PNG", 0, 8)
    b = load(_cfg("folder", tmp_path))
    assert b.num_classes == 3 and b.y_train.tolist() == [0, 0, 1, 1, 2, 2] and b.y_test.tolist() == [0, 2]
    assert [_marker(x) for x in b.x_test] == [108, 209]
    assert b.x_test[0, 1, 0, 0].item() == to_unit_range(torch.tensor(50.0), 255.0).item()
    _write_png(tmp_path / "test" / "zebra" / "z.png", 0, 0)
    _one_line_error(_cfg("folder", tmp_path), "classes not in", "zebra")


def test_folder_errors(tmp_path):
    _one_line_error(_cfg("folder", tmp_path), "no class folders", str(tmp_path))
    for label, cls in enumerate(["a", "b"]):
        for j in range(5):
            _write_png(tmp_path / cls / f"{j}.png", label, j)
    bad = tmp_path / "b" / "2.png"
    bad.write_bytes(bad.read_bytes()[:40])
    _one_line_error(_cfg("folder", tmp_path), "cannot read", str(bad))
    (tmp_path / "train").mkdir()
    _one_line_error(_cfg("folder", tmp_path), "only one of train/ and test/")


# ---- missing data ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "cifar10", "stl10", "folder"])
def test_missing_or_empty_data_dir(tmp_path, name):
    msg = _one_line_error(_cfg(name, tmp_path / "nope"), str(tmp_path / "nope"), "not a folder")
    assert "nothing is downloaded" in msg
    if name != "folder":
        _one_line_error(_cfg(name, tmp_path), "nothing is downloaded", str(tmp_path))
    if name == "fashion-mnist":  # without a data folder: Debian's files (tests/test_text_data.py reads them)
        assert RunConfig(dataset=name).data_dir is None
        return
    with pytest.raises(ConfigError) as e:
        RunConfig(dataset=name)
    assert e.value.field == "data_dir"
