"""Learning rates on "auto": chosen on public data under the run's own budget, no private record read."""

import json
import math
import subprocess
import sys
import time
from dataclasses import replace

import pytest

import dpviz
from dpviz import catalog, data
from dpviz import autotune
from dpviz.config import RunConfig
from dpviz.errors import ConfigError
from dpviz.store import Store

SMALL = dict(strategy="fft", epochs=2, batch_size=256, eval_every=50)


@pytest.fixture
def searching(monkeypatch):
    """The suite turns proxy searches off (conftest); these tests search."""
    monkeypatch.setenv("DPVIZ_AUTO_SEARCH", "on")


@pytest.fixture
def no_private_reads(monkeypatch):
    """Reading the private digits fails: whatever resolves "auto" must not need them."""
    def refuse(cfg):
        raise AssertionError("private data read")
    monkeypatch.setitem(catalog.DATASETS, "digits", replace(catalog.DATASETS["digits"], loader=refuse))


@pytest.mark.slow
def test_a_search_reads_no_private_data_is_deterministic_and_cached(searching, no_private_reads, cache_dir):
    cfg = RunConfig(**SMALL, epsilon=8.0)  # off the shipped grid (2 epochs): searched
    resolved, res = autotune.resolve(cfg, cache_dir=cache_dir, trials=3)
    n = 3 + (autotune.EXTEND_TRIALS if "beyond" in res.note else 0)  # best at an end: one decade more
    assert res.source == "search" and res.proxy == "glyphs" and res.trials == n
    assert 0.0001 <= resolved.lr_ft <= 3 and resolved.auto == () and resolved.lr_lp == autotune.DEFAULTS["lr_lp"]
    runs = Store(cache_dir).list_runs()
    assert len(runs) == n and {r["config"]["dataset"] for r in runs} == {"glyphs"}
    assert {r["kind"] for r in runs} == {"search"}
    again, res2 = autotune.resolve(cfg.replace(seed=5), cache_dir=cache_dir, trials=3)  # the seed is not in the key
    assert again.lr_ft == resolved.lr_ft and res2.study == res.study
    assert len(Store(cache_dir).list_runs()) == n  # answered from the finished study: nothing trained
    fresh, _ = autotune.resolve(cfg, cache_dir=cache_dir.parent / "other", trials=3)
    assert fresh.lr_ft == resolved.lr_ft  # deterministic given TPE's seed


def test_a_search_whose_best_is_at_an_end_extends_the_range_and_warns_if_still_there(searching, cache_dir,
                                                                                     monkeypatch):
    """A range far below the rates LP needs: the best is at its top, the search tries the decade above it,
    and the best is at the top of that too, so the resolution warns (the form and `run --json` show it)."""
    monkeypatch.setitem(autotune.RANGES, "lr_lp", (0.003, 0.01))
    cfg = RunConfig(**{**SMALL, "strategy": "lp"}, epsilon=8.0)
    resolved, res = autotune.resolve(cfg, cache_dir=cache_dir, trials=2)
    tried = sorted(r["config"]["lr_lp"] for r in Store(cache_dir).list_runs(kind="search"))
    assert len(tried) == res.trials == 2 + autotune.EXTEND_TRIALS and tried[-1] == pytest.approx(0.1)
    assert resolved.lr_lp == pytest.approx(0.1) and "beyond the end of the range" in res.note
    assert "lr_lp = 0.1 is at the top of the range searched (0.003–0.1)" in res.as_dict()["warning"]
    assert autotune.resolve(cfg, cache_dir=cache_dir, trials=2, search_ok=False)[1] == res  # nothing trains again
    assert len(Store(cache_dir).list_runs()) == 5
    assert autotune.edge_warning({"lr_lp": 0.5}, {"lr_lp": [0.003, 10.0]}, {}, extended=False) == ""  # inside


