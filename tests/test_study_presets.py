"""The paper presets as studies: ``distortion`` (the early kNN dip) and ``law`` (the separation law)."""

import math
import subprocess
import sys

import pytest

from dpviz import experiments, studies
from dpviz.errors import ConfigError
from dpviz.studies import results as study_results
from dpviz.studies import runner
from dpviz.studies import presets
from dpviz.studies.presets import law_config


def planted(study: str, values: dict, seeds=(0, 1, 2)) -> study_results.Results:
    """Results of ``study`` with per-seed numbers: {cell as tuple of (axis, value): {measure: [per seed]}}."""
    res = study_results.Results(study=study, task="default", seeds=list(seeds))
    for c, measured in values.items():
        for i, seed in enumerate(seeds):
            res.add(dict(c), seed, run_id=f"r{seed}", config="c", values={k: v[i] for k, v in measured.items()})
    return res


def test_on_the_default_task_the_studies_plan_exactly_the_presets_runs():
    """One source in effect: the studies repeat the presets' settings (a study module may not import
    `dpviz.config`); on the default task they plan the very runs `dpviz.experiments` builds, so the store answers
    either."""
    assert (presets.TUNED_LR, presets.CONSTANT_LR) == (experiments.TUNED_LR, experiments.CONSTANT_LR)
    assert presets.COMMON == {k: v for k, v in experiments.BASE.items() if k != "dataset"}
    planned = runner.plan(studies.get("distortion"), seeds=(0,))
    preset = sorted(c.hash() for c in experiments.distortion())
    assert sorted(it.config.fixed_rates().hash() for it in planned) == preset  # an unread "auto" rate: its default
    planned = runner.plan(studies.get("law"), seeds=(0,))
    assert sorted(law_config(it.config).hash() for it in planned) == sorted(c.hash() for c in experiments.law())


@pytest.mark.subprocess
def test_listing_the_preset_and_proxy_studies_imports_no_torch():
    code = ("import sys, dpviz.studies.presets, dpviz.studies.proxy\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('dpviz.'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_task_whose_data_the_presets_vit_cannot_read_is_refused_in_one_line():
    for name in ("distortion", "law"):
        with pytest.raises(ConfigError, match="^backbone: a text backbone"):
            runner.plan(studies.get(name), task="real-text", seeds=(0,))


def knn(eps, strategy, dip):
    """A distortion cell whose early dip is ``dip`` per seed (kNN from 0.90 at step 0)."""
    return ((("strategy", strategy), ("epsilon", eps)),
            {"accuracy": [0.8, 0.81, 0.82], "knn0": [0.9] * 3, "knn_min": [min(0.9, 0.9 - d) for d in dip],
             "knn_min_step": [6, 6, 12], "knn_final": [0.93] * 3, "dip": dip})


def test_the_distortion_reading_judges_the_dip_as_the_scorecard_does():
    values = dict(knn(e, s, d) for e in (1.0, 8.0) for s, d in (("fft", [0.05, 0.04, 0.06]),
                                                                  ("lp-fft", [0.0, 0.005, -0.01])))
    verdict, text = studies.reading("distortion", planted("distortion", values))
    assert verdict == "FFT dips, LP-FFT does not", (verdict, text)
    assert ("At ε = 1 DP-FFT's kNN accuracy goes from 0.900 ± 0.000 at step 0 to its lowest 0.850 ± 0.010 "
            "(at step 8 on average)") in text, text
    assert "an early dip of 0.050 ± 0.010" in text and "not covered by ε" in text, text
    values.update([knn(e, "fft", [0.0, 0.005, 0.0]) for e in (1.0, 8.0)])  # DP-FFT's features hold: it flips
    assert studies.reading("distortion", planted("distortion", values))[0] == "no early dip"
    values.update([knn(1.0, "fft", [0.05, 0.04, 0.06])])
    assert studies.reading("distortion", planted("distortion", values))[0] == "partly"


def law(eps, rate, k, r2, rho=0.7):
    return ((("tune_blocks", k), ("epsilon", eps), ("lr", rate)),
            {"r2": r2, "r2_all": [min(1.0, x + 0.01) for x in r2], "rho": [rho] * 3, "accuracy": [0.8, 0.8, 0.8]})


def test_the_law_reading_keeps_the_law_with_tuned_rates_and_breaks_it_with_a_constant_one():
    good = [0.95, 0.96, 0.97]
    values = dict(law(e, "tuned", k, good) for e in (1.0, 8.0) for k in (1, 2, 3, 4))
    values.update(law(e, "constant", k, [0.5, 0.6, 0.55] if e == 1.0 else good) for e in (1.0, 8.0) for k in (1, 4))
    verdict, text = studies.reading("law", planted("law", values))
    assert verdict == "tuned rates keep the law, a constant rate breaks it", (verdict, text)
    assert "at ε = 1 with the tuned rate (k = 1, 2, 3, 4): R² of log D_l against depth 0.960 ± 0.009" in text, text
    assert "the constant rate's R² from layer 1 on is 0.55 against the tuned rate's 0.96" in text, text
    values.update(law(1.0, "constant", k, good) for k in (1, 4))  # the constant rate keeps it too: it flips
    assert studies.reading("law", planted("law", values))[0] == "the law holds at both rates"
    values.update(law(e, "tuned", k, [0.3, 0.4, 0.35], rho=1.1) for e in (1.0, 8.0) for k in (1, 2, 3, 4))
    assert studies.reading("law", planted("law", values))[0] == "the law does not hold"


SMALL = dict(epochs=2, train_size=300, batch_size=50)  # 12 steps: checkpoints at steps 0, 6 and 12


@pytest.mark.slow
def test_tiny_distortion_and_law_studies_read_finite_numbers_in_range(cache_dir):
    from dpviz.store import Store

    res = studies.run("distortion", seeds=(0,), sets=SMALL, cache_dir=cache_dir,
                      vary={"strategy": ["fft", "lp-fft"], "epsilon": [8.0]})
    for s in ("fft", "lp-fft"):
        v = {n: res.values({"strategy": s, "epsilon": 8.0}, n)[0]
             for n in ("accuracy", "knn0", "knn_min", "knn_min_step", "knn_final", "dip")}
        assert all(math.isfinite(x) for x in v.values()), v
        assert all(0 <= v[n] <= 1 for n in ("accuracy", "knn0", "knn_min", "knn_final")), v
        assert v["knn_min"] <= min(v["knn0"], v["knn_final"]) and v["knn_min_step"] in (0, 6, 12), v
        assert -1 <= v["dip"] <= v["knn0"] - v["knn_min"] + 1e-9, v  # the lowest of the first half, at most
    assert studies.reading("distortion", res)[0] in ("FFT dips, LP-FFT does not", "no early dip", "partly")
    res = studies.run("law", seeds=(0,), sets=SMALL, cache_dir=cache_dir,
                      vary={"tune_blocks": [1, 2], "epsilon": [1.0], "lr": ["tuned", "constant"]})
    for e in res.cells.values():
        v = {n: res.values(e["cell"], n)[0] for n in ("accuracy", "r2", "r2_all", "rho")}
        assert all(math.isfinite(x) for x in v.values()) and 0 <= v["accuracy"] <= 1, v
        assert 0 <= v["r2"] <= 1 and 0 <= v["r2_all"] <= 1 and v["rho"] > 0, v
        run = Store(cache_dir).get_run(e["runs"]["0"]["run_id"])
        assert run["config"]["delta"] == 1 / 300  # δ = 1/n of the training set, as the preset sets it
    assert len(res.cells) == 4 and studies.reading("law", res)[0] != "not read"
