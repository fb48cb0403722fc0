"""Budget allocation: how to split ε between linear probing and full fine-tuning."""

import pandas as pd
import streamlit as st

from dashboard import layout, runs, state, studies
from dpviz import catalog, figures, results
from dpviz import autotune
from dpviz import sweeps
from dpviz.config import AUTO, RunConfig
from dpviz.errors import DpvizError

layout.page_setup("Budget allocation", r"""
LP-FFT spends a share p of its steps — and, with one noise multiplier for the whole run, exactly the same
share of its privacy loss — on linear probing, the rest on full fine-tuning. Ke et al. 2024 predict a **utility
curve** with an interior optimum in p, and that the best LP share **grows as ε shrinks**. A sweep over
(ε, p, seed) is an Optuna study (grid sampler); its runs go to background worker processes and every point is
an ordinary stored run, so the other pages can open it. Relaunching the same sweep only runs missing points.
""")

st.subheader("1 · Sweep")
c1, c2 = st.columns([3, 2])  # the eleven fractions' chips get a row of their own: every one shows
eps = c1.multiselect("ε values", ["0.5", "1", "2", "4", "8", "inf"], default=["1", "2", "8"], key="bu_eps")
seeds = c2.multiselect("seeds", list(range(5)), default=[0], key="bu_seeds")
fractions = st.multiselect("LP fractions p", [round(0.1 * i, 1) for i in range(11)],
                           default=[round(0.1 * i, 1) for i in range(11)], key="bu_p")
c = st.columns(5)


def lr_widget(box, field: str, label: str):
    """A learning rate: "auto" by default (as on the Runs page: each point's rates chosen on public data for
    its ε and p, so a point and the same run launched on the Runs page agree), or a number typed in."""
    auto = box.toggle(f"{label} auto", value=True, key=f"bu_{field}_auto",
                      help="auto: chosen for each point's ε and LP share on public data only (no privacy spent)")
    value = box.number_input(label, 1e-5, 100.0, autotune.DEFAULTS[field], format="%.4g", key=f"bu_{field}",
                             disabled=auto, label_visibility="collapsed")
    return AUTO if auto else value


base_fields = {"backbone": c[0].selectbox("backbone", catalog.own_backbones(), key="bu_backbone"),
               "epochs": int(c[1].number_input("epochs", 1, 500, 20, key="bu_epochs")),
               "lr_lp": lr_widget(c[2], "lr_lp", "LR (LP)"),
               "lr_ft": lr_widget(c[3], "lr_ft", "LR (FT)")}
workers = int(c[4].number_input("workers", 1, 16, state.MAX_WORKERS, key="bu_workers"))
try:
    base = RunConfig(strategy="lp-fft", **base_fields)
    for e in eps:
        base.replace(epsilon=e)
    if not (eps and fractions and seeds):
        raise DpvizError("sweep: choose at least one ε, one fraction and one seed")
except DpvizError as e:
    st.error(str(e), icon=":material/error:")
    base = None
space = sweeps.budget_grid(epsilons=sorted(eps, key=lambda e: float(e)), fractions=sorted(fractions),
                           seeds=sorted(seeds)) if base else None
if base and st.button(f"Launch sweep ({len(eps) * len(fractions) * len(seeds)} runs, {workers} workers)",
                      type="primary", key="bu_launch"):
    studies.launch(sweeps.create_budget_sweep(base, space, cache_dir=state.store().root), workers, "bu_study")

st.subheader("2 · Utility curve")
study = studies.pick("budget", "bu_study")
if study is None:
    st.info("No budget sweep yet: launch one above (or `python -m dpviz sweep budget …`). Until then, the ε × LP-share "
            "trade-off as the `split` study measured it, per mechanism (shipped with dpviz, or your own runs of it "
            "from the Studies page):")
    from dashboard import findings
    from dpviz import studies as registered

    for i, res in enumerate(r for r in registered.available(store_root=state.store().root) if r.study == "split"):
        st.markdown(f"*{findings.heading(res)} on {res.task}*")
        findings.render_results(res, f"bu_split_{i}")
    st.stop()
name = study.study_name


@st.fragment(run_every=2.0)
def render_curve():
    rows = studies.progress(study, "points")
    if rows.empty:
        return
    fig = figures.utility_curve(rows)
    cols = st.columns(2)
    cols[0].plotly_chart(fig, key="bu_curve")
    cols[1].plotly_chart(figures.utility_curve(rows, "test_loss"), key="bu_curve_loss")
    store = state.store()
    configs = [store.get_run(r)["config"] for r in results.stored_ids(store, rows["run_id"])]
    runs.render_export(fig, rows, configs, f"dpviz_utility_{name}", "exp-utility")
    layout.reading(results.budget_reading(rows))


render_curve()

st.subheader("3 · Training curves at one LP fraction")
rows = pd.DataFrame(sweeps.table(study))
if len(rows):
    p = st.select_slider("LP fraction", sorted(rows["lp_fraction"].unique()), key="bu_slider")
    ids = results.stored_ids(state.store(), rows[rows["lp_fraction"] == p]["run_id"])
    if ids:
        df = results.curves(state.store(), ids)
        fig = figures.metric_curves(df, "test_accuracy")
        st.plotly_chart(fig, key="bu_runs")
