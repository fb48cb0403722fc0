"""Runs: configure a DP fine-tuning run, launch it, watch it train."""

import streamlit as st

from dashboard import forms, layout, runs, state

layout.page_setup("Runs", r"""
Configure a run and watch DP-SGD train it. Each step samples a Poisson batch (rate q = B/n), clips every
per-sample gradient to norm C, adds Gaussian noise and averages:
$\tilde g = \frac{1}{qn}\big(\sum_{i\in B} g_i \min(1, C/\lVert g_i\rVert) + \mathcal N(0, \sigma^2 C^2 I)\big)$.
One noise multiplier σ is calibrated for the **whole** schedule (every phase) so that the accountant's ε never
exceeds the budget. *LP* trains only the head on frozen features, *FFT* everything from a random head,
*LP-FFT* spends a share p of the steps on LP first, *partial* tunes the last k blocks.
Learning rates on **auto** follow ε, B, the epochs and the strategy: they were tuned on public data only
(generated glyphs), so choosing them spends no privacy.
""")

st.subheader("1 · Configure")
cfg, prev = forms.render_run_form(state.store().root)
if cfg is not None:
    runs.render_launch()

st.subheader("2 · Watch")
runs.render_live()  # reruns the page when a run is stored or ends: the table below follows the store
layout.reading("loss should fall and test accuracy rise while ε spent climbs to (never past) the budget; "
               "at small ε, LP and LP-FFT usually beat FFT on the default task.")

st.subheader("3 · Stored runs")
selected = runs.render_run_table()
st.session_state["selected_runs"] = selected
if selected:
    st.page_link("pages/compare.py", label=f"Compare the {len(selected)} selected run(s) →", icon=":material/stacked_line_chart:")
