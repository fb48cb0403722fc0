"""Live runs, the store's run table, and figure export buttons."""

from __future__ import annotations

import html
import json
import re
import time
import uuid

import pandas as pd
import streamlit as st

from dpviz import figures, results
from dpviz.figures import export
from dpviz.privacy import release

from . import state

LIVE_METRICS = ("loss", "test_accuracy", "epsilon")


def _launch(cfgs, what: str) -> None:
    """Button callback: submit before the page reruns, so that the sidebar's count, the job list and the
    pair's states are there in the very run the click causes."""
    from . import forms

    jm = state.job_manager()
    n = forms.processes() if len(cfgs) == 1 else 1  # a page's batch of runs: one process each
    before = {id(j): j.joined for j in jm.jobs.values()}
    jobs = [jm.submit(c, processes=n) for c in cfgs]
    joined = [j for j in jobs if j.joined > before.get(id(j), 0)]
    st.session_state["watch"] = jobs[-1].job_id
    launched = st.session_state.setdefault("launched_jobs", [])
    launched.extend(j.job_id for j in jobs if j.job_id not in launched)
    if joined:  # the same configuration is queued, training or stored: one job, one spend of ε
        what = (f"{len(joined)} of these configurations " if len(jobs) > 1 else "This configuration ") + \
            "already has a job here: joined it (" + ", ".join(f"{j.run_id or 'job ' + str(j.job_id)} "
                                                           f"{jm.state(j)['phase']}" for j in joined) + ")"
    st.session_state["_toast"] = what


def toast_launched() -> None:
    if what := st.session_state.pop("_toast", None):
        st.toast(what)


def _launch_shown() -> None:
    """Launch's callback: the configuration the form shows at the click, read from the widgets' state that
    the click carried (a slider moved a moment before is in it), never one an earlier run of the page drew."""
    from . import forms

    if (cfg := forms.shown_config()) is not None:  # refused: the page's rerun shows the form's error box
        _launch([cfg], f"Launched {results.launch_label(cfg.to_dict())} in the background")


def render_launch() -> None:
    """The form's Launch button (drawn only under a config the form accepts)."""
    st.button("Launch run", type="primary", key="launch", on_click=_launch_shown)
    toast_launched()


def launch_button(label: str, cfgs, what: str, key: str) -> None:
    """A button that submits ``cfgs`` (drawn by pages that launch several runs at once)."""
    st.button(label, key=key, on_click=_launch, args=(list(cfgs), what))
    toast_launched()


def _jobs_signature(jobs) -> tuple:
    return tuple((j.job_id, j.run_id, j.status) for j in jobs)


def render_progress(box, fraction: float, text: str, color: str) -> None:
    """A progress bar filled in ``color`` (a run's strategy colour, `figures.color`) under its ``text``, as
    Streamlit's own bar draws it but in any colour: an element of role progressbar with aria-valuenow (percent)
    and ``text`` as its accessible value, so screen readers and tests read what it says."""
    pct = round(100 * min(max(float(fraction), 0.0), 1.0))
    text = html.escape(text)
    box.html(f'<div class="dpviz-progress" role="progressbar" aria-valuemin="0" aria-valuemax="100" '
             f'aria-valuenow="{pct}" aria-valuetext="{text}" aria-label="{text}">'
             f'<div style="font-size:0.875rem;line-height:1.6;margin-bottom:0.25rem">{text}</div>'
             f'<div style="height:0.5rem;border-radius:0.25rem;background:#e8e8ec;overflow:hidden">'
             f'<div style="width:{pct}%;height:100%;background:{color};border-radius:0.25rem"></div></div></div>')


