"""Per-server resources: the store and the job registry."""

from __future__ import annotations

import os

import streamlit as st

from dpviz.jobs import JobManager
from dpviz.store import Store, default_cache_dir

MAX_WORKERS = max(1, min(2, os.cpu_count() or 1))  # two runs at once, one torch thread each on 2 cores


@st.cache_resource(show_spinner=False)
def job_manager() -> JobManager:
    """One job registry per server process: its threads outlive reruns and reloads."""
    return JobManager(default_cache_dir(), max_workers=MAX_WORKERS)


def store() -> Store:
    return job_manager().store


@st.cache_resource(show_spinner=False)
def umap_warmup() -> dict:
    """Compile UMAP once per server in a background thread; pages show PCA until ``ready``."""
    import threading
    import time

    status = {"ready": False, "error": None}
    if os.environ.get("DPVIZ_UMAP_WARMUP", "1") == "0":  # tests of other pages switch it off
        status["error"] = "warm-up disabled (DPVIZ_UMAP_WARMUP=0)"
        return status

    def work():
        time.sleep(5)  # let the first page render before numba takes the CPU
        try:
            from dpviz.analyses.embedding import warm_umap
            warm_umap()
            status["ready"] = True
        except Exception as e:  # noqa: BLE001 - shown on the page; PCA keeps working
            status["error"] = f"{type(e).__name__}: {e}"

    threading.Thread(target=work, name="dpviz-umap-warmup", daemon=True).start()
    return status


@st.cache_resource(show_spinner=False)
def worker_processes() -> list:
    """Sweep worker processes started by this server (they also finish if the server stops)."""
    return []


@st.cache_resource(show_spinner=False)
def scorecard() -> dict:
    """This server's one background scorecard run: its thread, progress, rows and cancel event."""
    import threading

    return {"thread": None, "done": 0, "total": 0, "claim": None, "rows": None, "error": None,
            "cancel": threading.Event()}


def start_scorecard(claims, seeds) -> None:
    """Run the scorecard in a background thread (finished runs answer from the cache: resumable)."""
    import threading

    from dpviz import reproduce

    sc = scorecard()
    if sc["thread"] is not None and sc["thread"].is_alive():
        return
    sc.update(done=0, total=0, claim=None, rows=None, error=None)
    sc["cancel"].clear()

    def progress(done, total, claim):
        sc.update(done=done, total=total, claim=claim)

    def work():
        try:
            sc["rows"] = reproduce.run(claims, seeds=seeds, cache_dir=store().root, progress=progress,
                                       cancel=sc["cancel"])
        except Exception as e:  # noqa: BLE001 - shown on the page
            sc["error"] = f"{type(e).__name__}: {e}"

    sc["thread"] = threading.Thread(target=work, name="dpviz-scorecard", daemon=True)
    sc["thread"].start()
