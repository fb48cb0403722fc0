"""The embedded default task, its public pretraining data, and the theory data."""

from pathlib import Path

import pytest
import torch

from dpviz.config import RunConfig
from dpviz.data import load
from dpviz.data.digits import load_digits
from dpviz.data.public import NUM_CLASSES, random_process_images
from dpviz.data.synthetic import load_synthetic
from dpviz.models import pretrain


def test_digits_split_is_fixed_stratified_and_scaled():
    b = load(RunConfig())
    assert (b.n, len(b.y_test), b.num_classes) == (1437, 360, 10)
    assert b.x_train.shape[1:] == (1, 16, 16) and b.x_train.dtype == torch.float32
    assert -1.0 <= b.x_train.min() and b.x_train.max() <= 1.0
    assert torch.equal(load_digits().y_test, b.y_test)  # independent of the run
    counts = torch.bincount(b.y_test, minlength=10)
    assert counts.min() >= 35  # stratified: every class in the test split
    # train and test hold different images
    d = torch.cdist(b.x_test.flatten(1), b.x_train.flatten(1))
    assert d.min() > 0


def test_digits_are_scikit_learns_images_and_split_read_without_importing_it():
    """The stored split and the direct file read give exactly what scikit-learn's loader and split give."""
    from sklearn.datasets import load_digits as sk_load
    from sklearn.model_selection import train_test_split

    import dpviz.data.digits as digits

    d = sk_load()
    images, target = digits._sk_arrays()
    assert (images == d.images).all() and (target == d.target).all()
    tr, te = train_test_split(range(len(d.target)), test_size=0.2, stratify=d.target, random_state=0)
    _, _, mtr, mte = digits._arrays()
    assert mtr.tolist() == tr and mte.tolist() == te


def test_public_data_is_generated_disjoint_and_deterministic():
    x, y = random_process_images(3000, seed=3)
    x2, y2 = random_process_images(3000, seed=3)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert set(y.tolist()) == set(range(NUM_CLASSES))
    b = load_digits()
    priv = torch.cat([b.x_train, b.x_test]).flatten(1)
    # No public image is (close to) a private one: the nearest private neighbour of every
    # public image is much farther than private images are from each other.
    d_pub = torch.cdist(x.flatten(1), priv).min(1).values
    d_priv = torch.cdist(priv[:500], priv[500:]).min(1).values
    assert d_pub.min() > 0
    assert d_pub.median() > 1.5 * d_priv.median()


def test_pretraining_never_sees_private_data(monkeypatch):
    """Pretraining draws only from the public generator."""
    seen = []
    real = pretrain.random_process_images
    monkeypatch.setattr(pretrain, "random_process_images", lambda *a, **k: seen.append(k) or real(*a, **k))
    monkeypatch.setitem(pretrain.PRETRAIN, "n", 256)
    monkeypatch.setitem(pretrain.PRETRAIN, "epochs", 1)
    import dpviz.data.digits as digits
    monkeypatch.setattr(digits, "_sk_arrays", lambda: (_ for _ in ()).throw(AssertionError("private data read")))
    digits._arrays.cache_clear()
    try:
        backbone, acc = pretrain.pretrain("cnn", channels=1, size=16)
    finally:
        digits._arrays.cache_clear()
    assert seen and 0 <= acc <= 1


@pytest.mark.slow
def test_the_shipped_backbone_is_what_the_recipe_makes_and_a_fresh_store_uses_it(tmp_path):
    key = pretrain.cache_key("cnn", 1, 16)
    shipped = torch.load(pretrain.SHIPPED / f"{key}.pt", weights_only=True)
    backbone = pretrain.pretrained_backbone("cnn", channels=1, size=16, cache_dir=tmp_path)
    assert all(torch.equal(backbone.state_dict()[k], v) for k, v in shipped["state_dict"].items())
    assert not (tmp_path / "backbones" / f"{key}.pt").exists()  # loaded from the package, nothing trained
    fresh, acc = pretrain.pretrain("cnn", channels=1, size=16)  # the full recipe, from scratch
    assert abs(acc - shipped["public_accuracy"]) < 0.01 and acc > 0.9


def test_synthetic_is_linearly_separable_with_margin():
    b = load_synthetic()
    assert b.num_classes == 2 and b.x_train.shape[1:] == (1, 16, 16)
    x = torch.cat([b.x_train, b.x_test]).flatten(1).double()
    y = torch.cat([b.y_train, b.y_test]).double() * 2 - 1
    # least squares on ±1 labels finds a separating direction on the (scaled, clipped) data
    w = torch.linalg.lstsq(torch.cat([x, torch.ones(len(x), 1)], 1), y[:, None]).solution
    pred = torch.sign(torch.cat([x, torch.ones(len(x), 1)], 1) @ w).squeeze()
    assert (pred == y).double().mean() > 0.97


@pytest.mark.slow
@pytest.mark.real  # the tasks' table reaches real-vision's EfficientNet-Lite0 weights
def test_the_static_task_table_is_what_loading_gives(tmp_path, monkeypatch):
    """The catalogue sizes previews and early accounting without torch: every fixed shape and block count
    must be what loading the dataset and building the backbone give (a drift would calibrate σ for the
    wrong n)."""
    monkeypatch.setenv("DPVIZ_CACHE_DIR", str(tmp_path))  # text datasets cache their token ids there
    from dpviz import catalog
    from dpviz.training.calibration import loaded_shape

    for dataset, d in [(n, d) for n, d in catalog.DATASETS.items() if d.shape]:
        if d.default_dir and not Path(d.default_dir).is_dir():
            continue  # an installed data package missing here (tests/test_text_data.py says so)
        for backbone in [n for n, b in catalog.BACKBONES.items() if b.blocks and b.modality == d.modality]:
            cfg = RunConfig(dataset=dataset, backbone=backbone)
            shape, blocks = loaded_shape(cfg)
            if d.modality == "text":  # token ids: no image side (the loaded "size" is max_length)
                shape = shape._replace(size=0)
            assert catalog.static_shape(cfg) == (shape, blocks), (dataset, backbone)
    assert catalog.static_shape(RunConfig(dataset="mnist", data_dir="/x")) is None  # files: sized by loading
