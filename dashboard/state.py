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
