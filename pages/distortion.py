"""Feature distortion: kNN accuracy of backbone features over training, and aligned feature maps."""

import streamlit as st

from dashboard import analyses, layout, runs, state
from dpviz import figures, results

layout.page_setup("Feature distortion", r"""
How good are the backbone's own (penultimate) features for the private task while DP fine-tuning runs?
At every feature checkpoint dpviz measures the **kNN accuracy** of the penultimate features of a fixed
evaluation subset (cosine similarity, k = 20, 2-fold cross-validation within the subset). Ke et al. 2024
predict that DP-FFT *distorts* the pretrained features early — the new head is random, so its noisy
gradients push the backbone in useless directions — and that a DP-LP phase first (LP-FFT) avoids the dip.
The map below projects the same features to 2-D (PCA fitted on all checkpoints of the run at once, so
points that do not move in feature space do not move on the map).
""")
analyses.privacy_banner()

st.subheader("Preset")
analyses.launch_preset("distortion", "Launch Ke et al. 2024's experiment: ViT, LP vs FFT vs LP-FFT at ε ∈ {1, 8} "
                                     "(6 runs)")

labels = analyses.analysed_runs()
if not labels:
    st.info("No run has feature checkpoints yet: every run stores them (step 0 and ten more), so launch one on the "
            "Runs page or the preset above; it is listed here as soon as its first checkpoint is stored.")
    st.stop()
chosen = runs.pick_runs(labels, list(labels)[:3], "fd_runs")
store = state.store()
live = any(store.get_run(r)["status"] == "running" for r in chosen)
waiting = live or analyses.queue_missing(results.analysis_curves(store, chosen, "knn", "accuracy").attrs["missing"])


@st.fragment(run_every=analyses.every(waiting))
def render_knn():
    df = results.analysis_curves(store, chosen, "knn", "accuracy")
    analyses.settled(waiting, live or analyses.queue_missing(df.attrs["missing"]))
    if not chosen:
        st.info("Choose runs above.")
        return
    analyses.render_wait(df, "kNN accuracy")
    if df.empty:
        return
    fig = figures.metric_curves(df, "knn_accuracy")
    st.plotly_chart(fig, key="fd_knn")
    configs = [r["config"] for r in runs.drawn_runs(fig, chosen)]  # a run still being analysed: not drawn
    runs.render_export(fig, df, configs, "dpviz_knn_accuracy", "exp-knn", private=True)
    layout.reading(results.knn_dip_reading(df))


render_knn()

st.subheader("Feature map")
run_id = st.selectbox("run", chosen or list(labels), format_func=labels.get, key="fd_map_run")
warm = state.umap_warmup()
methods = ["pca", "umap"] if warm["ready"] else ["pca"]
method = st.radio("map", methods, horizontal=True, key="fd_method", format_func=str.upper)
if not warm["ready"]:
    st.caption(f"PCA only: UMAP is unavailable ({warm['error']})." if warm["error"] else
               "UMAP is compiling in the background (once per server, about a minute); PCA meanwhile.")
steps = store.feature_steps(run_id)


@st.fragment(run_every=1.0 if any(analyses.request(run_id, "embedding", s, method=method) is None for s in steps)
             else None)
def render_map():
    maps = [analyses.request(run_id, "embedding", s, method=method) for s in steps]
    if any(m is None for m in maps):
        st.info(f"Computing the maps ({sum(m is not None for m in maps)}/{len(steps)} ready)… they appear here "
                "by themselves.")
        st.session_state["_fd_map_waiting"] = True
        return
    if st.session_state.pop("_fd_map_waiting", False):
        st.rerun()  # all landed: redraw once without the timer, so the map's slider is not reset every second
    frames = results.embedding_frames(maps)
    texts, names = results.feature_texts(store, run_id, steps[-1])  # text tasks: hover shows the text
    fig = figures.analyses.embedding_map(frames, labels[run_id], method, texts=texts, classes_named=names)
    st.plotly_chart(fig, key="fd_map")
    runs.render_export(fig, results.embedding_table(frames), [store.get_run(run_id)["config"]], "dpviz_feature_map",
                       "exp-map", private=True)
    layout.reading("use the step slider (or ▶) to watch the classes separate or smear as training goes on.")


render_map()
