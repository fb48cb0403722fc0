"""Studies: run a registered study (DP-SGD beside BandMF, the best LP share, …) on any task, including your own
data, and read it from its numbers as it fills in."""

import streamlit as st

from dashboard import findings, layout, state
from dpviz import reproduce, studies, tasks
from dpviz.errors import ConfigError

layout.page_setup("Studies", r"""
A **study** is a comparison declared once: a grid of runs over the variables it compares (ε, the mechanism, the
LP share, …), the numbers it reads from each finished run, and a reading of those numbers. Pick one, a task and
the seeds, and run it here or with the command shown: each configuration trains once (finished runs answer from
the store), a stopped study resumes, and the reading is redrawn as runs finish. Without a run of yours, the
results shipped with dpviz are shown, with where they come from.
""")

TASKS = list(tasks.TASKS)
names = studies.names()
name = st.selectbox("study", names, key="sd_study", format_func=lambda n: studies.get(n).title)
study = studies.get(name)
c = st.columns([3, 1.3, 1], vertical_alignment="bottom")
task = c[0].selectbox("task", TASKS, key="sd_task", format_func=lambda t: tasks.task(t).label)
sizes = [None] + [s for s in reproduce.SCALES if s == "small" or task in reproduce.SCALES[s]]
scale = c[1].selectbox("size", sizes, key="sd_scale", format_func=lambda s: s or "its own",
                       help="the scorecard's sizes of the task (more records, more DP steps), or the task's own")
seeds = int(c[2].number_input("seeds", 1, 10, 3, key="sd_seeds", help="3 or more for a mean ± sd"))
st.caption(study.question + (f" (seed paper {study.seed_paper})" if study.seed_paper else ""))

with st.expander("axes and fields set on every run"):
    vary_text = {a: st.text_input(studies.axis_label(a), ", ".join(findings.shown(v) for v in values),
                                  key=f"sd_axis_{name}_{a}") for a, values in study.axes.items()}
    sets_text = st.text_input("fields set on every run (FIELD=VALUE, space-separated)", "", key="sd_sets",
                              help="e.g. train_size=200, or your own data: dataset=imagefolder data_dir=/path")

try:
    sets = studies.parse_sets(sets_text.split())
    vary = {a: tuple(studies.parse_value(v.strip()) for v in text.split(",") if v.strip())
            for a, text in vary_text.items()}
    vary = {a: v for a, v in vary.items() if tuple(v) != tuple(study.axes[a])}
    done, total = studies.counts(study, task=task, scale=scale, seeds=tuple(range(seeds)), sets=sets, vary=vary,
                                cache_dir=state.store().root)
except ConfigError as e:
    layout.input_error(e)
    st.stop()

command = studies.command_line(name, task, scale, list(range(seeds)), sets, vary, "all")
t = state.task("study")
running = state.running(t)
go = st.columns([1, 4], vertical_alignment="center")
if go[0].button("Cancel" if running else "Run / resume", type="secondary" if running else "primary", key="sd_go"):
    if running:
        t["cancel"].set()
    else:
        state.start_task("study", lambda progress, cancel: studies.run(
            study, task=task, scale=scale, seeds=tuple(range(seeds)), sets=sets, vary=vary,
            cache_dir=state.store().root, progress=progress, cancel=cancel,
            command=f"the Studies page (the same as `{command}`)"))
        running = True
go[1].caption(f"**{done} of {total} runs read** in this store · the same from a terminal: `{command}`")
layout.render_task(t, "runs", "study")


@st.fragment(run_every=2.0 if running else None)
def live():
    res = studies.stored(study, task=task, scale=scale, sets=sets, cache_dir=state.store().root)
    if not res.cells:
        st.info("No results of this study on this task yet, in this store or shipped with dpviz: run it above.")
        return
    st.subheader(findings.heading(res))
    findings.render_results(res, "sd_res")


live()