def render_live(job_ids=None, *, curves: bool = True, key: str = "live") -> None:
    """Progress, cancel and growing curves of this server's runs (``job_ids``: only those), redrawn every
    second. Each job says what it waits for: its place in the queue, preparing, the learning-rate search's
    trial k of n, or training step of total. When a job of this server changes its run or status, the whole
    page reruns, so its tables and counts show it within a second (runs of other processes: the sidebar's
    watcher, `layout.page_setup`)."""
    jm = state.job_manager()

    def chosen():
        jobs = [j for j in jm.jobs.values() if job_ids is None or j.job_id in job_ids]
        return sorted(jobs, key=lambda j: -j.job_id)[:6 if job_ids is None else None]

    seen = _jobs_signature(jm.jobs.values())

    @st.fragment(run_every=1.0)
    def live():
        jobs = chosen()
        if _jobs_signature(jm.jobs.values()) != seen:
            st.rerun()  # a job was stored or ended: redraw the page's tables and the sidebar
        if not jobs:
            if job_ids is None:
                st.caption("No run launched from this server yet: launch one above, or open stored runs below.")
            return
        names = results.config_labels({j.job_id: j.cfg.to_dict() for j in jobs})  # what tells the jobs apart
        for job in jobs:
            c1, c2 = st.columns([6, 1])
            now = jm.state(job)
            acc = job.last.get("test_accuracy")
            text = (f"{job.run_id or '…'} · {names[job.job_id]} · {now['text']}"
                    + (f" · test acc {acc:.3f}" if acc is not None else "") + (f" · {job.error}" if job.error else "")
                    + (f" · launched {job.joined + 1}×, trained once" if job.joined else ""))
            render_progress(c1, now["fraction"], text, figures.color(job.cfg.strategy))
            if not job.done and c2.button("Cancelling…" if now["phase"] == "cancelling" else "Cancel",
                                          key=f"{key}-cancel-{job.job_id}", disabled=now["phase"] == "cancelling"):
                job.cancel()
                st.rerun(scope="fragment")  # the line says "cancelling…" at once, not at the next poll

    # The curves in a fragment of their own, redrawn every 2 s while a job runs and never once all have ended,
    # and built again only when a run logged new points: with the page open, a figure rebuilt and redrawn
    # every second took the training thread's share of two cores (a real-vision DP-FFT run took 3.5× as long).
    @st.fragment(run_every=2.0 if any(not j.done for j in chosen()) else None)
    def live_curves():
        ids = [j.run_id for j in chosen() if j.run_id]  # `results.curves` draws each run once
        if not (ids and curves):
            return
        sig = (tuple(ids), state.store().metrics_signature(ids))
        held = st.session_state.get(f"_{key}_fig")
        if held is None or held[0] != sig:
            held = (sig, figures.live_curves(results.curves(state.store(), ids, list(LIVE_METRICS)), LIVE_METRICS))
            st.session_state[f"_{key}_fig"] = held
        st.plotly_chart(held[1], key=f"{key}-curves")

    live()
    live_curves()


def pick_runs(labels: dict[str, str], default: list[str], key: str, label: str = "runs") -> list[str]:
    """A multiselect over ``labels`` (run id → label) whose selection is ``default`` and follows it — a run
    that lands while the page is open joins it — until the user changes the selection; then it is theirs
    (less any run deleted meanwhile)."""
    last, chosen = st.session_state.get(f"_{key}_default"), st.session_state.get(key)
    st.session_state[key] = list(default) if chosen is None or chosen == last else [r for r in chosen if r in labels]
    st.session_state[f"_{key}_default"] = list(default)
    return st.multiselect(label, list(labels), format_func=labels.get, key=key)


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
    selected = [df.loc[i, "run_id"] for i in ev.selection.rows]
    for rid in selected or list(df["run_id"][:1]):  # the selected runs' ε, else the newest run's
        render_release(store.get_run(rid))
    render_report(selected or list(df["run_id"][:1]), "runs_report")
    return selected


