"""The ``sparse-selection`` study: its reading on planted numbers, a tiny real run end to end, its refusal."""

import math

import pytest

from dpviz import studies
from dpviz.errors import ConfigError
from dpviz.studies import results as study_results


def planted(values: dict, seeds=(0, 1, 2)) -> study_results.Results:
    """{ε: [overlap per seed]} as results, random rows giving 0.2."""
    res = study_results.Results(study="sparse-selection", task="default", seeds=list(seeds))
    for eps, overlaps in values.items():
        for seed, o in zip(seeds, overlaps):
            res.add({"epsilon": eps}, seed, run_id=f"r{seed}", config="c",
                    values={"overlap": o, "random": 0.2, "sigma": 1.0})
    return res


def test_the_reading_weighs_the_overlap_against_random_rows_and_the_spread():
    values = {1.0: [0.24, 0.26, 0.28], 8.0: [0.40, 0.45, 0.50], 64.0: [0.70, 0.72, 0.74]}
    verdict, text = studies.reading("sparse-selection", planted(values))
    assert verdict == "signal at every ε", (verdict, text)
    assert "At ε = 1, 26 % of SPARTA's rows are the noiseless choice's (0.260 ± 0.020 over 3 seeds; random rows: " \
           "0.200), above random beyond the spread" in text, text
    assert "From ε = 1 to ε = 64 the overlap grows (0.260 → 0.720)." in text, text
    values[1.0] = [0.17, 0.21, 0.25]  # at random within the seeds' spread
    verdict, text = studies.reading("sparse-selection", planted(values))
    assert verdict == "signal at some ε" and "random rows: 0.200), within the spread" in text, (verdict, text)
    assert studies.reading("sparse-selection", planted({1.0: [0.17, 0.21, 0.25]}))[0] == "no signal beyond random"


@pytest.mark.slow
def test_a_tiny_real_run_compares_the_noisy_choice_with_the_noiseless_one(cache_dir):
    res = studies.run("sparse-selection", task="default", seeds=(0,), cache_dir=cache_dir,
                      sets={"epochs": 3, "train_size": 400}, vary={"epsilon": (8.0,)})
    (e,) = res.cells.values()
    v = e["runs"]["0"]["values"]
    assert all(math.isfinite(x) for x in v.values()), v
    assert 0 <= v["overlap"] <= 1 and 0 < v["random"] < 1 and v["sigma"] > 0, v
    assert studies.reading("sparse-selection", res)[0] in ("signal at every ε", "no signal beyond random")


def test_it_refuses_a_run_that_does_not_select_by_sparta(cache_dir):
    with pytest.raises(ConfigError, match="^selection: sparta"):
        studies.run("sparse-selection", seeds=(0,), cache_dir=cache_dir, sets={"selection": "magnitude"},
                    vary={"epsilon": (8.0,)})


@pytest.mark.slow
def test_the_noisy_choice_is_the_rows_the_run_itself_trains(cache_dir):
    """The selection epoch rerun from the head phase's end picks exactly the mask the sparse run stores."""
    from dpviz import tasks
    from dpviz.models import sparse
    from dpviz.runner import resolved, run
    from dpviz.store import Store
    from dpviz.studies import selection
    from dpviz.training import prepare

    store = Store(cache_dir)
    cfg = tasks.config("default", **selection.SPARSE_SELECTION.base, epsilon=8.0, epochs=3, train_size=400)
    mask = store.load_mask(run(cfg, store=store, rates="grid")["run_id"])["mask"]
    noisy, clean, sigma = selection.selections(prepare.prepare(resolved(cfg, store, rates="grid")[0],
                                                               cache_dir=store.root), None)
    assert {n: sorted(rows) for n, rows in mask.items()} == sparse.select_rows(noisy, cfg.sparsity)
    assert noisy.keys() == clean.keys() and sigma > 0
