"""Curvature: tr(H), the DP decelerator, accountants side by side, public-to-private training."""

import pandas as pd
import streamlit as st

from dashboard import analyses, forms, layout, runs, state
from dpviz import figures, figures_curvature, results
from dpviz.analyses.hessian import predict_batch_size
from dpviz.config import RunConfig
from dpviz.errors import DpvizError
from dpviz.privacy.accounting import sigma_by_batch_size

layout.page_setup("Curvature", r"""
Why DP noise hurts some training far more than other (seed 004). DP-SGD's update is
$\tilde g = (\sum_i c_i g_i + \mathcal N(0, \sigma^2 C^2 I))/B$ with clip factors $c_i$ (mean $c$). A second-order
expansion of the loss (reconstructed, `../shared/NOTES.md` §4) gives the expected improvement per step
$\mathbb E[\Delta L] \approx \eta c\, G^\top G - \tfrac{\eta^2}{2} c^2 D$ with
$D = G^\top H G + \mathrm{tr}(H\Sigma)/B + \sigma^2 C^2\, \mathrm{tr}(H)/(B^2 c^2)$,
so at the best learning rate the loss falls by $(G^\top G)^2 / (2D)$. The last term, the **decelerator**, is the
only one DP adds: it is large where the Hessian trace $\mathrm{tr}(H)$ is large. (Seed 004 writes it
$\sigma^2 \mathrm{tr}(H)/(B c^2)$ with σ normalised per example; dpviz uses its own σ, C, B as the DP step does.)
$\mathrm{tr}(H)$ is Hutchinson's estimate — the mean of $v^\top H v$ over Rademacher vectors, each $Hv$ a
double-backprop Hessian-vector product on the plain model in evaluation mode, on a fixed batch of 256 private
training examples — stopped at 5 % standard error or 100 probes; $\mathrm{tr}(H\Sigma)$ averages
$(g_i - G)^\top H (g_i - G)$ over 16 examples. Computed in the background at every checkpoint of every run.
""")
analyses.privacy_banner()
store = state.store()