def render_report(run_ids: list[str], key: str) -> None:
    """A report of ``run_ids`` (`dpviz.studies.runs_report`): one self-contained HTML file, or the same page as a PDF,
    prepared in the background as the figure exports are."""
    from dpviz import studies

    store = state.store()
    name, _ = f"dpviz_report_{'_'.join(run_ids)}"[:90], None

    def make(fmt: str) -> bytes:
        page = studies.runs_report(store, run_ids)[1]
        return page.encode() if fmt == "html" else studies.report_pdf(page)

    st.caption(f"**Report** of {', '.join(run_ids)}: configuration, privacy statement, figures, results and the "
               "command that reproduces it, as one file.")
    export_row(make, name, key, formats=("html", "pdf"), label="Report {fmt}")


def release_lines(summary: dict) -> list[str]:
    """A private run's threat model in three short lines: where its draws came from, the neighbour relation its
    ε holds for, and its privacy check (`release.check_line`)."""
    s = release.statement(summary)
    if not s["private"]:
        return ["no DP: this run trained without privacy, so ε covers nothing it releases"]
    chk = summary.get("privacy_check")
    return [s["randomness_line"], f"neighbours: {s['neighbours']} ({s['neighbours_meaning']})",
            f"privacy check {chk['verdict']}: {chk['line']}" if chk else release.check_line(summary)]


def render_release(run: dict) -> None:
    """Beside a run's ε: what that ε covers, in `release_lines`, and the whole statement in an expander."""
    summary = {**(run["summary"] or {}), "config": run["config"], "run_id": run["run_id"]}
    budget = run["config"]["epsilon"]  # a private search's run: the search's total is what it spent
    spent = (summary.get("private_search") or {}).get("epsilon_spent", summary.get("epsilon_spent"))
    eps = ("no DP" if str(budget) == "inf" else f"ε spent {spent:.3f} of {float(budget):g}" if spent is not None
           else f"ε ≤ {float(budget):g} (not finished)")
    st.caption("  \n".join([f"**{run['run_id']}** · {eps}", *release_lines(summary)]))
    s = release.statement(summary)
    if not s["private"]:
        return
    with st.expander(f"What ε covers for {run['run_id']}"):
        st.markdown(f"**Protects** {s['protects']}, against {s['against']}. **Neighbours** ({s['neighbours']}): "
                    f"{s['neighbours_meaning']}.\n\n**Covered:** {'; '.join(s['covered'])}.\n\n"
                    f"**Not covered** ({release.NOT_COVERED}): {'; '.join(s['not_covered'])}.")


def drawn_runs(fig, run_ids) -> list[dict]:
    """The stored runs that ``fig`` draws (`figures.drawn_runs`; a figure that records none: ``run_ids``), for its
    export: a caption names exactly the runs in its plot, not a chosen run that has nothing to draw yet."""
    ids = figures.drawn_runs(fig)
    return [state.store().get_run(r) for r in (run_ids if ids is None else ids)]


def render_export(fig, data: pd.DataFrame, configs: list[dict], name: str, key: str, private: bool = False,
                  caption: str | None = None, summaries=()) -> None:
    """Download buttons: the figure (with caption) as PNG/SVG/PDF/HTML and its data as CSV.

    ``private`` marks analyses of private data: the caption then says that the DP guarantee does not cover them.
    ``caption`` replaces the one made from ``configs`` (figures that no run configuration describes). Every
    caption also says what the runs release beyond their ε (`figures.release_caption`): the statistics of
    private batches among ``data``'s metrics, the private ``configs``' randomness line, and the privacy check of
    each of the runs' ``summaries``; the CSV's headers label such statistics (`export.labelled`).
    """
    caption = caption or results.caption(configs)
    caption = figures.private_caption(caption) if private else caption
    metrics = data["metric"].unique() if "metric" in data else ()
    caption = figures.release_caption(caption, configs, summaries, metrics)
    def make(fmt: str) -> bytes:
        return export.csv_bytes(data) if fmt == "csv" else export.figure_bytes(fig, fmt, caption=caption)

    export_row(make, name, key)


MIME = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf", "html": "text/html", "csv": "text/csv"}
PREPARE_POLL_S = 0.5  # how often the line of an export being prepared counts on


