"""Analysis views: read cached results, queue missing ones, never compute in the page."""

from __future__ import annotations

import streamlit as st

from dpviz import results
from dpviz.analyses import PRIVACY_NOTE

from . import state


@st.cache_resource(show_spinner=False)
def _queued() -> dict:
    """(run_id, step) → the futures of the analyses this server queued for that checkpoint."""
    return {}


def queue_missing(missing: list[tuple[str, int]]) -> bool:
    """Ask the analysis threads, once per server, for checkpoints not analysed yet (e.g. runs from before);
    True while any of them is still being computed (one that failed is not asked for again)."""
    jm, queued = state.job_manager(), _queued()
    for key in missing:
        if key not in queued:
            queued[key] = jm.queue_analyses(*key)
    return any(not f.done() for key in missing if key in queued for f in queued[key])


def every(waiting: bool) -> float | None:
    """A view fragment's redraw interval: 2 s while a chosen run trains or an analysis it shows is being
    computed, so that what lands appears by itself; none otherwise."""
    return 2.0 if waiting else None


def settled(waited: bool, waiting: bool) -> None:
    """In a view's fragment: what it waited for has landed, so rerun the page once, and its fragment drops
    the timer (a slider in it then keeps its place)."""
    if waited and not waiting:
        st.rerun()


def wait_line(done: int, missing: int, what: str) -> str:
    """The count of a background analysis still being computed: how many checkpoints are ready of how many."""
    return (f"{what}: {done} of {done + missing} checkpoint{'s' * (done + missing != 1)} computed; the rest are being "
            "computed in the background (on one core at the lowest priority while a run trains) and appear here "
            "by themselves.")


def render_wait(df, what: str) -> bool:
    """Say how many of the chosen runs' checkpoints ``df`` (a results table with ``attrs["missing"]``, one row
    per analysed checkpoint and run) still waits for; True when it waits for any."""
    missing = len(df.attrs.get("missing", []))
    if missing:
        done = len(df[["run_id", "step"]].drop_duplicates()) if not df.empty else 0
        st.info(wait_line(done, missing, what), icon=":material/hourglass:")
    return bool(missing)


def request(run_id: str, name: str, step: int, **params) -> dict | None:
    """The analysis result if cached; otherwise queue it once and return None."""
    from dpviz.analyses import analyze, cached

    if (hit := cached(state.store(), run_id, name, step=step, **params)) is not None:
        return hit
    jm, key = state.job_manager(), (run_id, name, step, tuple(sorted(params.items())))
    futures = st.session_state.setdefault("_analysis_futures", {})
    fut = futures.get(key)
    if fut is None:
        futures[key] = jm.background(jm.analysis_pool, analyze, jm.store, run_id, name, step=step, **params)
        return None
    if not fut.done():
        return None
    return fut.result()


def privacy_banner() -> None:
    st.warning(PRIVACY_NOTE, icon=":material/shield:")


def analysed_runs() -> dict[str, str]:
    """Runs with feature checkpoints as {run_id: label}, the user's own newest first, then their studies'
    trials (`results.offered`); never an "auto" search's trial (`results.shown_runs`), so no page's default
    selection is one, nor a sweep's point while the user has runs of their own."""
    store = state.store()
    runs = [r for r in results.offered(results.shown_runs(store)) if store.feature_steps(r["run_id"])]
    labels = results.run_labels(runs)
    return {r["run_id"]: f"{labels[r['run_id']]} · {r['status']}" for r in runs}


def launch_preset(name: str, label: str) -> None:
    from dpviz.experiments import PRESETS

    cfgs = PRESETS[name]()
    if st.button(label, key=f"preset-{name}"):
        jm = state.job_manager()
        for cfg in cfgs:
            jm.submit(cfg)
        st.toast(f"Queued {len(cfgs)} runs ({jm.max_workers} at a time)")
