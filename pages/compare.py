"""Compare: overlay stored runs, seed bands, final metrics, export."""

import streamlit as st

from dashboard import layout, runs, state
from dpviz import figures, results

layout.page_setup("Compare", r"""
Overlay several stored runs: a colour per strategy, a dash per noise mechanism and a marker per ε, as in every
figure. Runs whose configurations differ only by the seed are also drawn as mean ± one standard deviation bands.
The table lists each run's mechanism, final test accuracy, the ε it spent (composed over all phases by its
accountant) and its wall time.
""")

store = state.store()
picked = st.session_state.get("selected_runs", [])  # chosen on the Runs page (search runs too, if shown there)
all_runs = [r for r in store.list_runs() if r["kind"] != "search" or r["run_id"] in picked]
names = results.run_labels(all_runs)  # each names what tells it apart from the others (p, lr, seed, dataset…)
labels = {r["run_id"]: f"{names[r['run_id']]} · {r['status']}" for r in results.offered(all_runs)}
default = [r for r in picked if r in labels] or list(labels)[:3]
chosen = runs.pick_runs(labels, default, "cmp_runs")
metric = st.selectbox("metric", list(figures.LABELS), index=list(figures.LABELS).index("test_accuracy"),
                      format_func=figures.metric_label, key="cmp_metric",  # a private batch's: not covered by ε
                      help="Training loss and accuracy, the clipped fraction and the gradient norm are exact "
                      "statistics of each step's private batch: the run's ε does not cover them.")

if not chosen:
    st.info("Select runs to compare above." if labels else "No run in the store yet: launch one on the Runs page "
            "(or `python -m dpviz run …`); it is listed here as soon as it starts.")
    st.stop()

live = any(store.get_run(r)["status"] == "running" for r in chosen)


@st.fragment(run_every=2.0 if live else None)
def render_figures():
    """Curves, bands, table; redrawn every 2 s while a chosen run trains."""
    df = results.curves(store, chosen)
    fig = figures.style.legend_room(figures.metric_curves(df, metric))  # a legend of many runs: no smaller plot
    drawn = runs.drawn_runs(fig, chosen)  # the caption's runs: a chosen run with no point yet is not in the plot
    configs = [r["config"] for r in drawn]
    summaries = [{**(r["summary"] or {}), "run_id": r["run_id"]} for r in drawn]  # their privacy checks
    st.plotly_chart(fig, key="cmp_curves")
    runs.render_export(fig, df[df["metric"] == metric], configs, f"dpviz_{metric}_curves", "exp-curves",
                       summaries=summaries)
    bands = results.seed_bands(df[df["metric"] == metric])
    if (bands["n"] > 1).any():
        bfig = figures.style.legend_room(figures.band_curves(bands, metric))
        st.plotly_chart(bfig, key="cmp_bands")
        runs.render_export(bfig, bands, configs, f"dpviz_{metric}_bands", "exp-bands", summaries=summaries)
    table = results.final_table(store, chosen)
    st.dataframe(table, hide_index=True, key="cmp_table",
                 column_config={"test_accuracy": st.column_config.NumberColumn(format="%.3f"),
                                "epsilon_spent": st.column_config.NumberColumn(format="%.3f")})
    if reading := results.best_run_reading(table):
        layout.reading(reading)


render_figures()