@st.cache_resource(show_spinner=False)
def _export_pool():
    """One thread per server: every export goes through kaleido's one browser tab (`export.figure_bytes`), one
    at a time."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(1, thread_name_prefix="dpviz-export")


def export_row(make, name: str, key: str, formats=(*export.FORMATS, "csv"), label: str = "{fmt}") -> None:
    """One button per format; a click prepares that file (``make(fmt)``) in the background, with a count, and
    the browser saves it once it is ready.

    Never a download button with lazy data: Streamlit registers its callable under a new id at every redraw
    and drops the previous one when the redraw ends, so on a page that redraws every 2 s (a run training) a
    browser a redraw behind asked for an id already dropped (or for a file deleted two redraws later), and
    the click gave nothing. A prepared file is static data, whose id is its content's hash: the same at
    every redraw."""
    busy = _preparing(st.session_state.get(f"_export-{key}"))
    row = st.container(horizontal=True)  # wraps where a figure's column is too narrow for five buttons
    for fmt in formats:
        if row.button(label.format(fmt=fmt.upper()), key=f"{key}-{fmt}", disabled=busy) and not busy:
            st.session_state[f"_export-{key}"] = {"fmt": fmt, "name": export.safe_filename(name, fmt),
                                                  "since": time.time(), "token": uuid.uuid4().hex,
                                                  "future": _export_pool().submit(make, fmt)}
    _export_status(key)


def _preparing(job: dict | None) -> bool:
    return job is not None and not job["future"].done()


def _export_status(key: str) -> None:
    """The line under an export row: the count while its file is prepared, then the file (saved by the browser
    at once, and a button to save it again), or why it failed."""
    job = st.session_state.get(f"_export-{key}")
    if job is None:
        return
    if _preparing(job):
        _watch_export(job)
    elif (error := job["future"].exception()) is not None:
        st.error(f"The {job['fmt'].upper()} export failed: {error}", icon=":material/error:")
    else:
        _saved(job, key)


def _watch_export(job: dict) -> None:
    """The count, redrawn on its own timer; the page's own timer (if any) is not waited for. Once the file is
    ready the page is drawn again, so that this timer ends and the file is saved."""
    @st.fragment(run_every=PREPARE_POLL_S)
    def watch():
        if not _preparing(job):
            st.rerun()
        st.caption(f":material/hourglass_top: Preparing the {job['fmt'].upper()} ({job['name']})… "
                   f"{time.time() - job['since']:.0f} s")

    watch()


def _saved(job: dict, key: str) -> None:
    """The prepared file as a download button, clicked once by the page itself (a script that runs once per
    prepared file, however often the page redraws)."""
    fmt, save_key = job["fmt"], f"{key}-save"
    line = st.container(horizontal=True, vertical_alignment="center")
    line.download_button(f"Save {fmt.upper()} again", data=job["future"].result(), file_name=job["name"],
                         mime=MIME[fmt], on_click="ignore", key=save_key, icon=":material/download:")
    line.caption(f"{job['name']}, as drawn at {time.strftime('%H:%M:%S', time.localtime(job['since']))}")
    css_class = "st-key-" + re.sub(r"[^a-zA-Z0-9_-]", "-", save_key)  # the class Streamlit gives a keyed element
    st.html(_SAVE_ONCE % (json.dumps(job["token"]), json.dumps(css_class)), unsafe_allow_javascript=True)


# Clicks the prepared file's button once per token. The button may be drawn after the script runs (a browser a
# redraw behind): it is looked for as long as the script's element is on the page.
_SAVE_ONCE = """<script>(() => {
  const token = %s, selector = "." + CSS.escape(%s) + " button", host = document.currentScript;
  const saved = window.dpvizSavedExports = window.dpvizSavedExports || new Set();
  const t0 = Date.now(), tick = () => {
    if (saved.has(token) || (host && !host.isConnected) || Date.now() - t0 > 600000) return;
    const button = document.querySelector(selector);
    if (button) { saved.add(token); button.click(); } else setTimeout(tick, 200);
  };
  tick();
})();</script>"""