def test_a_non_private_search_tries_plain_step_rates_and_says_when_none_trained(searching, cache_dir, monkeypatch):
    """Without DP the step is the raw mean gradient: rates come from `PLAIN_RANGES`. Where every rate
    tried fails to train (a range 10⁶× too low here: the head stays at its random start), the resolution says
    the rate is not tuned."""
    monkeypatch.setitem(autotune.PLAIN_RANGES, "lr_lp", (1e-9, 1e-8))
    cfg = RunConfig(**{**SMALL, "strategy": "lp"}, epsilon=float("inf"))
    resolved, res = autotune.resolve(cfg, cache_dir=cache_dir, trials=2)
    tried = [r["config"]["lr_lp"] for r in Store(cache_dir).list_runs(kind="search")]
    lo, hi = min(tried), max(tried)  # the range, then the decade beyond the end whose trial had the lower loss
    assert (hi == pytest.approx(1e-8) and lo >= 1e-10 * 0.999) or (lo == pytest.approx(1e-9) and hi <= 1e-7 * 1.001)
    assert all(float(r["config"]["epsilon"]) == math.inf for r in Store(cache_dir).list_runs(kind="search"))
    assert res.proxy_accuracy <= 0.19 and "ended near chance on glyphs" in res.as_dict()["warning"]
    assert autotune.space_of(["lr_lp"], private=True)["lr_lp"] == list(autotune.RANGES["lr_lp"])


def test_pending_and_switched_off_searches_train_nothing(cache_dir, monkeypatch):
    cfg = RunConfig(**SMALL, epsilon=2.0)
    monkeypatch.setenv("DPVIZ_AUTO_SEARCH", "on")
    same, res = autotune.resolve(cfg, cache_dir=cache_dir, search_ok=False)  # what the form shows
    assert res.source == "pending" and same.auto == ("lr_lp", "lr_ft") and "8 short DP runs on glyphs" in res.note
    monkeypatch.setenv("DPVIZ_AUTO_SEARCH", "off")
    fixed, res = autotune.resolve(cfg, cache_dir=cache_dir)
    assert res.source == "default" and fixed.lr_ft == autotune.DEFAULTS["lr_ft"]
    assert Store(cache_dir).list_runs() == [] and not (cache_dir / "optuna.journal").exists() or \
        autotune.proxy_study_name(cfg, ["lr_ft"]) not in __import__("optuna").get_all_study_names(
            dpviz.sweeps.storage(None, cache_dir))


def test_a_shipped_rate_at_an_end_of_the_grids_range_warns_as_a_searched_one_does(tmp_path, monkeypatch):
    """A planted grid whose LP rate falls to the bottom of its range at small ε: the resolution at ε = 1 names
    the field, its end and the range (the sentence of the search path), one inside the range says nothing."""
    from dpviz.autotune import grid

    cfg = RunConfig(strategy="lp", epsilon=1.0)
    lo, hi = autotune.RANGES["lr_lp"]
    planted = {"version": 1, "entries": [{"key": json.loads(autotune.key_of(cfg)), "axes": [], "proxy": "glyphs",
                                       "trials": 8, "points": [{"epsilon": e, "values": {"lr_lp": lo * 4 ** i}}
                                                               for i, e in enumerate(("1", "2", "4"))]}]}
    (tmp_path / "grid.json").write_text(json.dumps(planted))
    monkeypatch.setattr(grid, "GRID_PATH", tmp_path / "grid.json")
    low, res = autotune.resolve(cfg)
    assert res.source == "shipped" and low.lr_lp == pytest.approx(lo)
    assert res.as_dict()["warning"] == (
        f"lr_lp = {lo:g} is at the bottom of the range searched ({lo:g}–{hi:g}), which the shipped grid's searches "
        "did not extend: the best rate may lie beyond it; set it by hand or tune it on the Tuning page")
    mid, res = autotune.resolve(cfg.replace(epsilon=2.0))
    assert res.source == "shipped" and lo < mid.lr_lp < hi and res.warning == ""


def test_the_real_grid_warns_where_dp_fft_reaches_the_top_of_its_range():
    """The shipped DP-FFT rate grows with ε and reaches the top of lr_ft's range at ε = 16 (and is clamped there
    beyond it); at ε = 1 it sits well inside."""
    top = autotune.RANGES["lr_ft"][1]
    for eps in (16.0, 50.0):
        cfg, res = autotune.resolve(RunConfig(strategy="fft", epsilon=eps))
        assert res.source == "shipped" and cfg.lr_ft == pytest.approx(top)
        assert f"lr_ft = {top:g} is at the top of the range searched" in res.warning
    assert autotune.resolve(RunConfig(strategy="fft", epsilon=1.0))[1].warning == ""


