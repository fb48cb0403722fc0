"""Reproduction: each seed paper's headline claims, measured here on each task, with a verdict and a reading."""

import pandas as pd
import streamlit as st

from dashboard import analyses, findings, layout, published, runs, state
from dpviz import figures, reproduce, studies, tasks
from dpviz.errors import StoreError

layout.page_setup("Reproduction", r"""
A scorecard of the papers behind dpviz: every headline claim as a row with its verdict (*agrees* / *partly* /
*does not*) **per task**: dpviz's toy task and real pretrained models on real data side by side, so a *partly*
can be told apart from the toy. Each claim's section under the table holds its statement, its paper, the
experiment that tests it, what dpviz measures (mean ± std over seeds, learning rates on **auto**, i.e. tuned on
public data only) and a reading. The experiments are ordinary runs in the store: launching again reuses every
finished run, so a stopped scorecard resumes.
""")
analyses.privacy_banner()  # kNN, separability and curvature rows read private data

TASKS = list(tasks.TASKS)
st.subheader("1 · Run the scorecard")
task = st.selectbox("task", TASKS, key="re_task", format_func=lambda t: tasks.task(t).label)  # whole at 1024 px
c = st.columns([2, 1, 1], vertical_alignment="bottom")
claims = st.multiselect("claims", list(reproduce.REGISTRY), default=list(reproduce.REGISTRY), key="re_claims",
                        help="each claim's statement and paper head its section under the table")  # ids: chips fit
seeds = int(c[1].number_input("seeds", 1, 10, 3, key="re_seeds",
                              help="2 or more for a verdict: from one seed there is no spread to judge by"))


def sizes_of(t: str) -> list[str]:
    """The sizes task ``t`` has (`reproduce.SCALES`): small always."""
    return [s for s in reproduce.SCALES if s == "small" or t in reproduce.SCALES[s]]


scale = c[0].selectbox("size", sizes_of(task), key="re_scale",
                       help="the scale axis: a larger size grows the training set and the DP steps (same epochs and "
                            "B); only the scale-sensitive claims are read there")
if reproduce.SCALES[scale].get(task):
    fields = reproduce.size_fields(task, scale)
    st.caption("Every run of this size sets " + ", ".join(f"{k} = {v}" for k, v in fields.items())
               + f": ≈ {reproduce.steps_of(fields):,} DP steps a run"
               + (" (the preset's sampling rate and step count, so the same noise multiplier, at a size whose "
                  "scorecard finishes on a laptop CPU)." if scale == "small" else
                  f"; read here: {', '.join(c.id for c in reproduce.CLAIMS if scale in c.scales)}."))
if seeds < 2:
    st.warning(f"**One seed.** Means are shown without a spread. {reproduce.ONE_SEED}", icon=":material/warning:")

sc = state.task("scorecard")
running = state.running(sc)
if c[2].button("Cancel" if running else "Run / resume", type="secondary" if running else "primary", key="re_go"):
    if running:
        sc["cancel"].set()
    elif claims:
        state.start_task("scorecard", lambda progress, cancel: reproduce.run(
            claims, task=task, seeds=tuple(range(seeds)), cache_dir=state.store().root, progress=progress,
            cancel=cancel, scale=scale))

layout.render_task(sc, "runs", "scorecard")

st.subheader("2 · Claims, per task")
shown = st.multiselect("tasks shown", TASKS, default=TASKS, key="re_shown", format_func=lambda t: tasks.task(t).label)
running = state.running(sc)
mine = {t: ({} if running else {r["id"]: r for r in reproduce.stored_rows(
    claims, task=t, seeds=tuple(range(seeds)), cache_dir=state.store().root)}) for t in shown}
# the project's own measured pass (its results files) wherever this store has no row of a claim yet
filed = {t: published.scorecard_verdicts(t) for t in shown}
rows = {t: {**{k: r for k, r in filed[t].items() if k in claims}, **mine[t]} for t in shown}


def stored_config(run_id: str) -> dict | None:
    """A row's run's config, or None for a run deleted since (the rest still export)."""
    try:
        return state.store().get_run(run_id)["config"]
    except StoreError:
        return None


def cell(r: dict | None) -> str:
    if r is None:
        return "—"
    text = r["verdict"] if r["verdict"] == reproduce.NOT_READ else f"{r['verdict']} ({r['seeds']} seeds)"
    return text + (" · file" if r.get("file") else "")


def task_cell(t: str, claim: str) -> str:
    """This store's verdict; the measured pass's (· file) where the store has none; both where they differ."""
    here, there = mine[t].get(claim), filed[t].get(claim)
    if here is not None and there is not None and there["verdict"] != here["verdict"]:
        return f"{cell(here)}; file: {there['verdict']}"
    return cell(rows[t].get(claim))


