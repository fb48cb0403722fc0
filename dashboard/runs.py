"""Live runs, the store's run table, and figure export buttons."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dpviz import export, figures, results

from . import state

LIVE_METRICS = (("loss", "Training loss"), ("test_accuracy", "Test accuracy"), ("epsilon", "ε spent"))


def render_launch(cfg) -> None:
    if st.button("Launch run", type="primary", key="launch"):
        job = state.job_manager().submit(cfg)
        st.session_state["watch"] = job.job_id
        st.toast(f"Launched {cfg.strategy} at ε = {cfg.epsilon:g} in the background")


@st.fragment(run_every=1.0)
def render_live() -> None:
    """Progress, cancel, and growing curves of this server's runs (redrawn every second)."""
    jm = state.job_manager()
    jobs = sorted(jm.jobs.values(), key=lambda j: -j.job_id)[:6]
    if not jobs:
        st.caption("No run launched from this server yet: launch one above, or open stored runs below.")
        return
    for job in jobs:
        c1, c2 = st.columns([6, 1])
        frac = (job.step / job.total_steps) if job.total_steps else 0.0
        acc = job.last.get("test_accuracy")
        status = job.status if job.run_id or job.done else (
            "preparing (" + ("auto learning rates, " if job.cfg.auto else "") + "data, backbone, noise calibration)")
        text = (f"{job.run_id or '…'} · {job.cfg.strategy} ε={figures.eps_text(job.cfg.epsilon)} · "
                f"{status} · step {job.step}/{job.total_steps or '?'}"
                + (f" · test acc {acc:.3f}" if acc is not None else "") + (f" · {job.error}" if job.error else ""))
        c1.progress(min(frac, 1.0), text=text)
        if not job.done and c2.button("Cancel", key=f"cancel-{job.job_id}"):
            job.cancel()
    ids = [j.run_id for j in jobs if j.run_id]
    if ids:
        df = results.curves(state.store(), ids, [m for m, _ in LIVE_METRICS])
        cols = st.columns(len(LIVE_METRICS))
        for col, (metric, _) in zip(cols, LIVE_METRICS):
            fig = figures.metric_curves(df, metric)
            fig.update_layout(showlegend=False, height=320)  # small multiples: labels are in the bars above
            col.plotly_chart(fig, key=f"live-{metric}")


def render_run_table() -> list[str]:
    """Stored runs (finished, failed, cancelled, interrupted, running): the user's and their studies'
    trials, and the "auto" searches' trials when the toggle asks; returns the selected ids."""
    store = state.store()
    search = st.toggle("show search runs", key="runs_show_search",
                       help='the short runs on a public proxy that chose "auto" learning rates (kind "search")')
    runs = results.shown_runs(store, search=search)
    if not runs:
        st.caption("The store is empty." if search or not store.list_runs() else
                   "No run of yours yet (only search runs: turn on “show search runs”).")
        return []
    df = results.final_table(store, [r["run_id"] for r in runs]).iloc[::-1].reset_index(drop=True)
    ev = st.dataframe(df, hide_index=True, on_select="rerun", selection_mode="multi-row", key="runs_table",
                      column_config={"test_accuracy": st.column_config.NumberColumn(format="%.3f"),
                                     "epsilon_spent": st.column_config.NumberColumn(format="%.3f")})
    return [df.loc[i, "run_id"] for i in ev.selection.rows]


def render_export(fig, data: pd.DataFrame, configs: list[dict], name: str, key: str, private: bool = False,
                  caption: str | None = None) -> None:
    """Download buttons: the figure (with caption) as PNG/SVG/PDF/HTML and its data as CSV.

    ``private`` marks analyses of private data: the caption then says that the DP guarantee does not cover them.
    ``caption`` replaces the one made from ``configs`` (figures that no run configuration describes).
    """
    caption = caption or results.caption(configs)
    caption = figures.private_caption(caption) if private else caption
    cols = st.columns(5)
    for col, fmt in zip(cols, export.FORMATS):
        col.download_button(fmt.upper(), data=lambda f=fmt: export.figure_bytes(fig, f, caption=caption),
                            file_name=export.safe_filename(name, fmt), on_click="ignore", key=f"{key}-{fmt}",
                            mime={"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf",
                                  "html": "text/html"}[fmt])
    cols[4].download_button("CSV", data=lambda: export.csv_bytes(data), file_name=export.safe_filename(name, "csv"),
                            on_click="ignore", key=f"{key}-csv", mime="text/csv")
