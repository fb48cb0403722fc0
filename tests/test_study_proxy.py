"""``proxy-tuning``: DP-FFT tuned on the public proxy or on the private data, scored on the private data."""

import math

import pytest

from dpviz.studies import proxy
from dpviz import studies, sweeps
from dpviz.studies import results as study_results


def planted(values: dict, seeds=(0, 1, 2)) -> study_results.Results:
    """Results with per-seed numbers: {tuned_on: {measure: [per seed]}} at ε = 1."""
    res = study_results.Results(study="proxy-tuning", task="default", seeds=list(seeds))
    for where, measured in values.items():
        for i, seed in enumerate(seeds):
            res.add({"tuned_on": where, "epsilon": 1.0}, seed, run_id=f"{where}{seed}", config="c",
                    values={k: v[i] for k, v in measured.items()})
    return res


def cell(acc, lr=0.01, c=1.0, spent=0.0):
    return {"accuracy": acc, "lr_ft": [lr] * 3, "clip_norm": [c] * 3, "tuning_epsilon": [spent] * 3}


def test_the_proxy_reading_compares_the_proxys_choice_with_the_private_one_and_the_defaults():
    values = {"default": cell([0.60, 0.62, 0.64]), "public": cell([0.70, 0.72, 0.74], 0.05, 2.0),
              "private": cell([0.71, 0.73, 0.75], 0.04, 3.0, 4.2)}
    verdict, text = studies.reading("proxy-tuning", planted(values))
    assert verdict == "the proxy suffices", (verdict, text)
    assert "the proxy's choice is 1.0 points below the private one, within the spread" in text, text
    assert "10.0 points above the defaults, beyond the spread" in text, text
    assert "(lr_ft 0.05, C 2)" in text and "spent ε ≈ 4.2" in text and "does not cover" in text, text
    values["private"] = cell([0.80, 0.81, 0.82], 0.04, 3.0, 4.2)  # private tuning pulls ahead: the verdict flips
    assert studies.reading("proxy-tuning", planted(values))[0] == "private tuning wins"
    values["private"] = cell([0.71, 0.73, 0.75])
    values["default"] = cell([0.69, 0.71, 0.73])  # the proxy's choice no clearer of the defaults than the seeds
    assert studies.reading("proxy-tuning", planted(values))[0] == "within the spread"
    assert studies.reading("proxy-tuning", planted({"public": values["public"]}))[0] == "not read"


def test_the_private_cells_tuning_is_said_to_be_outside_the_budget():
    study = studies.get("proxy-tuning")
    assert "does not account" in study.question
    # the chosen rates are the release of a search on private data that ε does not cover (in that row)
    assert {m.name for m in study.measures if m.private} == {"lr_ft", "clip_norm"}
    assert "ε does not cover" in study.show({"tuned_on": "private", "epsilon": 1.0})["tuned on"]


@pytest.mark.slow
def test_a_tiny_proxy_study_searches_once_per_data_and_scores_at_fresh_seeds(cache_dir, monkeypatch):
    monkeypatch.setattr(proxy, "TRIALS", 2)
    res = studies.run("proxy-tuning", seeds=(0, 1), sets=dict(epochs=1, train_size=200, batch_size=50),
                      cache_dir=cache_dir)
    for where in ("default", "public", "private"):
        c = {"tuned_on": where, "epsilon": 1.0}
        acc, lr, clip = (res.values(c, n) for n in ("accuracy", "lr_ft", "clip_norm"))
        assert len(acc) == 2 and all(0 <= a <= 1 for a in acc), (where, acc)
        assert len(set(lr)) == 1 and len(set(clip)) == 1, where  # every seed's cell reuses the one search
        if where == "default":
            assert (lr[0], clip[0]) == (0.01, 1.0)
        else:
            assert 0.001 <= lr[0] <= 0.3 and 0.1 <= clip[0] <= 10.0, (where, lr, clip)
    spent = res.values({"tuned_on": "private", "epsilon": 1.0}, "tuning_epsilon")[0]
    assert math.isfinite(spent) and spent > 1.0  # two trials at ε = 1 each, composed
    assert res.values({"tuned_on": "public", "epsilon": 1.0}, "tuning_epsilon") == [0.0, 0.0]
    searches = sweeps.studies(cache_dir=cache_dir, kind="tune")
    assert sorted(s.user_attrs["proxy"] or "private" for s in searches) == ["glyphs", "private"]
    for s in searches:  # the second seed trained no trial again; trials at a seed no scored run takes
        assert len(s.get_trials(states=(sweeps.TS.COMPLETE,))) == 2
        assert s.user_attrs["base"]["seed"] == proxy.SEARCH_SEED
    verdict, _ = studies.reading("proxy-tuning", res)
    assert verdict in ("private tuning wins", "the proxy suffices", "within the spread")
