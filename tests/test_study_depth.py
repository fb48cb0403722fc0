"""The ``depth`` study: the separation law on EfficientNet-Lite0, Lite1 and Lite2, pretrained and after DP-FFT."""

import gzip
import math

import numpy as np
import pytest

from dpviz import studies
from dpviz.errors import ConfigError
from dpviz.studies import results as study_results
from dpviz.studies import runner

LITES = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2")


def planted(values: dict, seeds=(0, 1, 2)) -> study_results.Results:
    """Results of ``depth`` with per-seed numbers: {(backbone, phase): {measure: [per seed]}}."""
    res = study_results.Results(study="depth", task="real-vision", seeds=list(seeds))
    for (backbone, phase), measured in values.items():
        for i, seed in enumerate(seeds):
            res.add({"backbone": backbone, "phase": phase}, seed, run_id=f"r{seed}", config="c",
                    values={k: v[i] for k, v in measured.items()})
    return res


def fits(r2_from_1, r2_all, rho=0.56):
    return {"r2_from_1": [r2_from_1 - 0.01, r2_from_1, r2_from_1 + 0.01], "rho_from_1": [rho] * 3,
            "r2_all": [r2_all - 0.01, r2_all, r2_all + 0.01]}


def test_the_depth_reading_judges_each_backbone_by_the_scorecards_law():
    """The shipped medium-size picture: pretrained fits well short of 0.9, DP-FFT's from layer 1 above it but not
    over all layers: in part. Over all layers too after DP-FFT: at some depths; everywhere: at every depth."""
    values = {**{(b, "pretrained"): fits(0.75, 0.35) for b in LITES}, **{(b, "fft"): fits(0.94, 0.53) for b in LITES}}
    verdict, text = studies.reading("depth", planted(values))
    assert verdict == "the law holds in part", text
    assert "After DP-FFT: EfficientNet-Lite0 R² 0.94 from layer 1, 0.53 over all layers, ρ = 0.56, linear in part" \
        in text, text
    values.update({(b, "fft"): fits(0.94, 0.92) for b in LITES})
    assert studies.reading("depth", planted(values))[0] == "the law holds at some depths"
    values.update({(b, "pretrained"): fits(0.95, 0.91) for b in LITES})
    assert studies.reading("depth", planted(values))[0] == "the law holds at every depth"
    values[(LITES[2], "fft")] = fits(0.95, 0.91, rho=1.2)  # a straight line that rises is no decay
    assert studies.reading("depth", planted(values))[0] == "the law holds at some depths"
    low = {(b, p): fits(0.5, 0.2) for b in LITES for p in ("pretrained", "fft")}
    assert studies.reading("depth", planted(low))[0] == "the law does not hold"


def test_the_shipped_depth_results_read_per_seed_and_from_their_kept_means():
    """small: measured per seed; medium: a converted table, per-seed values lost, each cell's mean, sd and seeds
    kept, read like any results."""
    small = studies.stored("depth", task="real-vision", scale="small")
    medium = studies.stored("depth", task="real-vision", scale="medium")
    assert len(small.cells) == len(medium.cells) == 6
    assert medium.shipped_provenance["per_seed"] == "lost" and small.shipped_provenance["per_seed"] == "kept"
    assert len(small.values({"backbone": LITES[0], "phase": "fft"}, "r2_from_1")) == 3
    assert medium.text({"backbone": LITES[0], "phase": "fft"}, "r2_from_1") == "0.947 ± 0.005"
    assert medium.stats({"backbone": LITES[1], "phase": "pretrained"}, "block_layers")[0] == 22
    assert studies.reading("depth", small)[0] == "the law does not hold"
    assert studies.reading("depth", medium)[0] == "the law holds in part"


def test_the_depth_study_refuses_a_text_task_in_one_line_naming_the_backbone():
    with pytest.raises(ConfigError) as e:
        runner.plan(studies.get("depth"), task="real-text", seeds=(0,))
    assert e.value.field == "backbone" and "\n" not in str(e.value)


def fashion_folder(root, n_train=60, n_test=60):
    """A tiny Fashion-MNIST in its files' format (gzipped idx), each class a brightness level plus noise."""
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("t10k", n_test)):
        y = (np.arange(n) % 10).astype(np.uint8)
        x = (rng.integers(0, 60, (n, 28, 28)) + y[:, None, None] * 19).clip(0, 255).astype(np.uint8)
        (raw / f"{split}-images-idx3-ubyte.gz").write_bytes(gzip.compress(
            b"\0\0\x08\x03" + np.array([n, 28, 28], ">u4").tobytes() + x.tobytes()))
        (raw / f"{split}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(
            b"\0\0\x08\x01" + np.array([n], ">u4").tobytes() + y.tobytes()))
    return root


@pytest.mark.slow
@pytest.mark.real  # EfficientNet-Lite0's packaged weights
def test_the_depth_study_reads_lite0_pretrained_and_after_dp_fft(cache_dir, tmp_path):
    """Lite0 on 60 images of a tiny Fashion-MNIST: its pretrained features (no run) and a 4-step DP-FFT run."""
    sets = {"data_dir": str(fashion_folder(tmp_path / "fashion")), "train_size": 60, "eval_subset": 60,
            "batch_size": 16, "epochs": 1}
    res = studies.run("depth", task="real-vision", seeds=(0,), sets=sets, cache_dir=cache_dir,
                      vary={"backbone": (LITES[0],)})
    pre, fft = ({"backbone": LITES[0], "phase": p} for p in ("pretrained", "fft"))
    for cell in (pre, fft):
        (r2, _, _), (rho, _, _), (r2_all, _, _) = (res.stats(cell, k) for k in ("r2_from_1", "rho_from_1", "r2_all"))
        assert 0 <= r2 <= 1 and 0 <= r2_all <= 1 and 0 < rho < math.inf, cell
    assert res.stats(pre, "block_layers")[0] == 17  # 16 MBConv blocks and the head conv
    assert 0 <= res.stats(pre, "blocks_r2_from_1")[0] <= 1 and res.stats(fft, "blocks_r2_from_1") is None
    assert res.cells[study_results.cell_key(pre)]["runs"]["0"]["run_id"].startswith("pretrained efficientnet_lite0")
    assert len(res.run_ids()) == 2
    verdict, text = studies.reading("depth", res)
    assert verdict.startswith("the law") and "After DP-FFT: EfficientNet-Lite0" in text
