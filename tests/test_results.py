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
    assert results.knn_dip_reading(df) == ("kNN accuracy dips more than 0.02 below its starting value for fft; "
                                           "1 checkpoint(s) still being analysed.")
    df.attrs["missing"] = []
    assert results.knn_dip_reading(df[df["label"] == "lp-fft"]) == (
        "kNN accuracy dips more than 0.02 below its starting value for no run (the largest fall: lp-fft, by 0.010).")


def test_law_reading_prefers_the_highest_r2_and_ranks_nan_last():
    ss = [{"label": "a", "rho": 0.5, "r2": float("nan")}, {"label": "b", "rho": 0.7, "r2": 0.95},
          {"label": "c", "rho": 0.9, "r2": 0.5}]
    assert results.law_reading(ss, "D_l") == ("D_l: the straightest decay is b (ρ = 0.7, R² = 0.95); ρ < 1 with R² "
                                              "near 1 means the law holds.")
    assert results.law_reading(ss[::2], "D_l").endswith("so here it holds for no run (no decaying fit reaches R² = 0.8).")
    # a straighter line that rises (MiniLM's PR with a constant rate) is not the straightest decay
    rising = {"label": "r", "rho": 1.2, "r2": 0.99}
    assert "decay is b" in results.law_reading([*ss, rising], "D_l")
    assert results.law_reading([rising], "D_l").startswith("D_l: no run's values decay with depth")
    wide = {"label": "w", "rho": float("nan"), "r2": float("nan"), "unreadable": "not readable at layers 1"}
    assert results.law_reading([wide], "PR_l") == "PR_l: not readable at layers 1."


def test_best_run_reading_and_accountants_reading():
    table = pd.DataFrame([{"strategy": "lp", "epsilon": 1.0, "test_accuracy": 0.6, "epsilon_spent": 0.99},
                          {"strategy": "fft", "epsilon": "inf", "test_accuracy": 0.9, "epsilon_spent": None},
                          {"strategy": "lp-fft", "epsilon": 2.0, "test_accuracy": None, "epsilon_spent": None}])
    assert results.best_run_reading(table) == ("the best final test accuracy here is 0.900, by fft at ε = inf (no DP). "
                                               "The runs compared differ in strategy, epsilon.")
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


def test_profile_table_without_lora_columns_still_groups_by_sparsity():
    rows = profile_rows().query("strategy != 'lora'").drop(columns=["lora_rank"])
    t = results.profile_table(rows)
    assert t["lora_rank"].isna().all() and set(t["method"]) == {"sparta", "random", "fft"}
    assert t[t["method"] == "sparta"]["trainable_pct"].tolist() == pytest.approx([21.8])


def test_step_time_reading_uses_the_sparse_phase_only(tmp_path):
    store = Store(tmp_path)
    cfg = RunConfig(strategy="sparse", epsilon=2.0)
    sid = store.create_run(cfg.hash(), cfg.to_json(), 10)
    phases = [{"name": "head", "steps": 2}, {"name": "select", "steps": 3}, {"name": "sparse", "steps": 5}]
    store.finish_run(sid, "finished", summary={"phases": phases})
    # head and selection steps are slow; the masked steps 6..10 take 10, 11, 12, 13, 14 ms (median 12)
    store.log_metrics(sid, [(s, "step_ms", 100.0 if s <= 5 else 4.0 + s) for s in range(1, 11)])
    fft = cfg.replace(strategy="fft")
    fid = store.create_run(fft.hash(), fft.to_json(), 10)
    store.finish_run(fid, "finished", summary={"phases": [{"name": "fft", "steps": 10}]})
    store.log_metrics(fid, [(s, "step_ms", 24.0) for s in range(1, 11)])
    assert results.step_time_ms(store, sid, "sparse") == 12.0 and results.step_time_ms(store, sid, "lp") is None
    text = results.step_time_reading(store, sid, fid, "sparse", "masked")
    assert text.startswith("median masked step 12.0 ms vs dense DP-FFT step 24.0 ms") and "0.50×" in text
    empty = store.create_run(fft.replace(seed=3).hash(), fft.replace(seed=3).to_json(), 10)
    assert results.step_time_reading(store, sid, empty, "sparse", "masked") is None  # no step times: no reading


def test_curvature_reading_names_the_dominant_term_at_each_runs_last_checkpoint():
    planted = (("a", 5, "sampling", 0.5), ("a", 10, "decelerator", 9.0), ("b", 4, "curvature", 0.1))
    df = pd.DataFrame([{"run_id": r, "label": r, "step": s, "dominant": dom, "decelerator": dec, "curvature": 1.0,
                        "sampling": 2.0, "trace": 6.3e3} for r, s, dom, dec in planted])
    text = results.curvature_reading(df)
    assert "a at step 10: decelerator dominates D (decelerator 9 vs GᵀHG 1, tr(HΣ)/B 2)" in text
    assert "b at step 4: curvature dominates D" in text and "step 5" not in text
    assert "negative" not in text  # every tr(H) positive: no warning about a negative one
    df.loc[0, "trace"] = -2.0
    assert "tr(H) is negative at a at step 5" in results.curvature_reading(df)


def test_batch_prediction_reading_and_switch_step():
    pred = {"best_batch_size": 256, "total_improvement": {64: 1.0, 256: 2.0}}
    assert results.batch_prediction_reading(pred, 512).startswith("the formula predicts B = 256 as best for this "
                                                                   "run's budget (it used B = 512)")
    assert results.switch_step({"summary": None}) is None  # still training
    assert results.switch_step({"summary": {"phases": []}}) is None  # not a continual run
    assert results.switch_step({"summary": {"public_phase": {"step": 37, "reason": "threshold"}}}) == 37