@pytest.mark.slow
@pytest.mark.subprocess
def test_run_says_a_shipped_edge_on_stderr_and_in_its_json(cli_env):
    out = subprocess.run([sys.executable, "-m", "dpviz", "run", "--strategy", "fft", "--epsilon", "20", "--json",
                          "--quiet"], env=cli_env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    warning = json.loads(out.stdout)["auto"]["warning"]
    assert "lr_ft = 0.3 is at the top of the range searched" in warning
    assert f"dpviz: warning: learning rates on auto: {warning}" in out.stderr


PLANTED = [{"epsilon": e, "lp_fraction": p, "values": {"lr_ft": v * (1 + p), "lr_lp": 1.0}}
           for e, v in (("1", 0.01), ("4", 0.04), ("inf", 0.5)) for p in (0.1, 0.5)]


def test_interpolation_is_log_linear_in_epsilon_linear_in_the_axis_and_clamped():
    f = lambda eps, p=0.1: autotune.interpolate(PLANTED, {"epsilon": eps, "lp_fraction": p}, ("lp_fraction",),
                                                ["lr_ft"])["lr_ft"]
    assert f(1.0) == pytest.approx(0.011) and f(4.0) == pytest.approx(0.044)
    assert f(2.0) == pytest.approx(0.022)  # halfway in log ε: the geometric mean
    assert f(0.1) == pytest.approx(0.011) and f(50.0) == pytest.approx(0.044)  # clamped at the grid's edges
    assert f(math.inf) == pytest.approx(0.55)  # no privacy has its own points
    assert f(1.0, 0.3) == pytest.approx(math.sqrt(0.011 * 0.015))


def test_the_shipped_grid_is_smoothed_by_a_power_law_in_epsilon_per_axis_group():
    # a tie at ε = 1 and 2 (one search's noise) between clean ε^1 points; no-DP points stay as searched
    raw = {"1": 0.01, "2": 0.01, "4": 0.04, "8": 0.08, "inf": 0.5}
    entry = {"axes": ["lp_fraction"], "points": [
        {"epsilon": e, "lp_fraction": p, "values": {"lr_ft": v * (1 + p)}} for e, v in raw.items() for p in (0.1, 0.5)]}
    out = {(p["epsilon"], p["lp_fraction"]): p for p in autotune.smooth(entry)["points"]}
    fit = {e: out[e, 0.1]["values"]["lr_ft"] for e in raw}
    assert fit["1"] < fit["2"] < fit["4"] < fit["8"]  # the tie is broken along the trend
    assert math.log(fit["8"] / fit["1"]) / math.log(8) == pytest.approx(1.0, abs=0.2)  # slope ≈ 1 in log-log
    assert out["2", 0.5]["values"]["lr_ft"] / fit["2"] == pytest.approx(1.5 / 1.1)  # each axis value its own line
    assert out["2", 0.1]["searched"]["lr_ft"] == pytest.approx(0.011) and fit["inf"] == pytest.approx(0.55)
    assert all(p["values"]["lr_ft"] <= autotune.RANGES["lr_ft"][1] for (e, _), p in out.items() if e != "inf")


def test_grid_builds_split_by_epsilon_merge_into_one_entry_and_a_rebuilt_point_replaces_its_old_one():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "build_auto_grid.py"
    spec = importlib.util.spec_from_file_location("build_auto_grid", path)
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)

    def entry(points, key="k"):
        return {"key": key, "axes": ["lp_fraction"], "points": [
            {"epsilon": e, "lp_fraction": p, "values": {"lr_ft": v}} for e, p, v in points]}

    other = entry([("1", 0.5, 9.0)], key="other")
    grid = build.merge([other], entry([("1", 0.1, 0.01), ("1", 0.9, 0.02)]))  # one process's ε = 1
    grid = build.merge(grid, entry([("8", 0.1, 0.08), ("1", 0.9, 0.03)]))  # the other's ε = 8, and a rebuilt point
    (k,) = [e for e in grid if e["key"] == "k"]
    got = [(p["epsilon"], p["lp_fraction"], p["values"]["lr_ft"]) for p in k["points"]]
    assert got == [("1", 0.1, 0.01), ("1", 0.9, 0.03), ("8", 0.1, 0.08)]  # ordered by ε, then the axis
    assert [e for e in grid if e["key"] == "other"] == [other]  # other keys untouched


