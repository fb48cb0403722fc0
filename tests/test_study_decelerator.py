"""The ``decelerator`` study: its reading on planted numbers, a tiny real run end to end, and its refusals."""

import math

import pytest

from dpviz import studies
from dpviz.errors import ConfigError
from dpviz.studies import decelerator
from dpviz.studies import results as study_results


def planted(values: dict, seeds=(0, 1, 2)) -> study_results.Results:
    """{(bands, horizon[, ε]): {measure: [per seed]}} (ε = 8 unless given) as results."""
    res = study_results.Results(study="decelerator", task="default", seeds=list(seeds))
    for (b, k, *eps), measured in values.items():
        for i, seed in enumerate(seeds):
            res.add({"bands": b, "horizon": k, "epsilon": eps[0] if eps else 8.0}, seed, run_id=f"r{seed}", config="c",
                    values={n: v[i] for n, v in measured.items()})
    return res


def cell(ratio, noise, kappa=0.5):
    return {"measured": [0.01] * 3, "ratio": [ratio - 0.05, ratio, ratio + 0.05],
            "independent": [kappa * (ratio - 0.05), kappa * ratio, kappa * (ratio + 0.05)], "noise_vs_sgd": [noise] * 3}


def test_the_reading_says_whether_the_formula_predicts_and_whether_bands_leave_less_noise():
    values = {(1, 4): cell(1.2, 1.0), (2, 4): cell(1.15, 0.96), (4, 4): cell(1.3, 0.95),
              (8, 4): {"measured": [0.01] * 3, "ratio": [1.2, 1.25, 1.3], "noise_vs_sgd": [None] * 3}}
    verdict, text = studies.reading("decelerator", planted(values))
    assert verdict == "formula holds, bands quieter", (verdict, text)
    assert "1.15 to 1.30 times the κ-formula's over b ∈ {1, 2, 4, 8} and K ∈ {4}" in text, text
    assert "Against the independent-noise formula (κ = 1) BandMF's change is 0.57 to 0.65 times it." in text, text
    assert "At ε = 8 BandMF leaves 0.96 (b = 2), 0.95 (b = 4) of DP-SGD's noise in the weights; b = 8 cannot run" \
        in text, text
    values[(4, 4)] = cell(2.1, 0.95)  # one cell the formula misses by more than the tolerance
    verdict, text = studies.reading("decelerator", planted(values))
    assert verdict == "formula off, bands quieter" and "outside a factor 1.5: b = 4, K = 4 (2.10 ± 0.05)" in text, text
    two = {**values, (4, 4): cell(1.3, 0.95), (1, 64, 1.0): cell(0.2, 1.0), (4, 64, 1.0): cell(1.1, 1.25)}
    verdict, text = studies.reading("decelerator", planted(two))  # a large σ leaves the quadratic regime at ε = 1
    assert verdict == "formula holds at ε = 8, bands mixed", (verdict, text)
    assert text.startswith("At ε = 1 the loss change") and "outside a factor 1.5: b = 1, K = 64 (0.20" in text, text
    values[(4, 4)], values[(2, 4)] = cell(1.3, 1.25), cell(1.15, 1.11)  # BandMF noisier than DP-SGD
    assert studies.reading("decelerator", planted(values))[0] == "formula holds, bands noisier"
    unread = planted(values)
    unread.cells[study_results.cell_key({"bands": 16, "horizon": 4, "epsilon": 8.0})] = {
        "cell": {"bands": 16, "horizon": 4, "epsilon": 8.0}, "runs": {}, "source": "store"}
    assert "b = 16" not in studies.reading("decelerator", unread)[1]  # a cell not read yet is not "cannot run"


@pytest.mark.slow  # tr(H) by up to 400 Hutchinson probes: about 25 s on 2 cores
def test_a_tiny_real_run_trains_one_run_per_seed_and_measures_each_cell(cache_dir):
    res = studies.run("decelerator", task="default", seeds=(0,), cache_dir=cache_dir,
                      sets={"epochs": 2, "train_size": 80, "batch_size": 16, "checkpoint_every": 2},
                      vary={"bands": (1, 2), "horizon": (4,)})
    cells = [e for e in res.cells.values()]
    assert len(cells) == 2 and len(set(res.run_ids())) == 1  # the cells share their seed's one run
    for e in cells:
        v = e["runs"]["0"]["values"]
        assert all(math.isfinite(v[k]) for k in decelerator.MEASURES), v
        assert v["measured"] > 0 and v["predicted"] > 0 and v["ratio"] > 0 and v["sigma"] > 0, v
        b = e["cell"]["bands"]
        assert (v["kappa"], v["noise_vs_sgd"]) == (1.0, 1.0) if b == 1 else v["kappa"] < 1, v
    verdict, sentence = studies.reading("decelerator", res)
    assert verdict.startswith("formula ") and "times the κ-formula's" in sentence, (verdict, sentence)


def test_it_refuses_in_one_line_what_it_cannot_measure(cache_dir):
    with pytest.raises(ConfigError, match="^epsilon: a finite ε"):
        studies.run("decelerator", seeds=(0,), cache_dir=cache_dir, vary={"epsilon": (math.inf,), "bands": (1,),
                                                                          "horizon": (1,)})
    with pytest.raises(ConfigError, match="^keep_weights: checkpoints"):
        studies.run("decelerator", seeds=(0,), cache_dir=cache_dir, sets={"keep_weights": "final"},
                    vary={"bands": (1,), "horizon": (1,)})
