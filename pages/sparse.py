"""Sparse fine-tuning: SPARTA and fixed sparse baselines; the accuracy / trainable-parameter profile."""

import streamlit as st

from dashboard import layout, runs, state, studies
from dpviz import catalog, figures, results, strategies
from dpviz import sweeps
from dpviz.config import RunConfig
from dpviz.errors import DpvizError

layout.page_setup("Sparse fine-tuning", r"""
**SPARTA** (Makni et al. 2025) privately chooses a small set of weight *rows* — output neurons of Linear layers, output
filters of Conv layers — then fine-tunes only those. Schedule: the head alone for 20 % of the epochs; one
**selection epoch** of ordinary DP-SGD whose noisy gradients $\tilde g = (\sum_i \mathrm{clip}(g_i) +
\mathcal N(0,\sigma^2C^2I))/B$ are summed in absolute value, $v = \sum_t |\tilde g_t|$ (no update; the accountant
counts the epoch like any other); row score $\max(0, \sum_{\text{row}} v)$ and the top $s$ of each layer's rows;
then masked DP-SGD on $W = W_0 + m \odot \Delta W$ (plus head, biases and norms), per-sample gradients clipped
after masking. Only the noisy releases reach the choice. Baselines with fixed masks: head + biases (DP-BiTFiT),
head + norm layers, top-$s$ rows by public weight magnitude, random rows — and full DP-FFT and DP-LoRA (rank-$r$
adapters, pretrained weights frozen). A masked step only touches the selected rows ("row grouping"), so it is
also cheaper.
""")

st.subheader("1 · Profile sweep")
c = st.columns([3, 4, 3])  # at 1024 px wide enough for every chip of the defaults
eps = c[0].multiselect("ε values", ["1", "2", "4", "8"], default=["1", "2", "8"], key="sp_eps")
sps = c[1].multiselect("sparsities s", [0.02, 0.05, 0.1, 0.2, 0.5, 1.0], default=[0.05, 0.2, 0.5], key="sp_s")
seeds = c[2].multiselect("seeds", list(range(5)), default=[0], key="sp_seeds")
SELECTIONS = next(p.choices for p in strategies.get("sparse").params if p.name == "selection")
c = st.columns([5, 3])
sels = c[0].multiselect("methods", SELECTIONS, default=list(SELECTIONS), key="sp_sel")
ranks = c[1].multiselect("DP-LoRA ranks r", [1, 2, 4, 8, 16], default=[1, 2, 4, 8], key="sp_lora",
                         help="low-rank adapters on every Conv/Linear layer, beside the sparse methods")
c = st.columns(4, vertical_alignment="bottom")
epochs = int(c[0].number_input("epochs", 3, 500, 20, key="sp_epochs"))
backbone = c[1].selectbox("backbone", catalog.own_backbones(), key="sp_backbone")
with_fft = c[2].checkbox("include full DP-FFT", value=True, key="sp_fft")
workers = int(c[3].number_input("workers", 1, 16, state.MAX_WORKERS, key="sp_workers"))
try:
    if not (eps and sps and sels and seeds):
        raise DpvizError("sweep: choose at least one ε, one s, one method and one seed")
    base = RunConfig(strategy="sparse", epochs=epochs, backbone=backbone)
    points = sweeps.sparse_points(epsilons=eps, sparsities=sps, selections=sels, seeds=seeds, fft=with_fft,
                                  lora_ranks=ranks)
    for p in points:
        RunConfig.from_dict({**base.to_dict(), **p})
except DpvizError as e:
    layout.input_error(e)
    base = None
if base and st.button(f"Launch profile sweep ({len(points)} runs, {workers} workers)", type="primary",
                      key="sp_launch"):
    studies.launch(sweeps.create_grid_sweep("sparse", base, points, cache_dir=state.store().root), workers, "sp_study")

st.subheader("2 · Accuracy vs trainable parameters")
store = state.store()
study = studies.pick("sparse", "sp_study")
if study is not None:

    @st.fragment(run_every=2.0)
    def render_profile():
        rows = studies.progress(study, "runs")
        if rows.empty:
            return
        table = results.profile_table(rows)
        fig = figures.sparse.profile_figure(table)
        st.plotly_chart(fig, key="sp_profile")
        st.dataframe(table, hide_index=True, key="sp_table")
        runs.render_export(fig, table, [study.user_attrs["base"]], "dpviz_sparse_profile", "exp-sparse")
        layout.reading(results.sparse_verdict(table))

    render_profile()
else:
    st.info("No sparse sweep yet: launch one above (or `python -m dpviz sweep sparse …`).")


st.subheader("3 · Which rows were selected, and what a masked step costs")
sparse_runs = results.runs_of(store, "sparse", finished_only=True)
if not sparse_runs:
    st.caption("No finished sparse run yet.")
    st.stop()
pick = st.selectbox("sparse run", [r["run_id"] for r in sparse_runs], key="sp_run",
                    format_func=lambda rid: results.run_label(store.get_run(rid))
                    + f" · {store.get_run(rid)['config']['selection']} s={store.get_run(rid)['config']['sparsity']:g}")
run = store.get_run(pick)
m = results.sparse_mask(store, pick)
cols = st.columns(2)
if m and m["mask"]:
    cols[0].plotly_chart(figures.sparse.mask_figure(m["mask"], m["rows_per_layer"], results.run_label(run)),
                         key="sp_mask")
    cols[1].plotly_chart(figures.sparse.layer_fraction_figure(run["summary"]["mask_layers"], results.run_label(run)),
                         key="sp_frac")
else:
    cols[0].caption(f"{run['config']['selection']}: no row mask (it trains the head and "
                    f"{'biases' if run['config']['selection'] == 'bias' else 'norm layers'}).")
cols[1].metric("trainable fraction of the backbone", f"{100 * run['summary']['trainable_fraction']:.2f} %")
twin = results.matching_run(store, run, strategy="fft", selection="sparta", sparsity=0.2)
reading = twin and results.step_time_reading(store, pick, twin["run_id"], "sparse", "masked")
if reading:
    layout.reading(reading)
    df = results.curves(store, [pick, twin["run_id"]], ["step_ms"])
    st.plotly_chart(figures.metric_curves(df, "step_ms"), key="sp_steps")
else:
    st.caption("Step time: run (or sweep with) the full DP-FFT of the same configuration to compare.")