def test_the_shipped_grid_follows_epsilon_and_answers_in_milliseconds(cache_dir):
    lows, highs = [], []
    for strategy in ("lp", "fft", "lp-fft"):
        t0 = time.perf_counter()
        low, res = autotune.resolve(RunConfig(strategy=strategy, epsilon=1.0), cache_dir=cache_dir)
        assert time.perf_counter() - t0 < 2.0  # generous: the benchmark measures it
        high, _ = autotune.resolve(RunConfig(strategy=strategy, epsilon=8.0), cache_dir=cache_dir)
        assert res.source == "shipped" and res.proxy == "glyphs" and low.auto == ()
        field = "lr_lp" if strategy == "lp" else "lr_ft"
        lows.append(getattr(low, field))
        highs.append(getattr(high, field))
    assert lows != highs  # moving ε changes the resolved rates
    assert Store(cache_dir).list_runs() == []  # nothing trained


@pytest.mark.slow
def test_auto_dp_fft_at_eps_8_beats_the_fixed_eps_1_defaults(cache_dir):
    auto = dpviz.run(RunConfig(strategy="fft", epsilon=8.0), cache_dir=cache_dir)
    fixed = dpviz.run(RunConfig(strategy="fft", epsilon=8.0, lr_ft=0.01), cache_dir=cache_dir)
    assert auto["auto"]["source"] == "shipped" and auto["config"]["lr_ft"] != 0.01
    assert auto["test_accuracy"] > fixed["test_accuracy"] + 0.05
    assert auto["epsilon_spent"] <= 8.0
    shown = Store(cache_dir).get_run(auto["run_id"])["summary"]
    assert shown["auto"]["resolved"]["lr_ft"] == auto["config"]["lr_ft"]  # `show --json` keeps where it came from


