"""Reproduction: each seed paper's headline claims, measured here, with a verdict and a reading."""

import pandas as pd
import streamlit as st

from dashboard import analyses, layout, runs, state
from dpviz import figures, reproduce

layout.page_setup("Reproduction", r"""
A scorecard of the papers behind dpviz: every headline claim as a row — the claim, its paper, the experiment
that tests it on the default task, what dpviz measures (mean ± std over seeds, learning rates on **auto**, i.e.
tuned on public data only), a verdict (*agrees* / *partly* / *does not*) and a reading. The experiments are ordinary
runs in the store: launching again reuses every finished run, so a stopped scorecard resumes where it was.
""")
analyses.privacy_banner()  # kNN, separability and curvature rows read private data

st.subheader("1 · Run the scorecard")
claims = st.multiselect("claims", list(reproduce.REGISTRY), default=list(reproduce.REGISTRY), key="re_claims",
                        help="each claim's statement and paper are in the table below")  # ids: every chip shows
c = st.columns([1, 1, 4], vertical_alignment="bottom")
seeds = int(c[0].number_input("seeds", 1, 10, 3, key="re_seeds",
                              help="2 or more for a verdict: from one seed there is no spread to judge by"))
if seeds < 2:
    st.warning(f"**One seed.** Means are shown without a spread. {reproduce.ONE_SEED}", icon=":material/warning:")

sc = state.task("scorecard")
running = state.running(sc)
if c[1].button("Cancel" if running else "Run / resume", type="secondary" if running else "primary", key="re_go"):
    if running:
        sc["cancel"].set()
    elif claims:
        state.start_task("scorecard", lambda progress, cancel: reproduce.run(
            claims, seeds=tuple(range(seeds)), cache_dir=state.store().root, progress=progress, cancel=cancel))

layout.render_task(sc, "runs", "scorecard")

st.subheader("2 · Claims")
running = state.running(sc)
rows = [] if running else reproduce.stored_rows(claims, seeds=tuple(range(seeds)), cache_dir=state.store().root)
if not rows:
    st.info("No claim has all its runs yet: run the scorecard above (about 20 minutes for all claims on 2 cores). "
            "The claims it tests:")
    st.dataframe(pd.DataFrame([{"claim": c.id, "statement": c.sentence, "paper": reproduce.PAPERS[c.seed][0],
                                "experiment": c.preset} for c in reproduce.CLAIMS if c.id in claims]),
                 hide_index=True, key="re_claims_table")
    st.stop()
table = pd.DataFrame([{"claim": r["id"], "statement": r["claim"], "paper": reproduce.PAPERS[r["seed"]][0],
                       "experiment": r["preset"], "verdict": r["verdict"], "reading": r["reading"],
                       "seeds": r["seeds"]} for r in rows])
if any(r["seeds"] < 2 for r in rows):
    st.warning(f"**Verdicts from one seed.** {reproduce.ONE_SEED}", icon=":material/warning:")
st.dataframe(table, hide_index=True, key="re_table")
st.download_button("Scorecard as CSV", table.to_csv(index=False), "dpviz_scorecard.csv", key="re_csv")
for r in rows:
    with st.expander(f"{r['id']} — {r['verdict']}: {r['claim']}"):
        fig = figures.reproduce.claim_figure(r)
        st.plotly_chart(fig, key=f"re_fig_{r['id']}")
        layout.reading(r["reading"])
        data = pd.DataFrame([{"group": g, **v} for g, v in r["measured"].items()])
        configs = [state.store().get_run(i)["config"] for ids in r["run_ids"].values() for i in ids[:1]]
        runs.render_export(fig, data, configs, f"dpviz_claim_{r['id']}", f"re_exp_{r['id']}",
                           private=r["private_statistics"])
