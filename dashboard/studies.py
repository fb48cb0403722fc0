"""Sweep and search studies on the pages: launch into worker processes, pick one, watch its progress.

The budget, tuning and sparse pages all go launch → pick → progress through these three helpers.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd
import streamlit as st

from dpviz import sweeps

from . import state


def launch(study, workers: int, key: str, what: str = "Sweep") -> None:
    """Start ``workers`` worker processes on ``study`` and make it the page's chosen study."""
    state.worker_processes().extend(sweeps.start_workers(study, workers=workers, cache_dir=state.store().root))
    st.session_state[key] = study.study_name
    st.toast(f"{what} {study.study_name} started")


def pick(kind: str, key: str, label: str = "sweep", format_func: Callable | None = None):
    """A selectbox over the stored studies of ``kind`` (the last launched first), never an "auto" rate's proxy
    search; None when there are none."""
    found = sweeps.studies(cache_dir=state.store().root, kind=kind, auto=False)
    if not found:
        return None
    names = [s.study_name for s in found]
    default = names.index(st.session_state[key]) if st.session_state.get(key) in names else 0
    fmt = (lambda n: format_func(found[names.index(n)])) if format_func else str
    return found[names.index(st.selectbox(label, names, index=default, key=f"{key}_pick", format_func=fmt))]


def progress(study, noun: str = "runs", total: int | None = None) -> pd.DataFrame:
    """A progress bar of ``study``'s finished runs; returns their table (`sweeps.table`).

    ``total``: the runs the study will have (default: the trials it holds, finished or not).
    """
    rows = pd.DataFrame(sweeps.table(study))
    total = len(study.get_trials(deepcopy=False)) if total is None else total
    st.progress(min(len(rows) / max(total, 1), 1.0), text=f"{len(rows)} of {total} {noun} finished")
    return rows
