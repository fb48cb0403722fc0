"""The ``curvature`` study: the decelerator's place in the improvement's denominator over DP-FFT training."""

import json
import math

import pytest

from dpviz import studies
from dpviz.studies import results as study_results


def planted(values: dict, seeds=(0, 1, 2)) -> study_results.Results:
    """Results of ``curvature`` with per-seed numbers: {ε: {measure: [per seed]}}."""
    res = study_results.Results(study="curvature", task="default", seeds=list(seeds))
    for eps, measured in values.items():
        for i, seed in enumerate(seeds):
            res.add({"epsilon": eps}, seed, run_id=f"r{seed}", config="c",
                    values={k: v[i] for k, v in measured.items()})
    return res


def terms(dominant, first, last=0.01, best=64.0):
    return {"dominant_early": [dominant] * 3, "share_first": [first * 0.9, first, first * 1.1],
            "share_last": [last] * 3, "trace_first": [40.0, 42.0, 44.0], "trace_last": [9.0, 10.0, 11.0],
            "best_batch": [best] * 3}


def test_the_curvature_reading_follows_the_decelerators_share():
    """Bu et al.'s picture: at ε = 1 the decelerator dominates early, at ε = 8 it does not (under 1 % of D).
    Planted dominant at ε = 8 too it dominates at every ε; planted at fewer early checkpoints at ε = 1 it does not
    dominate."""
    values = {1.0: terms(1.0, 0.7, 0.2, best=512.0), 8.0: terms(0.0, 0.002, 0.0004),
              math.inf: terms(0.0, 0.0, 0.0, None)}
    verdict, text = studies.reading("curvature", planted(values))
    assert verdict == "the decelerator dominates early at small ε only", text
    assert text.startswith("At ε = 1 the decelerator is the largest term at 100% of the early checkpoints, 70% of "
                           "the denominator at the first and 20% at the last (tr(H) 42 → 10), predicted best B = 512")
    assert "without DP the decelerator is 0" in text
    assert text.endswith("At ε = 8 it is under 1% of the denominator (two orders of magnitude below the other terms) "
                         "at the first checkpoint and the last."), text
    values[8.0] = terms(1.0, 0.3)
    assert studies.reading("curvature", planted(values))[0] == "the decelerator dominates at every ε"
    values[1.0] = terms(0.4, 0.3)
    assert studies.reading("curvature", planted(values))[0] == "the decelerator does not dominate early"
    assert studies.reading("curvature", planted({1.0: terms(0.6, 0.5)}))[0] == "the decelerator dominates early"
    assert studies.reading("curvature", planted({math.inf: values[math.inf]}))[0] == "not read"


@pytest.mark.slow
def test_the_curvature_study_reads_a_tiny_private_run_and_one_without_dp(cache_dir):
    """DP-FFT on 100 digits, 4 steps, weights every 2: the curvature at steps 2 and 4, at ε = 1 and without DP."""
    sets = {"train_size": 100, "epochs": 1, "batch_size": 25, "checkpoint_every": 2}
    res = studies.run("curvature", task="default", seeds=(0,), sets=sets, cache_dir=cache_dir,
                      vary={"epsilon": (1.0, math.inf)})
    dp, free = {"epsilon": 1.0}, {"epsilon": math.inf}
    for cell in (dp, free):
        for k in ("dominant_early", "share_first", "share_last"):
            assert 0 <= res.stats(cell, k)[0] <= 1, (cell, k)
        assert all(math.isfinite(res.stats(cell, k)[0]) for k in ("trace_first", "trace_last"))
    assert res.stats(free, "share_first")[0] == 0 == res.stats(free, "dominant_early")[0]  # σ = 0
    assert res.stats(dp, "share_first")[0] > 0 and res.stats(dp, "best_batch")[0] in (16, 32, 64)
    assert res.stats(free, "best_batch") is None
    saved = json.loads(next((cache_dir / "studies").glob("curvature_default*.json")).read_text())
    assert saved["axes"]["epsilon"] == [1.0, math.inf]  # ε = ∞ survives the file
    assert studies.reading("curvature", res)[0].startswith("the decelerator")
