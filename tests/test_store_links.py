"""Links planted in a store (anyone who can write a shared cache folder can plant them) are never
followed: each test plants links at the paths dpviz creates or locks, runs the real operation, and
checks that the victim outside the store is byte-identical and that nothing appeared at a link's target.
"""

import os

import numpy as np
import pytest
import torch

from dpviz import cli
from dpviz.training import idle
from dpviz.errors import StoreError
from dpviz.models import pretrain
from dpviz.store import Store

SECRET = b"the victim's own bytes\n"


@pytest.fixture
def victim(tmp_path):
    """A file outside the store, and a path outside it where nothing must appear."""
    v = tmp_path / "victim"
    v.write_bytes(SECRET)
    return v, tmp_path / "nowhere"


def untouched(victim):
    v, nowhere = victim
    assert v.read_bytes() == SECRET and not v.is_symlink()
    assert not os.path.lexists(nowhere)


@pytest.mark.parametrize("target", ["victim", "nowhere"])
def test_a_linked_store_lock_is_refused_naming_it(tmp_path, victim, target, capsys):
    root = tmp_path / "store"
    root.mkdir()
    os.symlink(victim[0] if target == "victim" else victim[1], root / ".store.lock")
    assert cli.main(["--cache-dir", str(root), "list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ".store.lock" in err[0] and "a link: remove it" in err[0], err
    untouched(victim)
    assert os.listdir(root) == [".store.lock"]  # no database was created beside the refused lock


def test_a_linked_database_and_training_lock_are_refused(tmp_path, victim):
    root = tmp_path / "store"
    Store(root)
    os.symlink(victim[0], root / "training.lock")
    with pytest.raises(StoreError, match="training.lock is a link: remove it"):
        with idle.training(root):
            pass
    with pytest.raises(StoreError, match="training.lock is a link"):
        idle.wait_until_idle(root)
    for name in ("runs.sqlite-wal", "runs.sqlite"):
        os.symlink(victim[1], root / f"{name}.planted")
        os.replace(root / f"{name}.planted", root / name)
        with pytest.raises(StoreError, match=f"{name} is a link: remove it"):
            Store(root)
    untouched(victim)


def test_artifacts_replace_a_planted_link_and_refuse_a_linked_folder(tmp_path, victim):
    s = Store(tmp_path / "store")
    rid = s.create_run("f" * 16, "{}")
    feats = s.run_dir(rid) / "features"
    feats.mkdir(parents=True)
    arrays = {"layer_0": np.ones((2, 3), np.float32), "labels": np.array([0, 1])}
    os.symlink(victim[0], feats / "step_000000.npz")  # at the very name: replaced, never written through
    os.symlink(victim[1], s.run_dir(rid) / "mask.json")
    s.save_features(rid, 0, arrays)
    s.save_mask(rid, {"mask": {}})
    assert not (feats / "step_000000.npz").is_symlink() and s.load_features(rid, 0)["labels"].tolist() == [0, 1]
    assert s.load_mask(rid) == {"mask": {}}
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, s.run_dir(rid) / "weights")  # a folder elsewhere planted where weights go
    with pytest.raises(StoreError, match="weights is a link: remove it"):
        s.save_weights(rid, 0, {"w": torch.ones(2)})
    assert os.listdir(outside) == [] and not list(s.run_dir(rid).rglob("*.tmp"))
    untouched(victim)


def test_a_damaged_cached_backbone_is_pretrained_again_through_none_of_the_planted_links(tmp_path, victim, capsys):
    """Random bytes in the store's copy: pretrained again (no shipped copy at 8×8), with one warning line;
    the links planted at the lock and at every temporary name the old code used are not followed."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 8×8 convolutions: two OpenMP threads on two busy cores spin (3 s became 50 s)
    try:
        _pretrain_through_planted_links(tmp_path, victim, capsys)
    finally:
        torch.set_num_threads(threads)


def _pretrain_through_planted_links(tmp_path, victim, capsys):
    folder = tmp_path / "store" / "backbones"
    folder.mkdir(parents=True)
    key = pretrain.cache_key("cnn", 1, 8)
    assert not (pretrain.SHIPPED / f"{key}.pt").exists()
    (folder / f"{key}.pt").write_bytes(os.urandom(4000))
    os.symlink(victim[0], folder / ".lock")
    with pytest.raises(StoreError, match=r"\.lock is a link: remove it"):
        pretrain.pretrained_backbone("cnn", channels=1, size=8, cache_dir=tmp_path / "store")
    (folder / ".lock").unlink()
    for pid in range(os.getpid(), os.getpid() + 2000):  # the old tmp names: <key>.tmp<pid>
        os.symlink(victim[0] if pid % 2 else victim[1], folder / f"{key}.tmp{pid}")
    capsys.readouterr()
    backbone = pretrain.pretrained_backbone("cnn", channels=1, size=8, cache_dir=tmp_path / "store")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged" in err[0] and "pretraining it again" in err[0] and key in err[0], err
    saved = torch.load(folder / f"{key}.pt", weights_only=True)["state_dict"]
    assert not (folder / f"{key}.pt").is_symlink() and all(torch.equal(backbone.state_dict()[k], v)
                                                           for k, v in saved.items())
    assert (folder / ".lock").stat().st_size == 0
    untouched(victim)
    again = pretrain.pretrained_backbone("cnn", channels=1, size=8, cache_dir=tmp_path / "store")  # now cached
    assert capsys.readouterr().err == "" and all(torch.equal(again.state_dict()[k], v) for k, v in saved.items())


def test_a_linked_optuna_journal_is_refused_naming_it(tmp_path, victim, capsys):
    """Optuna appends to its journal through a link: a sweep refuses the link instead of writing the victim."""
    root = tmp_path / "store"
    Store(root)
    os.symlink(victim[0], root / "optuna.journal")
    code = cli.main(["--cache-dir", str(root), "sweep", "budget", "--epsilon", "1", "--fractions", "0.5",
                     "--epochs", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "optuna.journal is a link: remove it" in err[0], err
    untouched(victim)
