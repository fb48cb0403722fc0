"""Per-server resources: the store and the job registry."""

from __future__ import annotations

import os
import time

import streamlit as st

from dpviz.jobs import JobManager, Pace
from dpviz.store import Store, default_cache_dir

MAX_WORKERS = max(1, min(2, os.cpu_count() or 1))  # two runs at once; one alone trains on every core


@st.cache_resource(show_spinner=False)
def job_manager() -> JobManager:
    """One job registry per server process: its threads outlive reruns and reloads."""
    return JobManager(default_cache_dir(), max_workers=MAX_WORKERS)


def store() -> Store:
    return job_manager().store


@st.cache_resource(show_spinner=False)
def umap_warmup() -> dict:
    """Compile UMAP once per server in a background thread; pages show PCA until ``ready``."""
    import time

    status = {"ready": False, "error": None}
    if os.environ.get("DPVIZ_UMAP_WARMUP", "1") == "0":  # tests of other pages switch it off
        status["error"] = "warm-up disabled (DPVIZ_UMAP_WARMUP=0)"
        return status

    def work():
        time.sleep(5)  # let the first page render before numba takes the CPU
        try:
            from dpviz.analyses import warm_umap
            warm_umap()
            status["ready"] = True
        except Exception as e:  # noqa: BLE001 - shown on the page; PCA keeps working
            status["error"] = f"{type(e).__name__}: {e}"

    job_manager().task_threads.submit(work)  # a task thread: never in front of a run's analyses
    return status


@st.cache_resource(show_spinner=False)
def worker_processes() -> list:
    """Sweep worker processes started by this server (they also finish if the server stops)."""
    return []


@st.cache_resource(show_spinner=False)
def task(name: str) -> dict:
    """This server's one background task called ``name`` (the scorecard, an audit, an audit sweep): its future
    (`dpviz.jobs.JobManager.run_task`), progress (``done`` of ``total``, ``label``), ``result``, ``error``
    and cancel event. It outlives reruns."""
    import threading

    return {"future": None, "done": 0, "total": 0, "label": None, "result": None, "error": None,
            "cancel": threading.Event()}


def running(t: dict) -> bool:
    return t["future"] is not None and not t["future"].done()


def wait(t: dict, timeout: float) -> None:
    """Wait up to ``timeout`` s for task ``t`` to end."""
    from concurrent.futures import wait as wait_for

    if t["future"] is not None:
        wait_for([t["future"]], timeout)


STARTED: set[str] = set()  # the names of the tasks this server started (`task` is cached per name)
TASK_LABELS = {"scorecard": "scorecard", "audit": "audit", "audit-sweep": "audit sweep",
               "theory-overlay": "theory overlay", "private-search": "private search"}


def running_tasks() -> list[tuple[str, dict]]:
    """(label, task) of this server's page tasks that are running now (a private search, an audit, …)."""
    return [(TASK_LABELS.get(n, n), task(n)) for n in sorted(STARTED) if running(task(n))]


def start_task(name: str, work) -> None:
    """Run ``work(progress, cancel)`` in the background unless task ``name`` is already running.

    ``progress(done, total, label)`` updates the task; what ``work`` returns becomes its ``result``.
    Work that stores what it finishes (runs, audits) resumes from the store when started again.
    """
    t = task(name)
    if running(t):
        return
    STARTED.add(name)
    t.update(done=0, total=0, label=None, result=None, error=None, started=time.time(), pace=None)
    t["cancel"].clear()

    def progress(done, total, label):
        t.update(done=done, total=total, label=label)
        pace = t["pace"]
        if done and (pace is None or done < pace.marks[-1][0] or pace.phases[0][1] != total):  # the pace from the
            t["pace"] = pace = Pace(phases=[("units", total)], eval_every=1, min_window=1)  # first unit on (a
        if done:  # new phase counting from 0 again starts a new measurement)
            pace.observe(done, time.time())

    def main(progress_, cancel):
        try:
            t["result"] = work(progress_, cancel)
        except Exception as e:  # noqa: BLE001 - shown on the page
            from dpviz.errors import DpvizError  # a user's error is its own sentence, not a class name

            t["error"] = str(e) if isinstance(e, DpvizError) else f"{type(e).__name__}: {e}"

    # on the job manager's task threads: the task and the runs training share the cores by one rule
    t["future"] = job_manager().run_task(name, main, on_progress=progress, cancel=t["cancel"]).future
