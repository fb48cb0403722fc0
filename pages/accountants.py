"""Accountants side by side, and the batch size the curvature formula predicts for a run."""

import pandas as pd
import streamlit as st

from dashboard import analyses, layout, runs, state
from dpviz import figures, results
from dpviz.analyses import predict_batch_size
from dpviz.privacy import accountants, sigma_by_batch_size

layout.page_setup("Accountants", r"""
The noise multiplier σ that each accountant (RDP, GDP, PRV, PLD) needs for the same (ε, δ) over the same epochs, as
the batch size B grows (q = B/n, T = epochs·n/B). The decelerator of DP-SGD's per-step improvement scales with
σ²/B (see Curvature), so what matters for training is how σ²/B moves with B, and the formula can predict the
best B for a run from its measured curvature. The σ curves use no data at all: they are accounting arithmetic.
""")
store = state.store()

st.subheader("σ by batch size, per accountant")
c = st.columns([1, 1, 1, 1, 4])  # the batch sizes' chips need the width
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
fig_a = figures.curvature.accountants_figure(rows, a_eps, a_delta, a_epochs)
st.plotly_chart(fig_a, key="cu_acc")
runs.render_export(fig_a, rows, [], "dpviz_accountants", "exp-acc")
layout.reading(results.accountants_reading(rows))

st.markdown("**The batch size the formula predicts**, from a run's measured curvature at its last checkpoint:")
labels = analyses.analysed_runs()
if not labels:
    st.info("No run has checkpoints yet: launch one on the Runs or Curvature page; it is listed here as soon as its "
            "first checkpoint is stored.")
    st.stop()
analyses.privacy_banner()  # only this part reads data: curvature measured on private data; σ above is pure math
pred_run = st.selectbox("run", list(labels), format_func=labels.get, key="cu_pred_run")
acc = st.radio("accountant", accountants.names(), horizontal=True, key="cu_pred_acc")
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
    fig_p = figures.curvature.batch_prediction_figure(pred, labels[pred_run])
    st.plotly_chart(fig_p, key="cu_pred")
    layout.reading(results.batch_prediction_reading(pred, cfg["batch_size"]))

