"""Curvature: tr(H) and the DP decelerator over training."""

import streamlit as st

from dashboard import analyses, forms, layout, runs, state
from dpviz import figures, results, strategies
from dpviz.config import RunConfig

layout.page_setup("Curvature", r"""
Why DP noise hurts some training far more than other (Bu et al. 2024). DP-SGD's update is
$\tilde g = (\sum_i c_i g_i + \mathcal N(0, \sigma^2 C^2 I))/B$ with clip factors $c_i$ (mean $c$). A second-order
expansion of the loss (our reconstruction of Bu et al. 2024's analysis) gives the expected improvement per step
$\mathbb E[\Delta L] \approx \eta c\, G^\top G - \tfrac{\eta^2}{2} c^2 D$ with
$D = G^\top H G + \mathrm{tr}(H\Sigma)/B + \sigma^2 C^2\, \mathrm{tr}(H)/(B^2 c^2)$,
so at the best learning rate the loss falls by $(G^\top G)^2 / (2D)$. The last term, the **decelerator**, is the
only one DP adds: it is large where the Hessian trace $\mathrm{tr}(H)$ is large. (Bu et al. 2024 write it
$\sigma^2 \mathrm{tr}(H)/(B c^2)$ with σ normalised per example; dpviz uses its own σ, C, B as the DP step does.)
For a **BandMF** run the decelerator is multiplied by κ, the per-step variance of the noise left in the running
sum of updates relative to independent noise (0.56 at b = 2, 0.31 at b = 4): its correlated noise partly
cancels (the Correlated noise guide measures it).
$\mathrm{tr}(H)$ is Hutchinson's estimate — the mean of $v^\top H v$ over Rademacher vectors, each $Hv$ a
double-backprop Hessian-vector product on the plain model in evaluation mode, on a fixed batch of 256 private
training examples — stopped at 5 % standard error or 100 probes; $\mathrm{tr}(H\Sigma)$ averages
$(g_i - G)^\top H (g_i - G)$ over 16 examples. Computed in the background at every checkpoint of every run.
""")
analyses.privacy_banner()
store = state.store()

st.subheader("Curvature over training")
c = st.columns([2, 2, 3], vertical_alignment="bottom")
eps_new = c[0].select_slider("ε", [0.5, 1.0, 2.0, 4.0, 8.0, 16.0], value=2.0, key="cu_eps")
names = list(strategies.names())
strat_new = c[1].selectbox("strategy", names, index=names.index("fft"), key="cu_strategy")
if c[2].button("Launch a run with 10 checkpoints", key="cu_launch"):
    base = RunConfig(strategy=strat_new, epsilon=eps_new)
    total = forms.preview_total(base)
    job = state.job_manager().submit(base.replace(checkpoint_every=max(1, total // 10)))
    st.toast(f"Launched {strat_new} at ε = {eps_new:g} with a checkpoint every {max(1, total // 10)} steps")

labels = analyses.analysed_runs()
if not labels:
    st.info("No run has checkpoints yet: launch one above.")
    st.stop()
chosen = runs.pick_runs(labels, list(labels)[:2], "cu_runs")
live = any(store.get_run(r)["status"] == "running" for r in chosen)
waiting = live or analyses.queue_missing(results.curvature_table(store, chosen).attrs["missing"])


@st.fragment(run_every=analyses.every(waiting))
def render_curvature():
    df = results.curvature_table(store, chosen)
    analyses.settled(waiting, live or analyses.queue_missing(df.attrs["missing"]))
    if not chosen:
        st.info("Choose runs above.")
        return
    analyses.render_wait(df, "Curvature")
    if df.empty:
        return
    cols = st.columns(2)
    fig = figures.curvature.trace_figure(df, {r: results.phase_switch(store.get_run(r)) for r in chosen})
    cols[0].plotly_chart(fig, key="cu_trace")
    fig_t = figures.curvature.terms_figure(df)
    cols[1].plotly_chart(fig_t, key="cu_terms")
    first = df[df["run_id"] == df["run_id"].iloc[0]]
    blocks = df.attrs["blocks"]
    fig_b = figures.curvature.blocks_figure(blocks[blocks["run_id"] == first["run_id"].iloc[0]], first["label"].iloc[0])
    st.plotly_chart(fig_b, key="cu_blocks")
    st.dataframe(df.drop(columns=["strategy"]), hide_index=True, key="cu_table")
    configs = [r["config"] for r in runs.drawn_runs(fig_t, chosen)]  # a run still being analysed: not drawn
    runs.render_export(fig_t, df, configs, "dpviz_curvature_terms", "exp-curv", private=True)
    layout.reading(results.curvature_reading(df))


render_curvature()