table = pd.DataFrame([{"claim": cl.id, "statement": cl.sentence, "paper": reproduce.PAPERS[cl.seed][0],
                       **{t: task_cell(t, cl.id) for t in shown}} for cl in reproduce.CLAIMS if cl.id in claims],
                     columns=["claim", "statement", "paper", *shown])
if not any(r["verdict"] != reproduce.NOT_READ for rs in rows.values() for r in rs.values()):
    st.info("No claim has all its runs on any task shown yet: run the scorecard above (about 20 minutes for all "
            "claims of the default task on 2 cores; under 90 for a real task). “—”: not run yet.")
sources = [f"**{tasks.task(t).label}**: {p}" for t in shown if (p := published.provenance(t)) and filed[t]]
if sources:
    st.caption("*· file*: the project's own measured pass, from its results file, where this store has no run "
               "of the claim yet; run the scorecard above for your own verdict, which replaces it claim by claim. "
               + " ".join(sources))
layout.table(table[["claim", *shown]], key="re_table")  # every task's verdict; a claim's statement heads its section
if any(r["seeds"] == 1 for rs in rows.values() for r in rs.values()):
    st.warning(f"**Verdicts from one seed.** {reproduce.ONE_SEED}", icon=":material/warning:")
st.download_button("Scorecard as CSV", table.to_csv(index=False), "dpviz_scorecard.csv", key="re_csv")

for cl in [cl for cl in reproduce.CLAIMS if cl.id in claims]:
    with st.expander(f"{cl.id}: {cl.sentence}"):
        st.caption(f"{reproduce.PAPERS[cl.seed][0]}: *{reproduce.PAPERS[cl.seed][1]}*")
        for t, col in zip(shown, st.columns(len(shown))):
            with col:
                r = rows[t].get(cl.id)
                st.markdown(f"**{tasks.task(t).label}** · {cl.experiment(t)}")
                if r is None:
                    st.caption("Not run yet on this task: choose it above and run the scorecard.")
                    continue
                if r["verdict"] == reproduce.NOT_READ:
                    st.info(f"Not readable here: {r['reading']}")
                    continue
                if r.get("file"):
                    st.caption("The project's own measured pass (results file): run the scorecard for this store's.")
                if "measured" not in r:  # a results table's verdict: no curves to draw
                    layout.reading(r["reading"])
                    continue
                fig = figures.reproduce.claim_figure(r)
                st.plotly_chart(fig, key=f"re_fig_{cl.id}_{t}")
                layout.reading(r["reading"])
                data = pd.DataFrame([{"group": g, **v} for g, v in r["measured"].items()])
                configs = [c for ids in r["run_ids"].values() for c in map(stored_config, ids[:1]) if c]
                runs.render_export(fig, data, configs, f"dpviz_claim_{cl.id}_{t}", f"re_exp_{cl.id}_{t}",
                                   private=r["private_statistics"])


scaled_tasks = [t for t in TASKS if len(sizes_of(t)) > 1]
if scaled_tasks:
    st.subheader("3 · Along the scale axis")
    st.markdown("Do the scale-sensitive claims change with how long a model trains? Each size's rows come from "
                "this store where all their runs are in it, else from the results file the measured pass wrote "
                "(`python -m dpviz reproduce --scale`, marked *file*).")
    st_task = st.selectbox("task", scaled_tasks, key="re_scale_task", format_func=lambda t: tasks.task(t).label)
    by_size, source = {}, {}
    for size in sizes_of(st_task):
        here = {} if running else {r["id"]: r for r in reproduce.stored_rows(
            claims, task=st_task, seeds=tuple(range(seeds)), cache_dir=state.store().root, scale=size)
            if r["verdict"] != reproduce.NOT_READ}
        by_size[size] = here or published.scorecard_rows(st_task, size)
        source[size] = "store" if here else "file"
    scaled = [cl for cl in reproduce.CLAIMS if len(cl.scales) > 1 and cl.id in claims]
    layout.table(pd.DataFrame([{"claim": cl.id, **{
        f"{size} (≈ {reproduce.steps_of(reproduce.SCALES[size][st_task]):,} steps)": (
            cell(by_size[size].get(cl.id)) + (" · file" if by_size[size].get(cl.id) and source[size] == "file" else ""))
        for size in by_size}} for cl in scaled]), key="re_scale_table")  # the statements: section 2
    for cl in scaled:
        rows_at = {size: by_size[size][cl.id] for size in by_size if cl.id in by_size[size]}
        if not rows_at:
            continue
        with st.expander(f"{cl.id} at every size: {cl.sentence}"):
            fig = figures.reproduce.scale_figure(rows_at)
            st.plotly_chart(fig, key=f"re_scale_fig_{cl.id}")
            for size, r in rows_at.items():
                layout.reading(f"**{size}** ({r['seeds']} seeds): {r['verdict']}. {r['reading']}")
            data = pd.DataFrame([{"size": size, "group": g, **v} for size, r in rows_at.items()
                                 for g, v in r["measured"].items()])
            what = "; ".join(f"{size} ({source[size]}): {r['preset']}, {r['seeds']} seeds" for size, r in rows_at.items())
            runs.render_export(fig, data, [], f"dpviz_claim_{cl.id}_{st_task}_sizes", f"re_scale_exp_{cl.id}",
                               private=cl.private, caption=f"{cl.id} on {st_task} along the scale axis — {what}")