st.subheader("1 · Curvature over training")
c = st.columns([2, 2, 3])
eps_new = c[0].select_slider("ε", [0.5, 1.0, 2.0, 4.0, 8.0, 16.0], value=2.0, key="cu_eps")
strat_new = c[1].selectbox("strategy", ["fft", "lp-fft", "continual"], key="cu_strategy")
if c[2].button("Launch a run with 10 checkpoints", key="cu_launch"):
    base = RunConfig(strategy=strat_new, epsilon=eps_new)
    total = forms.preview_total(base)
    job = state.job_manager().submit(base.replace(checkpoint_every=max(1, total // 10)))
    st.toast(f"Launched {strat_new} at ε = {eps_new:g} with a checkpoint every {max(1, total // 10)} steps")

labels = analyses.analysed_runs()
if not labels:
    st.info("No run has checkpoints yet: launch one above.")
    st.stop()
chosen = st.multiselect("runs", list(labels), default=list(labels)[:2], format_func=labels.get, key="cu_runs")
live = any(store.get_run(r)["status"] == "running" for r in chosen)


@st.fragment(run_every=2.0 if live else None)
def render_curvature():
    df = results.curvature_table(store, chosen)
    analyses.queue_missing(df.attrs["missing"])
    if df.empty:
        st.info("Curvature is being computed in the background…")
        return
    configs = [store.get_run(r)["config"] for r in chosen]
    cols = st.columns(2)
    fig = figures_curvature.trace_figure(df)
    cols[0].plotly_chart(fig, key="cu_trace")
    fig_t = figures_curvature.terms_figure(df)
    cols[1].plotly_chart(fig_t, key="cu_terms")
    first = df[df["run_id"] == df["run_id"].iloc[0]]
    blocks = df.attrs["blocks"]
    fig_b = figures_curvature.blocks_figure(blocks[blocks["run_id"] == first["run_id"].iloc[0]], first["label"].iloc[0])
    st.plotly_chart(fig_b, key="cu_blocks")
    st.dataframe(df.drop(columns=["strategy"]), hide_index=True, key="cu_table")
    runs.render_export(fig_t, df, configs, "dpviz_curvature_terms", "exp-curv", private=True)
    last = df.sort_values("step").groupby("run_id").tail(1)
    layout.reading("; ".join(
        f"{r.label} at step {r.step}: {r.dominant} dominates D (decelerator {r.decelerator:.3g} vs "
        f"GᵀHG {r.curvature:.3g}, tr(HΣ)/B {r.sampling:.3g})" for r in last.itertuples())
        + ". A negative tr(H) (an indefinite Hessian, common right after a random head is attached) makes "
          "the second-order picture unreliable at that step.")


render_curvature()

st.subheader("2 · Accountants side by side")
c = st.columns(5)
a_eps = c[0].number_input("ε", 0.05, 100.0, 2.0, key="cu_a_eps")
a_delta = c[1].number_input("δ", 1e-12, 0.1, 1e-5, format="%.1e", key="cu_a_delta")
a_epochs = int(c[2].number_input("epochs", 1, 1000, 20, key="cu_a_epochs"))
a_n = int(c[3].number_input("dataset size n", 10, 10**8, 1437, key="cu_a_n"))
a_bs = c[4].multiselect("batch sizes", [16, 32, 64, 128, 256, 512, 1024, 1437],
                        default=[16, 32, 64, 128, 256, 512, 1024], key="cu_a_bs")


@st.cache_data(show_spinner="Calibrating σ for every accountant and batch size…", max_entries=64)
def _sigmas(eps, delta, epochs, n, bs):
    return pd.DataFrame(sigma_by_batch_size(epsilon=eps, delta=delta, epochs=epochs, dataset_size=n, batch_sizes=bs))


try:
    rows = _sigmas(a_eps, a_delta, a_epochs, a_n, tuple(sorted(a_bs)))
except ValueError as e:
    st.error(str(e), icon=":material/error:")
    st.stop()
fig_a = figures_curvature.accountants_figure(rows, a_eps, a_delta, a_epochs)
st.plotly_chart(fig_a, key="cu_acc")
runs.render_export(fig_a, rows, [], "dpviz_accountants", "exp-acc")
piv = rows.pivot(index="batch_size", columns="accountant", values="noise_multiplier")
layout.reading(f"at every B GDP needs the least σ and RDP the most (RDP/PRV σ ratio "
               f"{(piv['rdp'] / piv['prv']).min():.3f}–{(piv['rdp'] / piv['prv']).max():.3f}); σ grows with B, "
               f"but σ²/B changes only {rows['sigma2_over_b'].max() / rows['sigma2_over_b'].min():.2f}× over these B.")

st.markdown("**The batch size the formula predicts**, from a run's measured curvature at its last checkpoint:")
pred_run = st.selectbox("run", list(labels), format_func=labels.get, key="cu_pred_run")
acc = st.radio("accountant", ["prv", "rdp", "gdp"], horizontal=True, key="cu_pred_acc")
steps = store.feature_steps(pred_run)
res = results.cached_analysis(store, pred_run, steps[-1], "hessian") if steps else None
cfg = store.get_run(pred_run)["config"]
if res is None or str(cfg["epsilon"]) == "inf":
    st.caption("Needs a private run whose last checkpoint's curvature is computed.")
else:
    @st.cache_data(max_entries=64, show_spinner="Predicting…")
    def _predict(run_id, step, acc, eps, delta, epochs, n, bs):
        return predict_batch_size(res, epsilon=eps, delta=delta, epochs=epochs, n=n, batch_sizes=bs, accountant=acc)

    pred = _predict(pred_run, steps[-1], acc, float(cfg["epsilon"]), cfg["delta"], cfg["epochs"], a_n,
                    tuple(b for b in sorted(a_bs) if b <= a_n))
    fig_p = figures_curvature.batch_prediction_figure(pred, labels[pred_run])
    st.plotly_chart(fig_p, key="cu_pred")
    layout.reading(f"the formula predicts B = {pred['best_batch_size']} as best for this run's budget "
                   f"(it used B = {cfg['batch_size']}); a local prediction from one checkpoint, not a simulation.")

st.subheader("3 · Public → private (continual) vs pure DP")
st.markdown("Continual training trains without DP on the public `glyphs` data first, then switches to DP-SGD on "
            "the private data — at a chosen step, or automatically once the decelerator measured on public data "
            "has fallen to a fraction of its peak. Its ε counts only the private phase, which has as many steps "
            "as pure DP-FFT, so both spend the same budget. With AdamW the first moment restarts at the switch.")
c = st.columns(6)
k_eps = c[0].select_slider("ε ", [0.5, 1.0, 2.0, 4.0, 8.0], value=1.0, key="cu_k_eps")
k_epochs = int(c[5].number_input("epochs (private phase)", 1, 1000, 20, key="cu_k_epochs"))
k_mode = c[1].radio("switch", ["automatic", "at step"], key="cu_k_mode")
k_step = int(c[2].number_input("switch step", 0, 10000, 60, key="cu_k_step", disabled=k_mode != "at step"))
k_thr = c[3].number_input("threshold (fraction of peak)", 0.01, 0.99, 0.5, key="cu_k_thr",
                          disabled=k_mode != "automatic")
k_opt = c[4].selectbox("optimizer", ["sgd", "adamw"], key="cu_k_opt")
try:
    k_cfg = RunConfig(strategy="continual", epsilon=k_eps, epochs=k_epochs, optimizer=k_opt, switch_threshold=k_thr,
                      switch_step=-1 if k_mode == "automatic" else k_step,
                      **({"lr_ft": 0.001} if k_opt == "adamw" else {}))
except DpvizError as e:
    st.error(f"**{getattr(e, 'field', 'input')}** — {e}", icon=":material/error:")
    k_cfg = None
if k_cfg and st.button("Launch continual and pure DP-FFT at this budget", key="cu_k_launch"):
    jm = state.job_manager()
    jm.submit(k_cfg)
    jm.submit(k_cfg.replace(strategy="fft"))
    st.toast("Launched the pair")

pairs = [r for r in reversed(store.list_runs()) if r["config"]["strategy"] == "continual"]
if pairs:
    pick = st.selectbox("continual run", [r["run_id"] for r in pairs], key="cu_k_pick",
                        format_func=lambda rid: results.run_label(store.get_run(rid)) + f" · {store.get_run(rid)['status']}")
    run = store.get_run(pick)
    twin_cfg = RunConfig.from_dict(run["config"]).replace(strategy="fft")
    twins = [r["run_id"] for r in store.list_runs() if r["config_hash"] == twin_cfg.hash()]

    @st.fragment(run_every=2.0 if run["status"] == "running" else None)
    def render_pair():
        ids = [pick] + twins[-1:]
        df = results.curves(store, ids, ["test_accuracy", "epsilon"])
        fig = figures.metric_curves(df, "test_accuracy")
        switch = (store.get_run(pick)["summary"] or {}).get("public_phase", {}).get("step")
        if switch is not None:
            fig.add_vline(x=switch, line_dash="dot", annotation_text="public → private")
        st.plotly_chart(fig, key="cu_pair")
        runs.render_export(fig, df, [store.get_run(r)["config"] for r in ids], "dpviz_continual_vs_fft", "exp-pair")
        dec = store.metrics(pick, "decelerator_public").get("decelerator_public", [])
        if dec:
            st.line_chart(pd.DataFrame(dec, columns=["step", "decelerator (public batch)"]).set_index("step"),
                          height=220)
        fin = results.final_table(store, ids)
        st.dataframe(fin, hide_index=True, key="cu_pair_table")
        if not twins:
            st.caption("No pure DP-FFT twin of this run in the store yet (launch the pair above).")

    render_pair()