@pytest.mark.subprocess
def test_run_json_records_auto_and_the_resolution(cli_env):
    out = subprocess.run([sys.executable, "-m", "dpviz", "run", "--strategy", "lp", "--epsilon", "2", "--json",
                          "--quiet"], env=cli_env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    a = s["auto"]
    assert a["fields"] == ["lr_lp", "lr_ft"] and a["source"] == "shipped" and a["privacy_spent_on_tuning"] == 0
    assert s["config"]["lr_lp"] == a["resolved"]["lr_lp"] != autotune.DEFAULTS["lr_lp"]
    assert a["resolved"]["lr_ft"] == autotune.DEFAULTS["lr_ft"]  # lp reads no lr_ft: its auto takes the default
    assert s["epsilon_spent"] <= 2.0


def test_auto_without_a_proxy_takes_the_defaults_and_bad_values_name_the_field(tmp_path, monkeypatch):
    monkeypatch.setenv("DPVIZ_AUTO_SEARCH", "on")
    cfg, res = autotune.resolve(RunConfig(strategy="fft", dataset="mnist", data_dir=str(tmp_path)))
    assert res.source == "default" and "no public stand-in for mnist" in res.note and cfg.lr_ft == 0.01
    with pytest.raises(ConfigError, match="lr_ft: a finite number > 0 or auto"):
        RunConfig(lr_ft="fast")
    with pytest.raises(ConfigError, match="clip_norm"):
        RunConfig(clip_norm="auto")


class Counts:
    """Counts registry look-ups (`strategies.get`) and `RunConfig` constructions (each one validated)."""

    def __init__(self, monkeypatch):
        from dpviz import strategies

        self.gets = self.configs = 0
        get, post = strategies.get, RunConfig.__post_init__

        def counted_get(name):
            self.gets += 1
            return get(name)

        def counted_post(cfg):
            self.configs += 1
            post(cfg)

        monkeypatch.setattr(strategies, "get", counted_get)
        monkeypatch.setattr(RunConfig, "__post_init__", counted_post)

    def of(self, fn):
        self.gets = self.configs = 0
        out = fn()
        return out, (self.gets, self.configs)


def _finished_search(cfg, cache_dir, trials=3):
    """A search of ``cfg``'s ``lr_ft`` whose trials finished, as Optuna stores them (mid-range rates: no extension)."""
    import optuna

    from dpviz import sweeps

    study = sweeps.create_search(autotune.search_base(cfg), autotune.space_of(["lr_ft"]), trials=trials,
                                 proxy=autotune.proxy_for(cfg.dataset), cache_dir=cache_dir)
    for i, lr in enumerate((0.01, 0.02, 0.03)[:trials]):
        study.add_trial(optuna.trial.create_trial(params={"lr_ft": lr}, value=0.5 + i / 100,
                        distributions={"lr_ft": optuna.distributions.FloatDistribution(0.001, 0.3, log=True)}))


def test_one_resolve_asks_the_registry_and_builds_configs_only_the_few_times_the_design_needs(monkeypatch, searching,
                                                                                            cache_dir):
    """The query is read once: the grid answers with 3 look-ups (the query's, the grid key's hashed fields,
    the one `replace`'s validation) and 1 config; continual's stand-in adds its own class and its stand-in
    config (6, 2); a finished search opens its study, read only, by the query's name (6, 3: the search's
    base and its twin on the proxy name the study)."""
    count = Counts(monkeypatch)
    fft, continual = RunConfig(strategy="fft"), RunConfig(strategy="continual")
    (out, res), n = count.of(lambda: autotune.resolve(fft))
    assert res.source == "shipped" and out.auto == () and n == (3, 1), n
    (out, res), n = count.of(lambda: autotune.resolve(continual))
    assert res.source == "shipped" and res.note.startswith("fft's rates") and out.auto == () and n == (6, 2), n
    off_grid = RunConfig(strategy="fft", epochs=1, batch_size=512, epsilon=8.0)
    _finished_search(off_grid, cache_dir)
    (out, res), n = count.of(lambda: autotune.resolve(off_grid, cache_dir=cache_dir, trials=3))
    assert res.source == "search" and out.lr_ft == 0.03 and res.trials == 3, res
    assert n == (6, 3), n


@pytest.mark.slow
def test_a_cancelled_search_stops_inside_its_trial_and_the_next_resolution_trains_that_point(searching, cache_dir,
                                                                                           monkeypatch):
    """Cancel stops a search at the running trial's next step, not after the trial; the trial's point is
    queued again, so the resumed search still trains every point once to completion."""
    import threading

    from dpviz.errors import Cancelled
    from dpviz.training import loop

    cfg = RunConfig(**SMALL, epsilon=8.0)
    stop, real, seen = threading.Event(), loop.Loop.record, []

    def record(self, st, lr, final):
        seen.append(self.step)
        if len(seen) == 3:  # the first trial's third step: cancelled there
            stop.set()
        return real(self, st, lr, final)

    monkeypatch.setattr(loop.Loop, "record", record)
    with pytest.raises(Cancelled):
        autotune.resolve(cfg, cache_dir=cache_dir, trials=3, cancel=stop)
    assert len(seen) == 3  # no step after the cancel: stopped within the trial, not after it
    monkeypatch.setattr(loop.Loop, "record", real)
    resolved, res = autotune.resolve(cfg, cache_dir=cache_dir, trials=3)
    assert res.source == "search" and resolved.auto == ()
    study = autotune.search(cfg, ("lr_ft",), cache_dir=cache_dir, trials=3, run=False)[0]
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    (cut,) = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("error", "").startswith("Cancelled")]
    assert len({t.params["lr_ft"] for t in done}) == len(done) >= 3  # every point trained once
    assert cut.params["lr_ft"] in {t.params["lr_ft"] for t in done}  # the stopped one too