st.subheader("4 · Under correlated noise (BandMF)")
st.markdown("Does a claim read the same when every run's noise is BandMF's banded correlated noise instead of DP-SGD's "
            "independent noise, at the same ε (the Correlated noise guide)? The same experiments with the mechanism "
            "set on every run: `python -m dpviz reproduce --set mechanism=bandmf bands=2`. Rows come from this store "
            "where all their runs are in it, else from the measured pass's results file (*file*).")
c = st.columns([1, 3])
noise_bands = c[0].selectbox("bands b", [2, 4], key="re_bands")
noise_task = c[1].selectbox("task", TASKS, key="re_noise_task", format_func=lambda t: tasks.task(t).label)
changes = {"mechanism": "bandmf", "bands": noise_bands}


def verdicts_of(t: str, ch: dict | None) -> dict[str, dict]:
    """Claim id → row on task ``t`` under ``ch``: this store's read rows, else the measured pass's file."""
    here = {} if running else {r["id"]: r for r in reproduce.stored_rows(
        claims, task=t, seeds=tuple(range(seeds)), changes=ch, cache_dir=state.store().root)
        if r["verdict"] != reproduce.NOT_READ}
    return {**{k: r for k, r in published.scorecard_verdicts(t, changes=ch).items() if k in claims}, **here}


plain, banded = verdicts_of(noise_task, None), verdicts_of(noise_task, changes)
both = [cl for cl in reproduce.CLAIMS if cl.id in plain and cl.id in banded]
if not banded:
    st.info(f"No claim has been read under BandMF b = {noise_bands} on this task yet, in this store or in a results "
            f"file: `python -m dpviz reproduce --task {noise_task} --set mechanism=bandmf bands={noise_bands}`.")
else:
    layout.table(pd.DataFrame([{"claim": cl.id, "DP-SGD": cell(plain.get(cl.id)),  # statements: section 2
                                f"BandMF b = {noise_bands}": cell(banded.get(cl.id)),
                                "the same?": ("yes" if plain[cl.id]["verdict"] == banded[cl.id]["verdict"] else "no")
                                if cl in both else "—"}
                               for cl in reproduce.CLAIMS if cl.id in banded]), key="re_noise_table")
    differ = [cl.id for cl in both if plain[cl.id]["verdict"] != banded[cl.id]["verdict"]]
    layout.reading(f"Under BandMF b = {noise_bands} on {tasks.task(noise_task).label}, "
                   f"{len(both) - len(differ)} of {len(both)} claims read on both mechanisms get the same verdict"
                   + (f"; {', '.join(differ)} {'differs' if len(differ) == 1 else 'differ'}: a verdict that moves by "
                      "less than the seeds' spread is no finding, so read each row's measurement below." if differ
                      else ": correlated noise changes none of them.")
                   + (f" Not read under BandMF yet: {', '.join(sorted(set(plain) - set(banded)))}."
                      if set(plain) - set(banded) else ""))
    if prov := published.provenance(noise_task, changes=changes):
        st.caption(f"*file*: {prov}")
    for cl in [cl for cl in both if cl.id in differ]:
        with st.expander(f"{cl.id} under both mechanisms: {cl.sentence}"):
            for name, r in (("DP-SGD", plain[cl.id]), (f"BandMF b = {noise_bands}", banded[cl.id])):
                layout.reading(f"**{name}** ({r['seeds']} seeds): {r['verdict']}. {r['reading']}")

if measured := studies.available(noise_task, store_root=state.store().root):
    st.markdown(f"**Studies on {tasks.task(noise_task).label}**: each compares its cells at the same ε, over seeds, "
                "every cell at the learning rates its study declares (the Studies page runs them on any task).")
    for i, res in enumerate(measured):
        st.markdown(f"*{findings.heading(res)}*")
        findings.render_results(res, f"re_study_{i}", figure=False)
