"""Separability law: per-layer fuzziness and prediction residual, their geometric fit, over training."""

import streamlit as st

from dashboard import analyses, layout, runs, state
from dpviz import figures, results

layout.page_setup("Separability law", r"""
He & Su's **law of data separation**: for the features of each layer l (index 0 is the input), the
fuzziness $D_l = \mathrm{Tr}(SS_w \cdot SS_b^{+})$ — within-class scatter measured against the pseudo-inverse
of the between-class scatter, both n-weighted — decays geometrically with depth, $D_l \approx \rho^l D_0$.
(The anonymous ViT study prints the product the other way round, $\mathrm{Tr}(SS_b \cdot SS_w^{+})$;
He & Su's code and dpviz
use the order above, the quantity that decays.) The **prediction residual** $PR_l$ is the mean squared error
of a least-squares read-out (with intercept) of the one-hot label from layer l, divided by the label's
variance. The anonymous ViT study finds that DP noise with badly chosen hyperparameters destroys the law,
and that with tuned
ones it survives for any number of tuned blocks. Features are the CLS token (ViT) or pooled channels (CNN).
""")
analyses.privacy_banner()

st.subheader("Preset")
analyses.launch_preset("law", "Launch the anonymous ViT study's experiment: ViT, tune the last 1…4 blocks at "
                              "ε ∈ {1, 8}, constant vs tuned learning rate (16 runs)")

labels = analyses.analysed_runs()
if not labels:
    st.info("No run has feature checkpoints yet: launch the preset above, or any run on the Runs page (every run "
            "stores them); it is listed here as soon as its first checkpoint is stored.")
    st.stop()
store = state.store()
chosen = runs.pick_runs(labels, list(labels)[:4], "sl_runs")
which = st.radio("checkpoint", ["last", "first"], horizontal=True, key="sl_ckpt")
live = any(store.get_run(r)["status"] == "running" for r in chosen)
QUANTITIES = (("separability", "fuzziness", "fuzziness D_l"), ("residual", "residual", "prediction residual PR_l"))
waiting = live or analyses.queue_missing([m for name, field, _ in QUANTITIES
                                          for m in results.law_series(store, chosen, name, field, checkpoint=which)[1]])


@st.fragment(run_every=analyses.every(waiting))
def render_law():
    pending = False
    for name, field, quantity in QUANTITIES:
        ss, missing = results.law_series(store, chosen, name, field, checkpoint=which)
        pending = analyses.queue_missing(missing) or pending
        if not ss:
            st.info(f"{quantity}: being computed in the background… it appears here by itself.")
            continue
        fig = figures.analyses.law_plot(ss, quantity)
        st.plotly_chart(fig, key=f"sl_{name}")
        table = results.law_table(ss)
        st.dataframe(table, hide_index=True, key=f"sl_table_{name}")
        configs = [r["config"] for r in runs.drawn_runs(fig, chosen)]  # a run still being analysed: not drawn
        runs.render_export(fig, table, configs, f"dpviz_{field}_per_layer", f"exp-{name}", private=True)
        layout.reading(results.law_reading(ss, quantity))
    if chosen:
        rid = chosen[0]
        table = results.layer_table(store, rid, "separability", "fuzziness")
        if len(table):
            fig = figures.analyses.layer_heatmap(table, "D_l", labels[rid])
            st.plotly_chart(fig, key="sl_heat")
            runs.render_export(fig, table, [store.get_run(rid)["config"]], "dpviz_fuzziness_heatmap", "exp-heat",
                               private=True)
    analyses.settled(waiting, live or pending)


render_law()