def test_rates_grid_takes_the_nearest_shipped_point_without_a_search_and_says_how_far(searching, cache_dir):
    cfg = RunConfig(**SMALL, epsilon=8.0)  # 2 epochs: off the shipped grid, which would search
    resolved, res = autotune.resolve(cfg, cache_dir=cache_dir, rates="grid")
    assert res.source == "nearest" and "epochs 20 (asked 2)" in res.note and resolved.auto == ()
    assert Store(cache_dir).list_runs(kind=None) == []  # nothing trained
    at_grid, shipped = autotune.resolve(cfg.replace(epochs=20), cache_dir=cache_dir)
    assert shipped.source == "shipped" and resolved.lr_ft == at_grid.lr_ft
    _, searched = autotune.resolve(cfg, cache_dir=cache_dir, search_ok=False)
    assert searched.source == "pending"  # the default still searches
    other, res = autotune.resolve(cfg.replace(dataset="mnist", data_dir="/nowhere"), cache_dir=cache_dir,
                                  rates="grid")
    assert res.source == "default" and "no fft on mnist" in res.note


def test_a_search_trial_time_is_measured_from_this_stores_search_runs(cache_dir):
    store = Store(cache_dir)
    cfg = RunConfig(**SMALL, epsilon=8.0)
    assert autotune.proxy.trial_seconds(cfg, store) is None  # nothing measured yet: no estimate
    for i, wall in enumerate((4.0, 6.0, 30.0)):
        c = cfg.replace(seed=i, dataset="glyphs", lr_ft=0.01, lr_lp=0.5)
        run_id, _ = store.start_run(c.hash(), c.to_json(), 10, kind="search")
        store.finish_run(run_id, "finished", summary={"wall_time_s": wall})
    assert autotune.proxy.trial_seconds(cfg, store) == 6.0  # the median
    assert autotune.proxy.trial_seconds(cfg.replace(backbone="vit"), store) is None  # another backbone's


@pytest.mark.parametrize("task", ["real-text", "real-vision"])
@pytest.mark.parametrize("strategy", ["lp", "fft", "lp-fft"])
def test_a_presets_strategies_answer_from_the_shipped_grid_without_a_search(task, strategy):
    """A preset's button, then LP, FFT or LP-FFT at any ε from 1 to 8, launches with no search of rates."""
    from dpviz import tasks
    from dpviz.autotune import grid

    for eps in (1.0, 2.0, 4.0, 8.0):
        cfg = tasks.config(task, strategy=strategy, epsilon=eps)
        assert grid.lookup(cfg, autotune.used_fields(cfg)) is not None, f"{task} {strategy} ε={eps} would search"


@pytest.mark.parametrize("bands", [2, 4])
@pytest.mark.parametrize("strategy", ["lp", "fft", "lp-fft"])
def test_a_bandmf_run_of_the_default_task_takes_shipped_rates_tuned_under_bandmf(strategy, bands):
    """The form's BandMF launch trains at once: its rates come from grid entries searched under BandMF with
    the same b (not DP-SGD's, whose noise reaches the weights differently), at every ε of the form's slider."""
    from dpviz import tasks
    from dpviz.autotune import grid

    for eps in (0.5, 1.0, 2.0, 8.0, 16.0):
        cfg = tasks.config("default", strategy=strategy, epsilon=eps, mechanism="bandmf", bands=bands)
        out, res = autotune.resolve(cfg, search_ok=False)
        assert res.source == "shipped" and not out.auto, (eps, res.note)
        key = json.loads(grid.key_of(cfg))
        assert key["mechanism"] == "bandmf" and key["bands"] == bands


def test_the_nearest_grid_rates_keep_the_run_s_mechanism_and_say_so():
    """Off the grid (b = 3, or BandMF fitted to momentum), "nearest grid rates" takes a banded entry's rates
    before any DP-SGD entry's, and the run keeps its own noise: only rates are taken."""
    from dpviz import tasks
    from dpviz.autotune import grid

    for mechanism, bands in (("bandmf", 3), ("bandmf-momentum", 4), ("bandmf-momentum", 2)):
        cfg = tasks.config("default", mechanism=mechanism, bands=bands)
        near, apart = grid.nearest_key(grid.key_of(cfg))
        assert json.loads(near)["mechanism"] == "bandmf", (mechanism, bands, apart)
        out, res = autotune.resolve(cfg, search_ok=False, rates="grid")
        assert res.source == "nearest" and out.mechanism == mechanism and out.bands == bands
        assert f"the run keeps its own noise ({mechanism}, b = {bands})" in res.note, res.note
