"""Public → private (continual) training against pure DP-FFT at the same budget."""

import streamlit as st

from dashboard import layout, runs, state
from dpviz import figures, results
from dpviz.config import RunConfig
from dpviz.errors import DpvizError

layout.page_setup("Public → private", r"""
Continual training (Bu et al. 2024) trains without DP on the public `glyphs` data first, then switches to DP-SGD on
the private data — at a chosen step, or automatically once the decelerator measured on public data has fallen
to a fraction of its peak. Its ε counts only the private phase, which has as many steps as pure DP-FFT, so both
spend the same budget. With AdamW the first moment restarts at the switch.
""")
store = state.store()

st.subheader("Continual vs pure DP-FFT")
c = st.columns(6)
k_eps = c[0].select_slider("ε ", [0.5, 1.0, 2.0, 4.0, 8.0], value=1.0, key="cu_k_eps")
k_epochs = int(c[5].number_input("epochs (private phase)", 1, 1000, 20, key="cu_k_epochs"))
k_mode = c[1].radio("switch", ["automatic", "at step"], key="cu_k_mode")
k_step = int(c[2].number_input("switch step", 0, 10000, 60, key="cu_k_step", disabled=k_mode != "at step"))
k_thr = c[3].number_input("threshold", 0.01, 0.99, 0.5, key="cu_k_thr", disabled=k_mode != "automatic",
                          help="switch once the decelerator on public data falls to this fraction of its peak")
k_opt = c[4].selectbox("optimizer", ["sgd", "adamw"], key="cu_k_opt")
try:
    k_cfg = RunConfig(strategy="continual", epsilon=k_eps, epochs=k_epochs, optimizer=k_opt, switch_threshold=k_thr,
                      switch_step=-1 if k_mode == "automatic" else k_step,
                      **({"lr_ft": 0.001} if k_opt == "adamw" else {}))
except DpvizError as e:
    layout.input_error(e)
    k_cfg = None
if k_cfg:
    runs.launch_button("Launch continual and pure DP-FFT at this budget", [k_cfg, k_cfg.replace(strategy="fft")],
                       "Launched the pair", key="cu_k_launch")
mine = [j for j in st.session_state.get("launched_jobs", [])
        if j in state.job_manager().jobs and state.job_manager().jobs[j].cfg.strategy in ("continual", "fft")]
if mine:  # the launched pairs' states at once (queued, preparing, training), until they land below
    runs.render_live(mine[-2:], curves=False, key="cu_live")

pairs = results.runs_of(store, "continual")
if pairs:
    pick = st.selectbox("continual run", [r["run_id"] for r in pairs], key="cu_k_pick",
                        format_func=lambda rid: results.run_label(store.get_run(rid)) + f" · {store.get_run(rid)['status']}")
    run = store.get_run(pick)
    twin = results.matching_run(store, run, finished_only=False, strategy="fft")
    twins = [twin["run_id"]] if twin else []

    @st.fragment(run_every=2.0 if run["status"] == "running" else None)
    def render_pair():
        ids = [pick] + twins[-1:]
        df = results.curves(store, ids, ["test_accuracy", "epsilon"])
        fig = figures.metric_curves(df, "test_accuracy")
        switch = results.switch_step(store.get_run(pick))
        if switch is not None:
            fig.add_vline(x=switch, line_dash="dot", annotation_text="public → private")
        st.plotly_chart(fig, key="cu_pair")
        runs.render_export(fig, df, [store.get_run(r)["config"] for r in ids], "dpviz_continual_vs_fft", "exp-pair")
        dec = store.metrics(pick, "decelerator_public").get("decelerator_public", [])
        if dec:
            st.plotly_chart(figures.curvature.decelerator_figure(dec, results.run_label(run), switch), key="cu_dec")
        fin = results.final_table(store, ids)
        st.dataframe(fin, hide_index=True, key="cu_pair_table")
        if not twins:
            st.caption("No pure DP-FFT twin of this run in the store yet (launch the pair above).")

    render_pair()
else:
    st.info("No continual run in the store yet: launch the pair above (their states show above while they wait "
            "and train). Their accuracy curves, the switch to private data and the decelerator that chose it "
            "appear here. Until then, the `public-first` study's pairs over seeds (shipped with dpviz, or your own "
            "runs of it from the Studies page):", icon=":material/info:")
    from dashboard import findings
    from dpviz import studies

    for i, res in enumerate(r for r in studies.available(store_root=store.root) if r.study == "public-first"):
        st.markdown(f"*{findings.heading(res)} on {res.task}*")
        findings.render_results(res, f"cu_study_{i}")
