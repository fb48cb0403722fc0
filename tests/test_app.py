"""Every dashboard page under Streamlit's AppTest: renders, has its widgets, launches, rejects bad input."""

import json
import os
import re
import time
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard.layout import PAGES
import dpviz
from dpviz import results, strategies
from dpviz.store import Store

ROOT = Path(__file__).resolve().parents[1]
WIDGETS = {"pages/runs.py": ["ε (privacy budget, log scale)", "Launch run"],
         "pages/compare.py": ["runs", "metric"],
         "pages/distortion.py": ["runs"], "pages/separability.py": ["runs"],
         "pages/budget.py": ["ε values", "LP fractions p", "seeds"],
         "pages/tuning.py": ["strategy", "ε", "trials", "lr_ft low", "lr_ft high"],
         "pages/sparse.py": ["ε values", "sparsities s", "methods", "seeds"],
         "pages/curvature.py": ["runs", "strategy", "Launch a run with 10 checkpoints"],
         "pages/accountants.py": ["batch sizes", "accountant", "run"],
         "pages/continual.py": ["Launch continual and pure DP-FFT at this budget"],
         "pages/audit.py": ["canaries M", "threat", "confidence", "Audit in the background", "strategies",
                            "Run"],
         "pages/theory.py": ["ε (whole run)", "LP share p", "width m", "Train with DP-SGD"]}
"""Widgets each page must show; every page of `dashboard.layout.PAGES` is opened whether listed or not."""


@pytest.fixture
def app_env(cache_dir, monkeypatch):
    monkeypatch.setenv("DPVIZ_CACHE_DIR", str(cache_dir))
    monkeypatch.setenv("DPVIZ_UMAP_WARMUP", "0")  # no numba compile in the background of these tests
    st.cache_resource.clear()  # a fresh job registry bound to this test's store
    st.cache_data.clear()
    yield cache_dir
    from dashboard import state
    state.job_manager().shutdown()
    st.cache_resource.clear()


