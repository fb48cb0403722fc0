"""Analysis views: read cached results, queue missing ones, never compute in the page."""

from __future__ import annotations

import streamlit as st

from dpviz import results
from dpviz.analyses import PRIVACY_NOTE

from . import state


def queue_missing(missing: list[tuple[str, int]]) -> None:
    """Ask the analysis thread for checkpoints not analysed yet (e.g. runs from before)."""
    jm = state.job_manager()
    for rid, step in missing:
        jm.queue_analyses(rid, step)


def request(run_id: str, name: str, step: int, **params) -> dict | None:
    """The analysis result if cached; otherwise queue it once and return None."""
    from dpviz.analyses.service import analyze, cached

    if (hit := cached(state.store(), run_id, name, step=step, **params)) is not None:
        return hit
    jm, key = state.job_manager(), (run_id, name, step, tuple(sorted(params.items())))
    futures = st.session_state.setdefault("_analysis_futures", {})
    fut = futures.get(key)
    if fut is None:
        futures[key] = jm.analysis_pool.submit(analyze, jm.store, run_id, name, step=step, **params)
        return None
    if not fut.done():
        return None
    return fut.result()


def privacy_banner() -> None:
    st.warning(PRIVACY_NOTE, icon=":material/shield:")


def analysed_runs() -> dict[str, str]:
    """Runs with feature checkpoints, newest first, as {run_id: label}; never an "auto" search's trial
    (`results.shown_runs`), so no page's default selection is one."""
    store = state.store()
    return {r["run_id"]: results.run_label(r) + f" · {r['status']}" for r in reversed(results.shown_runs(store))
            if store.feature_steps(r["run_id"])}


def launch_preset(name: str, label: str) -> None:
    from dpviz.presets import PRESETS

    cfgs = PRESETS[name]()
    if st.button(label, key=f"preset-{name}"):
        jm = state.job_manager()
        for cfg in cfgs:
            jm.submit(cfg)
        st.toast(f"Queued {len(cfgs)} runs ({jm.max_workers} at a time)")