def test_law_series_reads_the_chosen_checkpoint_and_reports_the_missing(tmp_path):
    import json

    import numpy as np

    from dpviz.analyses import REGISTRY

    store = Store(tmp_path)
    cfgs = [RunConfig(strategy="partial", epsilon=1.0, seed=s) for s in (0, 1)]
    ids = [store.create_run(c.hash(), c.to_json(), 10) for c in cfgs]
    for rid in ids:
        for step in (2, 8):
            store.save_features(rid, step, {"labels": np.zeros(3)})
    params = json.dumps(REGISTRY["separability"].params, sort_keys=True)
    for step, vals in ((2, [4.0, 2.0, 1.0]), (8, [8.0, 2.0, 0.5])):  # only the first run is analysed
        res = {"step": step, "fuzziness": vals, "rho": vals[1] / vals[0], "intercept": vals[0], "r2": 0.99,
               "pearson_r": -0.9}
        store.put_analysis(ids[0], step, "separability", params, res)
    ss, missing = results.law_series(store, ids, "separability", "fuzziness")
    assert [s["values"] for s in ss] == [[8.0, 2.0, 0.5]] and ss[0]["rho"] == 0.25
    assert ss[0]["label"].endswith(f"[{ids[0]}] @ step 8") and ss[0]["strategy"] == "partial"
    assert missing == [(ids[1], 2), (ids[1], 8)]
    first, _ = results.law_series(store, ids, "separability", "fuzziness", checkpoint="first")
    assert first[0]["values"] == [4.0, 2.0, 1.0]
    table = results.law_table(ss)
    assert list(table.columns) == ["run", "rho", "R²", "Pearson r", "l=0", "l=1", "l=2"]
    assert table.loc[0, "l=2"] == 0.5


def test_stored_ids_and_runs_of_skip_deleted_and_other_strategies(tmp_path):
    store = Store(tmp_path)
    ids = []
    for strategy, seed in (("continual", 0), ("fft", 0), ("continual", 1)):
        c = RunConfig(strategy=strategy, seed=seed)
        ids.append(store.create_run(c.hash(), c.to_json(), 10))
    store.finish_run(ids[0], "finished", summary={})
    store.finish_run(ids[1], "cancelled")
    store.delete_run(ids[1])
    assert results.stored_ids(store, [ids[2], "gone", ids[1], ids[0]]) == [ids[2], ids[0]]
    assert [r["run_id"] for r in results.runs_of(store, "continual")] == [ids[2], ids[0]]  # newest first
    assert [r["run_id"] for r in results.runs_of(store, "continual", finished_only=True)] == [ids[0]]


def test_pickers_offer_the_users_own_runs_first_then_their_sweeps_trials(tmp_path):
    """A sweep's trials newer than the user's runs do not push them out of a page's default (its first few)."""
    store = Store(tmp_path)
    made = []
    for kind, seed in (("user", 0), ("trial", 1), ("user", 2), ("trial", 3), ("trial", 4)):
        c = RunConfig(strategy="continual", seed=seed)
        made.append(store.create_run(c.hash(), c.to_json(), 10, kind=kind))
    order = [r["run_id"] for r in results.offered(results.shown_runs(store))]
    assert order == [made[2], made[0], made[4], made[3], made[1]]
    assert [r["run_id"] for r in results.runs_of(store, "continual")] == order


def test_embedding_table_flattens_frames():
    import numpy as np

    frames = results.embedding_frames([{"step": 3, "coords": [[0.0, 1.0], [2.0, 3.0]], "labels": [1, 0]},
                                       {"step": 6, "coords": [[4.0, 5.0]], "labels": [2]}])
    assert isinstance(frames[0][1], np.ndarray) and frames[0][1].shape == (2, 2)
    t = results.embedding_table(frames)
    assert t.values.tolist() == [[3, 0.0, 1.0, 1], [3, 2.0, 3.0, 0], [6, 4.0, 5.0, 2]]


@pytest.mark.subprocess
def test_the_results_package_imports_no_streamlit_plotly_or_torch():
    """`dpviz.results` is plain tables: pages import it without paying for torch, and it never draws."""
    import ast
    import subprocess
    import sys
    from pathlib import Path

    root = Path(results.__file__).parents[2]
    for path in Path(results.__file__).parent.glob("*.py"):
        mods = [a.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Import) for a in n.names]
        mods += [n.module or "" for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in mods if m.split(".")[0] in ("streamlit", "plotly")], path.name
        assert len(path.read_text().splitlines()) < 300, path.name
    code = "import sys, dpviz.results; print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'streamlit'}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_caption_names_every_run_on_its_own_line():
    configs = [dict(strategy=s, epsilon=e, delta=1e-5, dataset="cifar10", backbone="cnn", seed=k, lp_fraction=0.5)
               for s in ("fft", "lp", "lp-fft", "sparse", "lora") for e in (1.0, "inf") for k in (0, 1)]
    lines = results.caption(configs).split("\n")
    assert len(lines) == 1 + 10 and "+" not in lines[-1]  # no "… (+N)": every configuration is named
    assert "• lora, ε=∞ (no DP), δ=1e-05, cifar10/cnn, seeds 0, 1" in lines
    assert "• lp-fft (p=0.5), ε=1, DP-SGD, δ=1e-05, cifar10/cnn, seeds 0, 1" in lines  # the mechanism: always