def open_page(page: str) -> AppTest:
    """The app as a browser gets it: app.py registers the pages, then the page is opened."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    if page != "pages/runs.py":
        at.switch_page(page).run()
    return at


def labels(at):
    found = [w.label for kind in ("select_slider", "slider", "button", "multiselect", "selectbox", "number_input",
                                  "radio", "checkbox")
             for w in getattr(at, kind)]
    return found


@pytest.mark.parametrize("page,title", [(p, t) for p, t, _ in PAGES])
def test_page_renders_with_its_widgets(page, title, app_env, fast_cfg):
    import dpviz
    dpviz.run(fast_cfg(strategy="lp", checkpoint_every=6), cache_dir=app_env)  # something stored to show
    at = open_page(page)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.title and at.title[0].value == title
    for label in WIDGETS.get(page, []):
        assert label in labels(at), (label, labels(at))


@pytest.mark.parametrize("strategy", strategies.names())
def test_form_shows_exactly_the_strategys_fields(strategy, app_env):
    at = open_page("pages/runs.py")
    at.selectbox(key="f_strategy").set_value(strategy).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    keys = {w.key for kind in ("slider", "select_slider", "number_input", "selectbox", "radio", "checkbox",
                               "text_input") for w in getattr(at, kind)}
    cls = strategies.get(strategy)
    own = {f"f_{p.name}" for p in cls.params} | {f"f_{f}" for f in cls.lr_fields}
    every = {f"f_{f}" for name in strategies.names()
             for f in [p.name for p in strategies.get(name).params] + list(strategies.get(name).lr_fields)}
    assert own <= keys, own - keys
    assert not (every - own) & keys, (every - own) & keys  # no other strategy's field or learning rate
    assert "σ =" in at.info[0].value


@pytest.mark.slow
@pytest.mark.subprocess  # over 2 processes (torchrun) on a machine of more than one core
def test_launch_from_form_creates_a_run(app_env):
    """The form's run, here over 2 local processes (the "processes" field a multi-core machine shows) and
    keeping only its final model: one stored run whose table row says so, within its budget."""
    at = open_page("pages/runs.py")
    at.number_input(key="f_epochs").set_value(1).run()
    at.selectbox(key="f_keep_weights").set_value("final").run()
    at.select_slider(key="f_epsilon").set_value(2.0).run()
    assert "σ =" in at.info[0].value and "ε = 2" in at.info[0].value
    many = (os.cpu_count() or 1) > 1  # the field shows where there is more than one core
    assert many == any(w.key == "f_processes" for w in at.number_input)
    if many:
        at.number_input(key="f_processes").set_value(2).run()
    at.button(key="launch").click().run()
    deadline = time.time() + 120
    while time.time() < deadline:
        runs = Store(app_env).list_runs()
        if runs and runs[0]["status"] == "finished":
            break
        time.sleep(0.5)
    assert runs and runs[0]["status"] == "finished"
    assert runs[0]["config"]["epsilon"] == 2.0 and runs[0]["config"]["epochs"] == 1
    assert runs[0]["summary"]["epsilon_spent"] <= 2.0 and len(runs) == 1
    assert runs[0]["summary"].get("world_size", 1) == (2 if many else 1)
    rid = runs[0]["run_id"]
    assert runs[0]["config"]["keep_weights"] == "final" and Store(app_env).weight_steps(rid) == []
    assert (Store(app_env).run_dir(rid) / "model.pt").exists()
    assert results.final_table(Store(app_env), [runs[0]["run_id"]])["processes"].tolist() == [2 if many else 1]


@pytest.mark.parametrize("key,value,field", [("f_delta", 0.5, "delta"), ("f_strategy", "partial", "tune_blocks"),
                                             ("f_dataset", "cifar10", "data_dir")])
def test_bad_form_input_shows_error_and_launches_nothing(key, value, field, app_env):
    at = open_page("pages/runs.py")
    widget = at.selectbox(key=key) if key.startswith(("f_strategy", "f_dataset")) else at.number_input(key=key)
    widget.set_value(value).run()
    if field == "tune_blocks":  # the built-in CNN has 3 blocks
        at.number_input(key="f_tune_blocks").set_value(9).run()
    assert at.error and field in at.error[0].value
    assert f"**{field}** — {field}:" not in at.error[0].value  # the field is named once
    assert not [b for b in at.button if b.key == "launch"]
    assert Store(app_env).list_runs() == []


@pytest.mark.slow
def test_tuning_page_shows_trials_and_launches_the_best_on_private_data(app_env):
    from dpviz import sweeps
    from dpviz.config import RunConfig

    base = RunConfig(strategy="fft", epsilon=2.0, epochs=1, batch_size=512, eval_every=50)
    study = sweeps.create_search(base, {"lr_ft": [0.003, 0.3]}, trials=3, proxy="glyphs", cache_dir=app_env)
    sweeps.work(study, run=dpviz.run, cache_dir=app_env)
    assert {r["config"]["dataset"] for r in Store(app_env).list_runs()} == {"glyphs"}  # trials never saw digits
    at = open_page("pages/tuning.py")
    assert not at.exception, [e.value for e in at.exception]
    assert not at.warning  # proxy tuning: no privacy warning
    best = sweeps.best_config(study)
    assert best.dataset == "digits" and best.lr_ft == study.best_trial.params["lr_ft"]
    at.button(key="tu_launch_best").click().run()
    deadline = time.time() + 120
    while time.time() < deadline:
        mine = [r for r in Store(app_env).list_runs() if r["config"]["dataset"] == "digits"]
        if mine and mine[0]["status"] == "finished":
            break
        time.sleep(0.5)
    assert mine and mine[0]["status"] == "finished" and mine[0]["config"]["lr_ft"] == best.lr_ft


def test_tuning_page_warns_on_private_data_and_rejects_bad_ranges(app_env):
    at = open_page("pages/tuning.py")
    assert not at.warning
    private_data = next(o for o in at.radio(key="tu_where").options if o.startswith("private data"))
    at.radio(key="tu_where").set_value(private_data).run()
    assert at.warning and "not" in at.warning[0].value and "ε" in at.warning[0].value
    at.number_input(key="tu_lo_lr_ft").set_value(0.5).run()  # low > high (0.3)
    assert at.error and "lr_ft" in at.error[0].value
    assert not [b for b in at.button if b.key == "tu_launch"]


@pytest.mark.slow
def test_accountants_page_without_runs_carries_no_private_data_banner(app_env):
    from dpviz.analyses import PRIVACY_NOTE

    at = open_page("pages/accountants.py")
    assert not at.exception, [e.value for e in at.exception]
    assert PRIVACY_NOTE not in [w.value for w in at.warning]


@pytest.mark.slow
def test_reproduction_page_names_each_claim_before_any_run_and_warns_on_one_seed(app_env):
    from dpviz import reproduce

    at = open_page("pages/reproduction.py")
    assert not at.exception, [e.value for e in at.exception]
    shown = at.table[0].value  # the verdicts; each claim's statement and paper head its section
    assert list(shown["claim"]) == list(reproduce.REGISTRY)
    assert [e.label for e in at.expander][:len(shown)] == [f"{c.id}: {c.sentence}" for c in reproduce.CLAIMS]
    assert all(any(reproduce.PAPERS[c.seed][0] in x.value for x in at.caption) for c in reproduce.CLAIMS)
    assert not any("One seed" in w.value for w in at.warning)
    at.number_input(key="re_seeds").set_value(1).run()
    assert any("One seed" in w.value for w in at.warning)


def test_reproduction_page_shows_a_column_of_verdicts_per_task(app_env, monkeypatch, tmp_path):
    """Planted rows on two tasks (and a claim one task cannot read): a verdict column per task, a figure and a
    reading per task under each claim, the reason in place of the unreadable verdict."""
    from dpviz.studies import results as study_results
    from dpviz import reproduce

    def planted(claims=None, *, task="default", seeds=(0, 1, 2), changes=None, cache_dir=None, scale="small"):
        if task == "real-vision" or scale != "small":
            return []
        acc = {"default": ([0.70, 0.71, 0.72], [0.60, 0.61, 0.62]), "real-text": ([0.60, 0.61, 0.62],
                                                                                 [0.70, 0.71, 0.72])}[task]
        groups = {g: [{"test_accuracy": a, "run_id": f"{task}-{g}-{i}"} for i, a in enumerate(v)]
                  for g, v in zip(("DP-LP-FFT", "DP-FFT"), acc)}
        rows = [reproduce.row(reproduce.REGISTRY["000-lpfft"], None, groups, task)]
        return rows + ([reproduce.unreadable_row(reproduce.REGISTRY["004-public"], task)] if task == "real-text" else [])

    monkeypatch.setattr(reproduce, "stored_rows", planted)
    monkeypatch.setattr(study_results, "SHIPPED", tmp_path)  # no shipped rows either: only the planted ones
    monkeypatch.setattr(reproduce.Claim, "why_not", lambda self, task, scale="small": "no public text here" if
                        (self.id, task) == ("004-public", "real-text") else None)
    at = open_page("pages/reproduction.py")
    assert not at.exception, [e.value for e in at.exception]
    shown = at.table[0].value.set_index("claim")
    assert list(shown.columns[-3:]) == ["default", "real-text", "real-vision"]
    assert shown.loc["000-lpfft", "default"] == "agrees (3 seeds)"
    assert shown.loc["000-lpfft", "real-text"] == "does not (3 seeds)" and shown.loc["000-lpfft", "real-vision"] == "—"
    assert shown.loc["004-public", "real-text"] == reproduce.NOT_READ and shown.loc["001-shift", "default"] == "—"
    assert len(at.get("plotly_chart")) == 2  # 000-lpfft on default and on real-text; none for real-vision
    assert any("Not readable here: no public text here" in i.value for i in at.info)
    assert any("Not run yet on this task" in c.value for c in at.caption)


def test_reproduction_page_shows_a_claim_at_every_size_side_by_side(app_env, monkeypatch, tmp_path):
    """Planted rows of 000-dip on real-vision at small (in the store) and medium (only in a results file): the
    scale table has a column per size with the source marked, and one figure draws the kNN curves of both."""
    from dpviz import reproduce

    def dip(scale, knn):  # a row as the scorecard writes it, its curves from per-seed kNN series
        return {"id": "000-dip", "task": "real-vision", "scale": scale, "seed": "000", "paper": "Ke et al. 2024",
                "claim": reproduce.REGISTRY["000-dip"].sentence, "preset": f"EfficientNet-Lite0, {scale}",
                "verdict": reproduce.AGREES, "reading": f"dips at {scale}", "private_statistics": True, "seeds": 3,
                "measured": {"fft kNN dip": {"mean": 0.05, "std": 0.01}},
                "run_ids": {"fft": [f"{scale}-{i}" for i in range(3)]},
                **reproduce.scorecard.curves({"series": knn})}

    small = dip("small", {"fft": [{0: 0.8, 6: 0.7}] * 3, "lp-fft": [{0: 0.8, 6: 0.8}] * 3})
    monkeypatch.setattr(reproduce, "stored_rows", lambda claims=None, *, task="default", scale="small", **kw:
                        [small] if (task, scale) == ("real-vision", "small") else [])
    medium = dip("medium", {"fft": [{0: 0.8, 24: 0.76, 48: 0.9}] * 3, "lp-fft": [{0: 0.8, 24: 0.85, 48: 0.9}] * 3})
    ship_scorecard(monkeypatch, tmp_path, [medium], task="real-vision", scale="medium")
    at = open_page("pages/reproduction.py")
    assert not at.exception, [e.value for e in at.exception]
    table = next(t.value for t in at.table if "small (≈ 48 steps)" in t.value)
    row = table.set_index("claim").loc["000-dip"]
    assert row["small (≈ 48 steps)"] == "agrees (3 seeds)" and row["medium (≈ 516 steps)"] == "agrees (3 seeds) · file"
    assert row["large (≈ 2,016 steps)"] == "—"
    fig = json.loads(at.get("plotly_chart")[-1].proto.spec)
    assert [(t["name"], t["xaxis"]) for t in fig["data"]] == [("fft", "x"), ("lp-fft", "x"), ("fft", "x2"),
                                                            ("lp-fft", "x2")]
    assert fig["data"][2]["x"] == [0, 24, 48]


@pytest.mark.slow
def test_curvature_accountants_and_continual_pages(app_env, fast_cfg):
    import dpviz
    from dpviz.analyses import PRIVACY_NOTE
    from dpviz.analyses.service import analyze

    s = dpviz.run(fast_cfg(strategy="fft", epsilon=2.0, checkpoint_every=6), cache_dir=app_env)  # steps 0, 6, 12
    for step in Store(app_env).feature_steps(s["run_id"]):
        analyze(Store(app_env), s["run_id"], "hessian", step=step)
    at = open_page("pages/curvature.py")
    assert not at.exception, [e.value for e in at.exception]
    assert "dominates D" in " ".join(m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) >= 3  # trace, terms, blocks
    at = open_page("pages/accountants.py")
    assert not at.exception, [e.value for e in at.exception]
    warnings = [w.value for w in at.warning]  # the banner sits over the prediction only, never over σ's math
    assert warnings.count(PRIVACY_NOTE) == 1
    text = " ".join(m.value for m in at.markdown)
    assert "predicts B =" in text and "GDP needs the least σ" in text
    assert len(at.get("plotly_chart")) >= 2  # accountants, prediction
    at = open_page("pages/continual.py")
    at.number_input(key="cu_k_epochs").set_value(3).run()
    at.button(key="cu_k_launch").click().run()
    deadline = time.time() + 180
    while time.time() < deadline:
        done = {r["config"]["strategy"] for r in Store(app_env).list_runs() if r["status"] == "finished"}
        if {"continual", "fft"} <= done and len(Store(app_env).list_runs()) == 3:
            break
        time.sleep(0.5)
    runs = Store(app_env).list_runs()
    cont = [r for r in runs if r["config"]["strategy"] == "continual"][0]
    twin = [r for r in runs if r["config"]["strategy"] == "fft" and r["run_id"] != s["run_id"]][0]
    assert cont["status"] == twin["status"] == "finished"
    same = ("steps", "noise_multiplier", "sample_rate", "clip_norm")  # the same DP schedule: the same budget
    assert [{k: p[k] for k in same} for p in cont["summary"]["phases"]] == \
        [{k: p[k] for k in same} for p in twin["summary"]["phases"]]
    assert cont["summary"]["epsilon_spent"] <= 1.0


@pytest.mark.slow
def test_sparse_page_profile_mask_and_step_time(app_env):
    from dpviz import sweeps
    from dpviz.config import RunConfig

    base = RunConfig(strategy="sparse", epochs=3, batch_size=512, eval_every=50)
    points = sweeps.sparse_points(epsilons=["2"], sparsities=[0.2, 0.5], selections=["sparta", "bias"], seeds=[0])
    study = sweeps.create_grid_sweep("sparse", base, points, cache_dir=app_env)
    sweeps.work(study, run=dpviz.run, cache_dir=app_env)
    assert len(points) == 4 and len(sweeps.table(study)) == 4  # sparta at 2 s, bias, fft
    at = open_page("pages/sparse.py")
    assert not at.exception, [e.value for e in at.exception]
    text = " ".join(m.value for m in at.markdown)
    assert "SPARTA best" in text and "vs DP-FFT" in text and "masked step" in text
    sparta = [r["run_id"] for r in Store(app_env).list_runs() if r["config"].get("selection") == "sparta"
              and r["config"]["strategy"] == "sparse"]
    at.selectbox(key="sp_run").set_value(sparta[0]).run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) >= 4  # profile, mask, layer fractions, step time


def test_budget_page_draws_accuracy_and_loss_utility_curves(app_env):
    from dpviz import sweeps
    from dpviz.config import RunConfig

    base = RunConfig(epochs=1, batch_size=512, eval_every=50)
    study = sweeps.create_budget_sweep(base, sweeps.budget_grid(epsilons=["2"], fractions=[0.0, 1.0], seeds=[0]),
                                       cache_dir=app_env)
    sweeps.work(study, run=dpviz.run, cache_dir=app_env)
    at = open_page("pages/budget.py")
    assert not at.exception, [e.value for e in at.exception]
    keys = [c.key for c in at.get("plotly_chart")]
    assert {"bu_curve", "bu_curve_loss", "bu_runs"} <= set(keys), keys
    assert any("best LP share per ε" in m.value for m in at.markdown)


def test_the_app_refuses_to_serve_beyond_loopback(app_env, monkeypatch):
    """Off loopback the dashboard shows only why (it reads local paths), unless DPVIZ_ALLOW_REMOTE=1."""
    from streamlit import config

    before = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
        assert [e.value for e in at.error] and "not loopback" in at.error[0].value
        assert not at.subheader  # the Runs page was not rendered
        monkeypatch.setenv("DPVIZ_ALLOW_REMOTE", "1")
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
        assert not at.exception and "1 · Configure" in [h.value for h in at.subheader]
    finally:
        config.set_option("server.address", before)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()  # the shipped config: loopback
    assert not at.error and "1 · Configure" in [h.value for h in at.subheader]


@pytest.mark.slow
def test_audit_page_audits_and_sweeps_in_the_background_and_rejects_a_bad_sweep(app_env):
    from dashboard import state

    at = open_page("pages/audit.py")
    at.number_input(key="au_m").set_value(100).run()
    at.button(key="au_go").click().run()
    state.wait(state.task("audit"), 120)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.exception or at.error]
    shown = {m.label: m.value for m in at.metric}
    assert shown["ceiling for M = 100"] and float(shown["ε_lb (best bound)"]) <= float(shown["accountant's ε spent"])
    assert any(m.value.startswith("**Reading.** ε_lb =") for m in at.markdown)
    at.multiselect(key="au_sw_threats").set_value([]).run()
    at.button(key="au_sw_go").click().run()
    assert at.error and "threats" in at.error[0].value and not state.running(state.task("audit-sweep"))
    at.multiselect(key="au_sw_threats").set_value(["white-box"]).run()
    at.multiselect(key="au_sw_strategies").set_value(["lp"]).run()
    at.multiselect(key="au_sw_eps").set_value([1.0]).run()
    at.button(key="au_sw_go").click().run()
    state.wait(state.task("audit-sweep"), 120)
    at.run()
    assert not at.exception and not at.error
    table = at.dataframe[-1].value
    assert list(table["strategy"]) == ["lp"] and (table["epsilon_lb"] <= table["epsilon_spent"]).all()
    assert Store(app_env).list_runs() == []  # audits are not the user's runs


def test_theory_page_redraws_on_the_epsilon_slider(app_env):
    at = open_page("pages/theory.py")
    noise = [c.value for c in at.caption if c.value.startswith("noise s =")]
    at.select_slider(key="th_eps").set_value(4.0).run()
    after = [c.value for c in at.caption if c.value.startswith("noise s =")]
    assert not at.exception and not at.error and noise and after and noise != after
    assert float(after[0].split()[3]) < float(noise[0].split()[3])  # more budget, less noise
    assert len(at.get("plotly_chart")) == 5


def test_a_field_its_choice_disables_never_blocks_the_launch(app_env):
    at = open_page("pages/runs.py")
    at.selectbox(key="f_dataset").set_value("cifar10").run()
    at.text_input(key="f_data_dir").input("/some/where").run()
    at.selectbox(key="f_dataset").set_value("digits").run()  # the folder field greys out, keeping its text
    assert not at.error, [e.value for e in at.error]
    assert [b for b in at.button if b.key == "launch"]


def test_an_invalid_number_blocks_the_launch_instead_of_falling_back(app_env):
    at = open_page("pages/runs.py")
    at.number_input(key="f_batch").set_value(0).run()
    assert at.error and "batch_size" in at.error[0].value
    assert not [b for b in at.button if b.key == "launch"] and not at.info  # no preview of B = 256 either


def test_the_form_lives_in_the_url_and_survives_a_reload(app_env):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["epsilon"] = "2.0"
    at.query_params["strategy"] = "fft"
    at.run()
    assert at.select_slider(key="f_epsilon").value == 2.0 and at.selectbox(key="f_strategy").value == "fft"
    assert "ε = 2" in at.info[0].value
    at.number_input(key="f_batch").set_value(128).run()
    assert at.query_params["batch"] == "128" and at.query_params["epsilon"] == "2.0"
    at.select_slider(key="f_epsilon").set_value(1.0).run()  # back to the default: out of the URL
    assert "epsilon" not in at.query_params


def test_the_stored_runs_table_shows_a_run_as_soon_as_it_finishes(app_env):
    at = open_page("pages/runs.py")
    at.number_input(key="f_epochs").set_value(1).run()
    at.button(key="launch").click().run()  # submitted by the button's callback, before this run drew the page
    assert any("1 active" in c.value for c in at.sidebar.caption), [c.value for c in at.sidebar.caption]
    from dashboard import state
    job = next(iter(state.job_manager().jobs.values()))
    job.wait(120)
    at.run()  # what the live fragment's rerun does once the run has ended
    table = at.dataframe[0].value
    assert list(table["run_id"]) == [job.run_id] and "The store is empty." not in [c.value for c in at.caption]
    assert any("0 active" in c.value for c in at.sidebar.caption)


@pytest.mark.slow
def test_job_states_say_queued_and_searching_k_of_n(cache_dir, monkeypatch):
    """A job behind the workers is "queued (k of m …)"; a proxy search reports its trial k of n."""
    from dpviz.autotune import proxy
    from dpviz.config import RunConfig
    from dpviz.jobs import JobManager

    monkeypatch.setenv("DPVIZ_AUTO_SEARCH", "on")
    monkeypatch.setattr(proxy, "TRIALS_PER_FIELD", 0)  # a tiny search: 2 trials
    jm = JobManager(cache_dir, max_workers=1, analyses=False)
    seen = []
    cfg = RunConfig(strategy="fft", epochs=1, batch_size=512, epsilon=8.0, eval_every=50)  # off the shipped grid
    try:
        first = jm.submit(cfg)
        second = jm.submit(cfg.replace(strategy="lp", lr_lp=0.5))
        while first.phase == "queued":  # until the one worker takes the first job
            time.sleep(0.005)
        assert jm.state(second)["text"].startswith("queued (1 of 1 waiting")
        while not first.done:
            seen.append(jm.state(first)["text"])
            time.sleep(0.02)
        first.wait()
        second.wait(120)
    finally:
        jm.shutdown()
    assert any(t.startswith("searching learning rates on public data: trial 1 of 2") for t in seen), set(seen)
    assert any(t.startswith("searching learning rates on public data: trial 2 of 2") for t in seen), set(seen)
    assert any(t.startswith("training (step") for t in seen) and jm.state(first)["text"] == "finished"
    # 2 trials, and 3 more beyond the range's end when the best sits at it (`proxy.extension`)
    assert first.summary["auto"]["source"] == "search" and first.summary["auto"]["trials"] in (2, 5)


def test_a_cancelled_search_stops_between_trials(cache_dir, monkeypatch):
    from dpviz.autotune import proxy
    from dpviz.config import RunConfig
    from dpviz.jobs import JobManager

    monkeypatch.setenv("DPVIZ_AUTO_SEARCH", "on")
    monkeypatch.setattr(proxy, "TRIALS_PER_FIELD", 0)
    jm = JobManager(cache_dir, max_workers=1, analyses=False)
    try:
        job = jm.submit(RunConfig(strategy="fft", epochs=1, batch_size=512, epsilon=8.0, eval_every=50))
        queued = jm.submit(RunConfig(strategy="lp", epochs=1, batch_size=512, lr_lp=0.5))
        queued.cancel()  # never starts
        while jm.state(job)["phase"] != "searching":
            time.sleep(0.01)
        job.cancel()
        job.future.exception(120)
    finally:
        jm.shutdown()
    assert job.status == queued.status == "cancelled" and job.run_id is None
    assert {r["config"]["dataset"] for r in Store(cache_dir).list_runs()} <= {"glyphs"}  # no private run began


def test_search_runs_are_never_a_default_selection_and_the_runs_table_shows_them_on_request(app_env, fast_cfg):
    """After a search stored its trials (newer than the user's run), the distortion page's default selection is
    the user's run alone; the Runs table lists the trials only once "show search runs" is on."""
    from dpviz.training import execute
    from dpviz.store import Store

    store = Store(app_env)
    mine = dpviz.run(fast_cfg(strategy="lp", lr_lp=0.5), store=store)["run_id"]
    searched = {execute.run(fast_cfg(strategy="lp", dataset="glyphs", lr_lp=lr, seed=0, eval_every=10**6).fixed_rates(),
                            store=store, kind="search")["run_id"] for lr in (0.1, 1.0)}
    at = open_page("pages/distortion.py")
    picker = at.multiselect(key="fd_runs")
    assert picker.value == [mine] and not any(s in o for s in searched for o in picker.options)
    at = open_page("pages/runs.py")
    assert set(at.dataframe[-1].value["run_id"]) == {mine}
    at.toggle(key="runs_show_search").set_value(True).run()
    assert set(at.dataframe[-1].value["run_id"]) == {mine, *searched}


def test_the_form_warns_when_a_shipped_auto_rate_sits_at_an_end_of_its_range(app_env):
    """DP-FFT at ε = 20 takes the shipped grid's rate at the top of lr_ft's range: the form says so before
    launch, in the words of the search path; at ε = 1 it does not."""
    at = open_page("pages/runs.py")
    at.selectbox(key="f_strategy").set_value("fft").run()
    assert not [w for w in at.warning if "range searched" in w.value]
    at.select_slider(key="f_epsilon").set_value(20.0).run()
    edge = [w.value for w in at.warning if "range searched" in w.value]
    assert edge and "lr_ft = 0.3 is at the top of the range searched (0.001–0.3)" in edge[0]
    assert "shipped grid" in edge[0] and [b for b in at.button if b.key == "launch"]  # a warning, not a block


def test_a_run_that_lands_joins_the_default_selection_until_the_user_chooses(app_env, fast_cfg):
    """Feature distortion's picker follows the newest runs while nobody touched it (a run stored by another
    process joins it on the page's next rerun); once the user chose, the choice stays and the new run is only
    offered."""
    first = dpviz.run(fast_cfg(strategy="lp", lr_lp=0.5), cache_dir=app_env)["run_id"]
    at = open_page("pages/distortion.py")
    assert at.multiselect(key="fd_runs").value == [first]
    second = dpviz.run(fast_cfg(strategy="lp", lr_lp=0.5, seed=1), cache_dir=app_env)["run_id"]
    at.run()  # what the store watcher's rerun does
    assert at.multiselect(key="fd_runs").value == [second, first]
    at.multiselect(key="fd_runs").set_value([first]).run()
    third = dpviz.run(fast_cfg(strategy="lp", lr_lp=0.5, seed=2), cache_dir=app_env)["run_id"]
    at.run()
    picker = at.multiselect(key="fd_runs")
    assert picker.value == [first] and any(third in o for o in picker.options)

def test_the_form_offers_the_real_tasks_and_a_task_button_fills_it(app_env):
    """The run form lists the real datasets and backbones; "real-text" fills it with MiniLM on tweets, and the
    preview (n, σ) is the 4,000-tweet subset's, computed without loading a model."""
    at = open_page("pages/runs.py")
    offered = {o.split(" — ")[0] for o in at.selectbox(key="f_dataset").options}
    assert {"tweets", "bbc-news", "fashion-mnist", "text-csv", "text-folder"} <= offered
    assert {"minilm", "hf", "efficientnet_lite0"} <= {o.split(" — ")[0] for o in at.selectbox(key="f_backbone").options}
    assert at.number_input(key="f_max_length").disabled  # digits: no tokens
    at.button(key="task_real-text").click().run()
    assert not at.error, [e.value for e in at.error]
    assert at.selectbox(key="f_dataset").value == "tweets" and at.selectbox(key="f_backbone").value == "minilm"
    assert at.number_input(key="f_train_size").value == 4000 and at.number_input(key="f_max_length").value == 48
    assert not at.number_input(key="f_max_length").disabled
    assert "q = B/n = 0.064 over 32 steps" in at.info[0].value, at.info[0].value  # 256 / 4,000, 2 epochs
    at.selectbox(key="f_strategy").set_value("continual").run()  # the task's cheaper switch check shows
    assert at.number_input(key="f_switch_batch").value == 32 and not at.error, [e.value for e in at.error]
    at.selectbox(key="f_strategy").set_value("lp-fft").run()
    at.selectbox(key="f_backbone").set_value("cnn").run()  # an image backbone for text: one line naming it
    assert at.error and "backbone" in at.error[0].value and "minilm" in at.error[0].value
    at.button(key="task_default").click().run()
    assert at.selectbox(key="f_dataset").value == "digits" and at.number_input(key="f_train_size").value == 0


@pytest.mark.slow
def test_tuning_page_runs_a_private_search_within_one_total_and_lists_it(app_env):
    from dpviz.store import Store

    at = open_page("pages/tuning.py")
    search_option = next(o for o in at.radio(key="tu_where").options if o.startswith("private search"))
    at.radio(key="tu_where").set_value(search_option).run()
    at.selectbox(key="tu_strategy").set_value("lp").run()
    at.checkbox(key="tu_on_lr_ft").uncheck().run()
    at.checkbox(key="tu_on_lr_lp").check().run()
    at.number_input(key="tu_mean").set_value(1.0).run()
    assert not at.warning and not at.error, [e.value for e in at.error]
    assert [c for c in at.checkbox if c.key == "tu_on_batch_size"][0].disabled  # q and T stay fixed
    planned = [c.value for c in at.caption if c.value.startswith("Every trial trains at σ")]
    assert planned and "of 1 at δ = 1e-05" in planned[0]  # the plan, before anything trains
    at.button(key="tu_launch_private").click().run()
    deadline = time.time() + 180
    while time.time() < deadline:
        found = Store(app_env).searches()
        if found and found[0]["status"] == "finished":
            break
        time.sleep(0.5)
    entry = found[0]
    assert entry["status"] == "finished" and entry["epsilon_spent"] <= entry["total_epsilon"] == 1.0
    at.run()
    table = next(d.value for d in at.dataframe if "released run" in d.value.columns)
    assert list(table["search"]) == [entry["search_key"]] and list(table["released run"]) == [entry["released_run_id"]]
    assert any("Papernot & Steinke" in c.value for c in at.caption)


def test_tuning_page_shows_the_measured_comparison_and_which_wins(app_env):
    from dpviz import studies

    at = open_page("pages/tuning.py")
    assert not at.exception, [e.value for e in at.exception]
    shipped = studies.stored("private-tuning", task="default")
    verdict, sentence = studies.reading("private-tuning", shipped)
    assert any(m.value == f"**Reading.** *{verdict}*. {sentence}" for m in at.markdown), [m.value for m in at.markdown]
    tables = [d.value for d in at.dataframe if "what is released" in d.value.columns]
    cell = {"epsilon": 1.0, "method": "auto"}
    assert tables and shipped.text(cell, "accuracy") in list(tables[0]["test accuracy of the release"])


@pytest.mark.slow
def test_tuning_page_states_what_a_search_on_private_data_cost(app_env):
    from dpviz import sweeps
    from dpviz.config import RunConfig

    base = RunConfig(strategy="lp", epsilon=1.0, epochs=1, batch_size=512, eval_every=50)
    study = sweeps.create_search(base, {"lr_lp": [0.05, 5.0]}, trials=3, cache_dir=app_env)
    sweeps.work(study, run=dpviz.run, cache_dir=app_env)
    cost = sweeps.search_cost(study)
    assert cost["trials"] == 3 and 1.0 < cost["composed_epsilon"] <= 3.0
    at = open_page("pages/tuning.py")
    shown = [i.value for i in at.info if "What this search cost" in i.value]
    assert shown and f"ε = {cost['composed_epsilon']:.3g}" in shown[0]
    assert f"{cost['random_count_epsilon']['poisson']:.3g}" in shown[0]


def ship_scorecard(monkeypatch, folder, rows, *, task="default", scale="small", changes=None, command=None):
    """Plant ``rows`` as the scorecard dpviz ships for ``task`` (its one results format, `dpviz.studies.scorecard`) in
    ``folder``, which stands for ``dpviz/studies/shipped/``."""
    from dpviz.studies import scorecard as filed
    from dpviz.studies import results as study_results

    monkeypatch.setattr(study_results, "SHIPPED", folder)
    res = filed.results_of(rows, task=task, scale=scale, changes=changes, seeds=(0, 1, 2))
    res.provenance = {"command": command or f"python -m dpviz reproduce --task {task}", "machine": "2 CPU cores",
                      "date": "2026-11-26"}
    (folder / f"{filed.file_name(task, scale, changes)}.json").write_text(json.dumps(res.to_json()))


def test_reproduction_page_on_a_fresh_store_shows_the_measured_pass_beside_the_users_own(app_env, monkeypatch,
                                                                                           tmp_path):
    """No run in the store: every task's verdicts come from the project's results files, marked · file, with
    their command, machine and date; a claim the user ran shows theirs, and the file's where they differ."""
    from dpviz import reproduce

    shipped = [{**reproduce.unreadable_row(reproduce.REGISTRY[c], "default"), "verdict": v, "reading": text,
                "seeds": 3} for c, v, text in (("000-lpfft", "agrees", "LP-FFT ahead."), ("003-sparse", "partly", "Close."))]
    ship_scorecard(monkeypatch, tmp_path, shipped, command="python -m dpviz reproduce --task default")
    groups = {g: [{"test_accuracy": a, "run_id": f"{g}-{i}"} for i, a in enumerate(v)]
              for g, v in zip(("DP-LP-FFT", "DP-FFT"), ([0.6, 0.61, 0.62], [0.7, 0.71, 0.72]))}
    mine = reproduce.row(reproduce.REGISTRY["000-lpfft"], None, groups, "default")  # the user's: does not
    monkeypatch.setattr(reproduce, "stored_rows", lambda claims=None, *, task="default", scale="small", **kw:
                        [mine] if (task, scale) == ("default", "small") else [])
    at = open_page("pages/reproduction.py")
    assert not at.exception, [e.value for e in at.exception]
    shown = at.table[0].value.set_index("claim")
    assert shown.loc["003-sparse", "default"] == "partly (3 seeds) · file"
    assert shown.loc["000-lpfft", "default"] == "does not (3 seeds); file: agrees"
    assert shown.loc["003-sparse", "real-text"] == "—"
    assert any("python -m dpviz reproduce --task default" in c.value and "2026-11-26" in c.value
               for c in at.caption)


def test_the_form_says_a_launch_would_search_how_long_and_offers_the_nearest_grid_rates(app_env, monkeypatch):
    """Off the shipped grid, Launch would search: the form says so before launch, with the trials and a time
    measured from this store's search runs, and one click takes the nearest grid rates instead (no search)."""
    from dpviz import autotune

    monkeypatch.setenv("DPVIZ_AUTO_SEARCH", "on")
    monkeypatch.setattr(autotune.proxy, "trial_seconds", lambda cfg, store: 6.0)  # as if 6 s trials were stored
    at = open_page("pages/runs.py")
    at.selectbox(key="f_strategy").set_value("fft").run()
    at.number_input(key="f_epochs").set_value(2).run()  # off the grid
    (warn,) = [w.value for w in at.warning if "searches them" in w.value]
    n = autotune.trials_for(("lr_ft",))
    assert f"{n} short DP runs" in warn and f"about {n * 6} s on this machine" in warn and "6 s each" in warn
    at.button(key="f_use_grid").click().run()
    assert not at.exception and at.session_state["f_lr_ft_auto"] is False
    assert not any("searches them" in w.value for w in at.warning)  # nothing left to search
    near, _ = autotune.resolve(__import__("dpviz").RunConfig(strategy="fft", epochs=2), rates="grid")
    assert at.number_input(key="f_lr_ft").value == pytest.approx(near.lr_ft)


def test_a_running_private_search_counts_as_active_and_its_page_says_so(app_env):
    """A page task (here a private search) is active in the sidebar's count, and the Tuning page's trials section
    says a search is running rather than "No search yet"."""
    import threading

    from dashboard import state

    release = threading.Event()
    state.start_task("private-search", lambda progress, cancel: release.wait(60))
    try:
        at = open_page("pages/tuning.py")
        assert not at.exception, [e.value for e in at.exception]
        assert any("1 active (1 private search)" in c.value for c in at.sidebar.caption)
        assert any("A private search is running" in i.value for i in at.info)
        assert not any("No search yet" in i.value for i in at.info)
    finally:
        release.set()
        state.wait(state.task("private-search"), 5)


def test_the_server_runs_no_full_garbage_collection_after_each_script_run():
    """Streamlit's default runs gc.collect() after every script run; the live fragments rerun every second or two,
    and each collection over a server's heap held the GIL for most of a second: a run trained 3.5× slower with
    its page open (`bench/walk_dashboard.py`, docs/guides/real-models-and-your-data.md)."""
    import tomllib

    from browser_util import ROOT

    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["runner"]["postScriptGC"] is False


def test_reproduction_page_says_which_verdicts_correlated_noise_changes(app_env, monkeypatch, tmp_path):
    """DP-SGD's rows from the store, BandMF b = 2's only from a results file (a fresh clone's case): a table of
    both verdicts and a reading that names the claim that differs; at b = 4, with none, the command to run."""
    from dpviz import reproduce

    def row(claim, first, second):
        groups = {g: [{"test_accuracy": a, "run_id": f"{claim}-{g}-{i}"} for i, a in enumerate(v)]
                  for g, v in zip(("DP-LP-FFT", "DP-FFT"), (first, second))}
        return reproduce.row(reproduce.REGISTRY["000-lpfft"], None, groups, "default") | {"id": claim}

    good, bad = ([0.70, 0.71, 0.72], [0.60, 0.61, 0.62]), ([0.60, 0.61, 0.62], [0.70, 0.71, 0.72])
    monkeypatch.setattr(reproduce, "stored_rows", lambda claims=None, *, task="default", changes=None, **kw:
                        [row("000-lpfft", *good), row("003-sparse", *good)] if task == "default" and not changes else [])
    ship_scorecard(monkeypatch, tmp_path, [row("000-lpfft", *good), row("003-sparse", *bad)],
                   changes={"mechanism": "bandmf", "bands": 2})
    at = open_page("pages/reproduction.py")
    assert not at.exception, [e.value for e in at.exception]
    table = next(t.value for t in at.table if "BandMF b = 2" in t.value).set_index("claim")
    assert table.loc["000-lpfft", "the same?"] == "yes" and table.loc["003-sparse", "the same?"] == "no"
    assert table.loc["003-sparse", "BandMF b = 2"] == "does not (3 seeds) · file"
    assert any("1 of 2 claims read on both mechanisms get the same verdict; 003-sparse differs" in m.value
               for m in at.markdown), [m.value for m in at.markdown]
    at.selectbox(key="re_bands").set_value(4).run()
    assert any("python -m dpviz reproduce --task default --set mechanism=bandmf bands=4" in i.value for i in at.info)


def test_the_noise_choice_sets_the_mechanism_and_its_bands_and_the_budget_box_says_how_it_is_sampled(app_env):
    at = open_page("pages/runs.py")
    assert at.number_input(key="f_bands").disabled  # DP-SGD: no bands to set
    at.selectbox(key="f_mechanism").set_value("bandmf-momentum").run()
    at.number_input(key="f_bands").set_value(2).run()
    assert not at.error, [e.value for e in at.error]
    assert "BandMF fitted to SGD's momentum with b = 2 bands" in at.info[0].value
    at.selectbox(key="f_optimizer").set_value("adam").run()  # its noise fits SGD's momentum only
    assert at.error and "mechanism" in at.error[0].value and "with adam, bandmf or dp-sgd" in at.error[0].value
    assert not [b for b in at.button if b.key == "launch"]


def test_a_bandmf_form_states_what_the_bands_cost_and_what_they_buy(app_env):
    """Beside BandMF's larger σ (its cost at the same ε), the preview states κ and the net noise that reaches
    the weights, σ·√κ against DP-SGD's σ, from the library's own numbers."""
    from dpviz import tasks
    from dpviz.privacy import bandmf
    from dpviz.training import calibration

    at = open_page("pages/runs.py")
    at.selectbox(key="f_mechanism").set_value("bandmf").run()
    at.number_input(key="f_bands").set_value(4).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    text = " ".join(i.value for i in at.info)
    cfg = tasks.config("default", mechanism="bandmf", bands=4)
    prev, plain = calibration.preview(cfg), calibration.preview(cfg.replace(mechanism="dp-sgd", bands=1))
    t = calibration.bands_trade(cfg, prev, plain)
    assert t["kappa"] == pytest.approx(bandmf.noise_factor(4, prev["phases"][-1]["steps"]))
    assert t["sigma"] > t["sigma_dp_sgd"] and t["sigma_weights"] == pytest.approx(t["sigma"] * t["kappa"] ** 0.5)
    assert (f"cost σ = {t['sigma']:.2f} against DP-SGD's {t['sigma_dp_sgd']:.2f}" in text
            and f"κ = {t['kappa']:.2f}" in text and f"σ·√κ = {t['sigma_weights']:.2f}" in text), text


@pytest.mark.parametrize("page,what", [("pages/curvature.py", "Curvature"), ("pages/distortion.py", "kNN accuracy")])
def test_a_page_waiting_for_background_analyses_counts_the_checkpoints(page, what, app_env, fast_cfg):
    """A run stored by `dpviz.run` has no analyses yet (nobody queued them): the page queues them and says how
    many of its checkpoints are computed of how many, not only that something is being computed."""
    import dpviz
    from dpviz.store import Store

    s = dpviz.run(fast_cfg(strategy="lp", checkpoint_every=6), cache_dir=app_env)
    n = len(Store(app_env).feature_steps(s["run_id"]))
    at = open_page(page)
    assert not at.exception, [e.value for e in at.exception]
    counts = [re.search(rf"{what}: (\d+) of (\d+) checkpoints computed", i.value) for i in at.info]
    found = [m for m in counts if m]
    assert found and int(found[0].group(2)) == n and int(found[0].group(1)) < n, [i.value for i in at.info]
