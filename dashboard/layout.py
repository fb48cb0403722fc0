"""The frame every page shares: page config, sidebar, the notebook-like sections."""

from __future__ import annotations

import re
import time
from collections import Counter

import streamlit as st

from dpviz import catalog
from dpviz.jobs import duration, time_left

from . import state

# (script, title, icon): the one list of pages; app.py registers them, the sidebar links them.
PAGES = (
    ("pages/runs.py", "Runs", ":material/rocket_launch:"),
    ("pages/compare.py", "Compare", ":material/stacked_line_chart:"),
    ("pages/distortion.py", "Feature distortion", ":material/scatter_plot:"),
    ("pages/separability.py", "Separability law", ":material/ssid_chart:"),
    ("pages/budget.py", "Budget allocation", ":material/pie_chart:"),
    ("pages/tuning.py", "Tuning", ":material/tune:"),
    ("pages/curvature.py", "Curvature", ":material/landscape:"),
    ("pages/accountants.py", "Accountants", ":material/calculate:"),
    ("pages/continual.py", "Public → private", ":material/swap_horiz:"),
    ("pages/sparse.py", "Sparse fine-tuning", ":material/grain:"),
    ("pages/studies.py", "Studies", ":material/science:"),
    ("pages/reproduction.py", "Reproduction", ":material/fact_check:"),
    ("pages/audit.py", "Privacy audit", ":material/policy:"),
    ("pages/theory.py", "Theory lab", ":material/functions:"),
)


def page_setup(title: str, intro: str, *, follow: bool = True) -> None:
    """Page config, shared sidebar and the page's heading with its explanation.

    Every page calls this first, so a deep link that Streamlit serves before
    `app.py` has run still gets the shared sidebar. ``follow``: the page lists or picks stored runs, so it
    reruns whenever a run is stored or ends, whoever ran it (`render_sidebar`).
    """
    st.set_page_config(page_title=f"dpviz · {title}", page_icon="🔒", layout="wide")
    state.umap_warmup()  # starts once per server, in the background
    render_sidebar(follow)
    st.title(title)
    st.markdown(intro)


def render_sidebar(follow: bool = True) -> None:
    jm = state.job_manager()
    with st.sidebar:
        st.markdown("### dpviz\nDifferentially private fine-tuning lab")
        # Our own links (Streamlit's automatic nav is off in .streamlit/config.toml): the same
        # sidebar whether Streamlit serves a first deep link in its legacy mode or through app.py.
        for script, title, icon in PAGES:
            st.page_link(script, label=title, icon=icon)
        st.divider()
        _render_job_count(jm, follow)
        for e in catalog.PLUGIN_ERRORS:  # a plugin named in the environment that did not import
            st.error(str(e), icon=":material/extension_off:")


def _render_job_count(jm, follow: bool) -> None:
    """The store and the background runs by state, redrawn every second while any is active.

    With ``follow`` it is also the one watcher of the store every page shares: each second it reads
    `Store.signature` (one indexed query) and reruns the whole page when a run was stored or ended since the
    page was drawn — by this server, another one, a sweep's workers or the command line — so pickers,
    tables and empty states follow the store without a reload."""
    seen = jm.store.signature() if follow else None

    @st.fragment(run_every=1.0 if follow or jm.active() or state.running_tasks() else None)
    def count():
        if follow and jm.store.signature() != seen:
            st.rerun()
        active, tasks = jm.active(), state.running_tasks()
        by = Counter(jm.state(j)["phase"] for j in active)
        by.update(label for label, _ in tasks)  # a private search, an audit, the scorecard: active too
        detail = f" ({', '.join(f'{n} {p}' for p, n in by.items())})" if by else ""
        st.caption(f"Store: `{jm.store.root}`  \nBackground runs: {len(active) + len(tasks)} active{detail}")

    count()


def plain(text: str) -> str:
    """``text`` shown as written in a Markdown element: a `*` or a word-edge `_` in a path is not emphasis, `$`
    no formula, `[…](…)` no link, `<…>` no tag (an underscore inside a word, as in field names, is kept)."""
    return re.sub(r"[\\`*$\[\]<>|~]|(?<!\w)_|_(?!\w)", lambda m: "\\" + m.group(0), str(text))


def input_error(e: Exception) -> None:
    """An error box naming the field that bad input was for, once (a `ConfigError` already starts with it); the
    message is plain text (a path or value in it is shown as typed)."""
    field, msg = getattr(e, "field", None) or "input", str(e)
    if msg.startswith(f"{field}:"):
        msg = msg[len(field) + 1:].strip()
    st.error(f"**{plain(field)}** — {plain(msg)}", icon=":material/error:")


def table(df, key: str) -> None:
    """A small table of short texts (verdicts) whose cells wrap: every column shows at 1024 px, none behind a
    horizontal scroll as in a data grid, whose columns keep their width. Cells read as Markdown."""
    st.container(key=key).table(df, hide_index=True)


def reading(text: str) -> None:
    """The one-line reading of a figure, under it."""
    st.markdown(f"**Reading.** {text}")


def render_task(t: dict, unit: str, what: str) -> None:
    """A background task's progress bar (redrawn every 2 s while it runs) or the error that stopped it.

    When the task finishes, the whole page reruns once so that its results appear.
    """
    was_running = state.running(t)

    @st.fragment(run_every=2.0 if was_running else None)
    def progress():
        if state.running(t):
            frac = t["done"] / t["total"] if t["total"] else 0.0
            left = time_left(t.get("pace"))  # measured from this task's own pace
            so_far = duration(time.time() - t["started"]) if t.get("started") else None
            st.progress(frac, text=f"{t['done']} of {t['total']} {unit} · {t['label'] or 'starting'}"
                        + (f" · {left} left" if left else "") if t["total"]
                        else f"starting the {what} (loading what it needs)" + (f": {so_far} so far" if so_far else ""))
        elif was_running:
            st.rerun()
        elif t["error"]:
            st.error(f"The {what} stopped: {plain(t['error'])}", icon=":material/error:")

    progress()
