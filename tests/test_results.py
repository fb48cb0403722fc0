"""Readings, verdicts and twin lookups are plain functions: tested on planted tables, no browser."""

import math

import pandas as pd
import pytest

from dpviz import results
from dpviz.config import RunConfig
from dpviz.figures import sparse as sparse_figures
from dpviz.store import Store


def budget_rows(best_p_by_eps: dict) -> pd.DataFrame:
    """Two seeds per (ε, p); accuracy peaks at the planted p of each ε."""
    return pd.DataFrame([{"epsilon": e, "lp_fraction": p, "seed": s, "test_accuracy": 0.9 - abs(p - best) + 0.01 * s}
                         for e, best in best_p_by_eps.items() for p in (0.0, 0.3, 0.6, 1.0) for s in (0, 1)])


@pytest.mark.parametrize("planted,verdict", [
    ({1.0: 0.6, 8.0: 0.3}, "grows as ε shrinks"),
    ({1.0: 0.3, 8.0: 0.6}, "does not grow monotonically"),
    ({1.0: 0.3, 8.0: 0.3}, "same at every ε"),
])
def test_budget_reading_finds_the_planted_optimum_and_its_trend(planted, verdict):
    text = results.budget_reading(budget_rows(planted))
    for e, p in planted.items():
        assert f"ε={e:g}: p={p:g}" in text
    assert verdict in text


def test_budget_reading_names_no_privacy_as_infinity():
    rows = budget_rows({1.0: 0.6})
    rows = pd.concat([rows, budget_rows({None: 0.0}).assign(epsilon=math.nan)])
    assert "ε=∞: p=0" in results.budget_reading(rows)


def profile_rows() -> pd.DataFrame:
    rows = []
    for seed in (0, 1):
        rows += [{"epsilon": 1.0, "strategy": "sparse", "selection": "sparta", "sparsity": 0.2, "lora_rank": 4,
                  "seed": seed, "test_accuracy": 0.60 + 0.02 * seed, "trainable_fraction": 0.218},
                 {"epsilon": 1.0, "strategy": "sparse", "selection": "random", "sparsity": 0.2, "lora_rank": 4,
                  "seed": seed, "test_accuracy": 0.55, "trainable_fraction": 0.218},
                 {"epsilon": 1.0, "strategy": "fft", "selection": "sparta", "sparsity": 0.2, "lora_rank": 4,
                  "seed": seed, "test_accuracy": 0.50, "trainable_fraction": None}]
        rows += [{"epsilon": 1.0, "strategy": "lora", "selection": "sparta", "sparsity": 0.2, "lora_rank": r,
                  "seed": seed, "test_accuracy": 0.40 + 0.01 * r, "trainable_fraction": 0.024 * r} for r in (1, 8)]
    return pd.DataFrame(rows)


def test_profile_table_keeps_lora_ranks_apart_and_fft_at_100_percent():
    t = results.profile_table(profile_rows())
    lora = t[t["method"] == "lora"].sort_values("lora_rank")
    assert list(lora["lora_rank"]) == [1, 8] and list(lora["trainable_pct"]) == pytest.approx([2.4, 19.2])
    assert list(lora["test_accuracy"]) == pytest.approx([0.41, 0.48])
    assert t[t["method"] == "fft"]["trainable_pct"].tolist() == [100.0]
    sparta = t[t["method"] == "sparta"].iloc[0]
    assert sparta.test_accuracy == pytest.approx(0.61) and sparta["std"] == pytest.approx(0.0141, abs=1e-3)
    assert sparta.seeds == 2
    fig = sparse_figures.profile_figure(t)  # every method present is drawn, LoRA with its ranks
    names = {tr.name for tr in fig.data}
    assert {"SPARTA (private rows)", "random rows", "full DP-FFT", "DP-LoRA (rank r)"} == names
    assert [tr.hovertext for tr in fig.data if tr.name == "DP-LoRA (rank r)"][0] == ("r = 1", "r = 8")


def test_sparse_verdict_compares_sparta_with_fft_and_the_best_other_method():
    text = results.sparse_verdict(results.profile_table(profile_rows()))
    assert "SPARTA best 0.610 at s = 0.2 (21.8 % trained) vs DP-FFT 0.500" in text
    assert "best other method random 0.550" in text
    assert results.sparse_verdict(results.profile_table(profile_rows().query("selection != 'sparta' or "
                                                                              "strategy != 'sparse'"))) \
        == "waiting for SPARTA runs."


def test_knn_dip_reading_names_only_runs_that_fall_past_the_tolerance():
    df = pd.DataFrame([{"label": lab, "step": s, "value": v} for lab, vals in
                       (("fft", (0.8, 0.7, 0.85)), ("lp-fft", (0.8, 0.79, 0.86))) for s, v in enumerate(vals)])
    df.attrs["missing"] = [("r", 3)]
    assert results.knn_dip_reading(df) == ("kNN accuracy dips below its starting value for fft; "
                                           "1 checkpoint(s) still being analysed.")


def test_law_reading_prefers_the_highest_r2_and_ranks_nan_last():
    ss = [{"label": "a", "rho": 0.5, "r2": float("nan")}, {"label": "b", "rho": 0.7, "r2": 0.95},
          {"label": "c", "rho": 0.9, "r2": 0.5}]
    assert results.law_reading(ss, "D_l").startswith("D_l: the straightest decay is b (ρ = 0.7, R² = 0.95)")


def test_best_run_reading_and_accountants_reading():
    table = pd.DataFrame([{"strategy": "lp", "epsilon": 1.0, "test_accuracy": 0.6, "epsilon_spent": 0.99},
                          {"strategy": "fft", "epsilon": "inf", "test_accuracy": 0.9, "epsilon_spent": None},
                          {"strategy": "lp-fft", "epsilon": 2.0, "test_accuracy": None, "epsilon_spent": None}])
    assert results.best_run_reading(table) == "the best final test accuracy here is 0.900, by fft at ε = inf (no DP)."
    assert results.best_run_reading(table.iloc[2:]) is None
    rows = pd.DataFrame([{"accountant": a, "batch_size": b, "noise_multiplier": s * b / 64,
                          "sigma2_over_b": (s * b / 64) ** 2 / b}
                         for a, s in (("rdp", 1.2), ("prv", 1.0), ("gdp", 0.9)) for b in (64, 256)])
    text = results.accountants_reading(rows)
    assert text.startswith("GDP needs the least σ and RDP the most (RDP/PRV σ ratio 1.200–1.200)")
    assert "changes only 7.11×" in text  # (4.8²/256) / (0.9²/64) over all rows


def test_matching_run_finds_the_newest_finished_twin(tmp_path):
    store = Store(tmp_path)
    cont = RunConfig(strategy="continual", epsilon=2.0)
    fft = cont.replace(strategy="fft")

    def stored(cfg, finish):
        rid = store.create_run(cfg.hash(), cfg.to_json(), 10)
        if finish:
            store.finish_run(rid, "finished", summary={"test_accuracy": 0.5})
        return rid

    run = store.get_run(stored(cont, True))
    assert results.matching_run(store, run, strategy="fft") is None
    running = stored(fft, False)
    assert results.matching_run(store, run, strategy="fft") is None
    assert results.matching_run(store, run, finished_only=False, strategy="fft")["run_id"] == running
    stored(fft.replace(seed=1), True)  # another seed is no twin
    done = stored(fft, True)
    assert results.matching_run(store, run, strategy="fft")["run_id"] == done
