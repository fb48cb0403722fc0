"""Large tensors are kept once per store (`dpviz.store.tensors`): shared between runs and checkpoints, put
back exactly, and deleted with the last run that uses them."""

import pytest
import torch

from dpviz.errors import StoreError
from dpviz.store import Store

BIG = (160, 160)  # 100 KiB in float32: above SHARED_BYTES


def _states(seed: int) -> tuple[dict, dict]:
    """A run's first and final state: a frozen "pretrained" matrix common to every run, a trained one of
    its own that moves, and a small bias (kept inline)."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.arange(BIG[0] * BIG[1], dtype=torch.float32).reshape(BIG)
    w0 = torch.randn(BIG, generator=g)
    first = {"emb": emb, "w": w0, "b": torch.zeros(3)}
    return first, {**first, "w": w0 + 1, "b": torch.ones(3)}


def _files(s: Store) -> set:
    return {p.stem for p in (s.root / "tensors").glob("*/*.pt")}


def test_a_tensor_is_kept_once_whatever_holds_it_and_leaves_with_its_last_run(tmp_path):
    s = Store(tmp_path)
    runs = {}
    for seed in (0, 1):
        rid = s.create_run(f"{seed:016x}", "{}")
        first, final = _states(seed)
        s.save_weights(rid, 0, first)
        s.save_weights(rid, 5, final, base=(0, first))
        s.save_model(rid, final, {"seed": seed})
        s.finish_run(rid, "finished", summary={})
        runs[rid] = (first, final)
    # the common matrix once; each run's first and final trained matrix once (the final one is in its
    # last checkpoint and in its model.pt): 1 + 2 × 2 files, not the 2 × 5 a file per holder would take
    assert len(_files(s)) == 5 and s.tensor_bytes() < 6 * BIG[0] * BIG[1] * 4
    for rid, (first, final) in runs.items():
        for got, want in ((s.load_weights(rid, 0), first), (s.load_weights(rid, 5), final),
                          (s.load_model(rid)["state_dict"], final)):
            assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    a, b = runs
    raw = torch.load(s.run_dir(a) / "model.pt", weights_only=True)  # readable without dpviz: names its files
    assert set(raw["state_dict"]) == {"b"} and set(raw["tensors"]) == {"emb", "w"}
    assert raw["tensors"]["w"] in _files(s) and raw["tensors"]["emb"] == torch.load(
        s.run_dir(b) / "model.pt", weights_only=True)["tensors"]["emb"]
    s.delete_run(a)
    assert len(_files(s)) == 3  # a's two trained matrices went; the common one stays for b
    assert torch.equal(s.load_model(b)["state_dict"]["emb"], runs[b][1]["emb"])
    s.delete_run(b)
    assert _files(s) == set()


def test_a_missing_tensor_file_is_a_one_line_error_naming_it(tmp_path):
    s = Store(tmp_path)
    rid = s.create_run("f" * 16, "{}")
    s.save_model(rid, _states(0)[1], {})
    sha = torch.load(s.run_dir(rid) / "model.pt", weights_only=True)["tensors"]["w"]
    (victim,) = (s.root / "tensors").glob(f"*/{sha}.pt")
    victim.unlink()
    with pytest.raises(StoreError) as e:
        s.load_model(rid)
    assert "\n" not in str(e.value) and str(victim) in str(e.value) and "tensor w" in str(e.value)
    s.save_model(rid, _states(0)[1], {})  # saving the same tensor again writes the missing file back
    assert torch.equal(s.load_model(rid)["state_dict"]["w"], _states(0)[1]["w"])


@pytest.mark.parametrize("keep", ["final", "none"])
def test_keep_weights_keeps_what_it_says_and_the_default_keeps_its_hash(keep, fast_cfg, cache_dir):
    import json

    import dpviz
    from dpviz.analyses.service import analyze

    cfg = fast_cfg(strategy="fft", keep_weights=keep)
    assert "keep_weights" not in json.loads(fast_cfg(strategy="fft").to_json(hashed_only=True))
    assert cfg.hash() != fast_cfg(strategy="fft").hash()  # a run that keeps less is another stored run
    rid = dpviz.run(cfg, cache_dir=cache_dir)["run_id"]
    s = Store(cache_dir)
    assert len(s.feature_steps(rid)) > 2 and s.weight_steps(rid) == []  # features still at every checkpoint
    assert (s.run_dir(rid) / "model.pt").exists() == (keep == "final")
    early = s.feature_steps(rid)[0]  # no weights kept there either way
    with pytest.raises(StoreError, match="keep_weights") as e:
        analyze(s, rid, "hessian", step=early)
    assert "\n" not in str(e.value)
    if keep == "final":  # the last step is analysed from the final model
        assert analyze(s, rid, "hessian")["trace"] > 0
    else:
        with pytest.raises(StoreError, match="keep_weights"):
            analyze(s, rid, "hessian")
    assert analyze(s, rid, "knn")["accuracy"] > 0  # feature analyses do not need weights
