"""The store's hash checks, tested where they live: a run's step file (features, weights), its model and
mask, or a shared tensor, replaced by another valid file of the same kind, is refused on every read path.

The substitutes are well-formed artifacts (another step's or another run's file, another tensor of the same
shape), so nothing but the recorded SHA-256 can tell them apart: with the check skipped, these tests fail.
"""

import shutil

import numpy as np
import pytest
import torch

from dpviz.errors import StoreError
from dpviz.store import Store
from dpviz.store.tensors import SHARED_BYTES

BIG = (128, 256)  # 128 KiB of float32: kept once per store, by its hash (`dpviz.store.tensors`)
assert BIG[0] * BIG[1] * 4 >= SHARED_BYTES


def _state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(BIG, generator=g), "b": torch.randn(8, generator=g)}


def stored(tmp_path):
    """A store with two runs, each with features and weights at steps 1 and 2 (step 2 written as changes on
    step 1), a final model and a mask."""
    store = Store(tmp_path / "cache")
    runs = []
    for seed in (1, 2):
        run = store.create_run(f"{seed:016d}", "{}")
        first, second = _state(seed), _state(seed + 10)
        for step, state in ((1, first), (2, second)):
            store.save_features(run, step, {"layer_0": np.full((4, 3), step + seed, np.float32),
                                            "labels": np.arange(4)})
        store.save_weights(run, 1, first)
        store.save_weights(run, 2, second, base=(1, first))
        store.save_model(run, second, {"strategy": "fft", "seed": seed})
        store.save_mask(run, {"step": 1, "selection": "sparta", "sparsity": 0.2 * seed, "mask": {"w": [seed]}})
        runs.append(run)
    return store, runs


# read path → (the file it reads, and where a same-kind substitute comes from: (run index, file))
READS = {
    "features": (lambda s, r: s.load_features(r, 1), "features/step_000001.npz", (0, "features/step_000002.npz")),
    "weights": (lambda s, r: s.load_weights(r, 1), "weights/step_000001.pt", (1, "weights/step_000001.pt")),
    "weights on their base": (lambda s, r: s.load_weights(r, 2), "weights/step_000001.pt",
                              (1, "weights/step_000001.pt")),
    "changed weights": (lambda s, r: s.load_weights(r, 2), "weights/step_000002.pt", (1, "weights/step_000002.pt")),
    "model": (lambda s, r: s.load_model(r), "model.pt", (1, "model.pt")),
    "mask": (lambda s, r: s.load_mask(r), "mask.json", (1, "mask.json")),
}


@pytest.mark.parametrize("path", list(READS))
def test_a_step_file_swapped_for_another_valid_one_is_refused(tmp_path, path):
    read, name, (other, source) = READS[path]
    store, runs = stored(tmp_path)
    run = runs[0]
    read(store, run)  # intact: read
    shutil.copyfile(store.run_dir(runs[other]) / source, store.run_dir(run) / name)
    with pytest.raises(StoreError, match=f"not the file run {run} wrote there"):
        read(store, run)
    with pytest.raises(StoreError, match="hash differs"):
        read(Store(store.root), run)  # a fresh reader of the same store: the record is in the database


SHARED_READS = {"weights": lambda s, r: s.load_weights(r, 1), "changed weights": lambda s, r: s.load_weights(r, 2),
                "model": lambda s, r: s.load_model(r)}


@pytest.mark.parametrize("path", list(SHARED_READS))
def test_a_shared_tensor_swapped_for_another_tensor_is_refused(tmp_path, path):
    """The large tensors live once in tensors/xx/<sha>.pt: a file there replaced by another tensor's (same
    shape and dtype, a valid tensor file) is refused by every reader that reaches it, naming the runs that
    use it."""
    store, runs = stored(tmp_path)
    run = runs[0]
    read = SHARED_READS[path]
    doc_sha = {p.stem for p in (store.root / "tensors").glob("*/*.pt")}
    read(store, run)
    mine = _shas_of(store, run)
    theirs = sorted(doc_sha - mine)[0]
    for sha in mine:
        target = store.root / "tensors" / sha[:2] / f"{sha}.pt"
        target.unlink()  # a new file (new inode): what this process found intact before is checked again
        shutil.copyfile(store.root / "tensors" / theirs[:2] / f"{theirs}.pt", target)
    with pytest.raises(StoreError, match=f"does not match its hash.*{run}"):
        read(store, run)
    with pytest.raises(StoreError, match="does not match its hash"):
        read(Store(store.root), run)


def _shas_of(store, run) -> set[str]:
    with store._conn() as c:
        return {r[0] for r in c.execute("SELECT sha FROM tensor_refs WHERE run_id=?", (run,))}
