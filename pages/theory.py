"""Theory lab: Ke et al. 2024's two-layer setting under Langevin diffusion, with live ε and p sliders."""

import json
import math

import pandas as pd
import streamlit as st

from dashboard import layout, runs, state
from dpviz import figures, theory
from dpviz.errors import ConfigError, DpvizError
from dpviz.theory import readings

layout.page_setup("Theory lab", r"""
Ke et al. 2024's canonical setting, where their theorems hold: a two-layer network $f(x)=\sum_j v_j\,\phi(w_j^\top x)$
whose first layer is *pretrained* (each $w_j$ aligned with the separating direction $z$ by $a$), a random
Gaussian head $v$, data separable by $z$ with margin γ, and DP-SGD approximated by Langevin diffusion
$d\theta=-\nabla L_C(\theta)\,dt+s\,dW$ on the clipped loss (Definition 2.1), simulated by Euler–Maruyama over
seeds at once. (ε, δ) sets $s$ through the Rényi guarantee of the diffusion, $D_\alpha\le\alpha\beta C^2T/(4n^2)$
with $s=\sqrt{2/\beta}$ (Theorem 4.1). LP trains $v$, FFT trains $v$ and $W$, LP-FFT spends a share $p$ of the time
on LP first. Curves are means ± 1 std over seeds; nothing here reads private data.
""", follow=False)  # reads no stored run: no rerun when one lands
st.warning(readings.RECONSTRUCTED, icon=":material/construction:")

c = st.columns([3, 2])
eps = c[0].select_slider("ε (whole run)", [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, math.inf], value=1.0,
                         key="th_eps", format_func=figures.eps_text)
share = c[1].slider("LP share p", 0.0, 1.0, 0.3, 0.05, key="th_p")
with st.expander("Setting", expanded=False):
    k = st.columns(6)
    knobs = dict(width=int(k[0].number_input("width m", 2, 512, 32, key="th_m")),
                 dim=int(k[1].number_input("input dimension d", 2, 256, 16, key="th_d")),
                 n=int(k[2].number_input("examples n", 8, 4096, 128, key="th_n")),
                 margin=k[3].number_input("margin γ", 0.0, 10.0, 0.3, key="th_margin"),
                 alignment=k[4].slider("pretrained alignment a", 0.0, 1.0, 0.6, 0.05, key="th_align"),
                 seeds=int(k[5].number_input("seeds", 1, 64, 8, key="th_seeds")))
    k = st.columns(6)
    knobs.update(activation=k[0].selectbox("activation", ["relu", "linear"], key="th_act"),
                 loss=k[1].selectbox("loss", ["logistic", "squared"], key="th_loss",
                                     help="squared: LP has a closed form (drawn dotted)"),
                 head=k[2].selectbox("head", ["random", "aligned"], key="th_head"),
                 delta=k[3].number_input("δ", 1e-12, 0.1, 1e-5, format="%.1e", key="th_delta"),
                 clip_norm=k[4].number_input("clip C", 0.01, 100.0, 1.0, key="th_clip"),
                 time=k[5].number_input("time T", 0.5, 200.0, 20.0, key="th_time"))
try:
    setting = theory.Setting(epsilon=float(eps), lp_share=float(share), **knobs)
except DpvizError as e:
    layout.input_error(e)
    st.stop()


@st.cache_data(show_spinner=False, max_entries=128)
def _curves(doc: str) -> theory.Curves:
    return theory.curves(theory.Setting(**json.loads(doc)))


@st.cache_data(show_spinner="Simulating every (ε, p) of the utility curve…", max_entries=16)
def _utility(doc: str) -> theory.Utility:
    return theory.utility(theory.Setting(**json.loads(doc)))


curves = _curves(json.dumps(setting.to_dict()))
st.caption(f"noise s = {curves.noise:.4g} for ε = {figures.eps_text(eps)}, δ = {setting.delta:g} over T = "
           f"{setting.time:g} (ε spent by that s: {figures.eps_text(curves.epsilon_spent)}); "
           f"{setting.steps} Euler–Maruyama steps of h = {setting.dt:g}.")
data = pd.DataFrame([{"strategy": name, "time": t, **{m: curves.mean[name][m][i] for m in theory.METRICS}}
                     for name in curves.mean for i, t in enumerate(curves.times)])
caption = readings.caption(setting)
notes = readings.readings(curves)
cols = st.columns(2)
for i, metric in enumerate(("loss", "alignment", "probe_accuracy", "head_alignment")):
    with cols[i % 2]:
        fig = figures.theory.time_figure(curves, metric)
        st.plotly_chart(fig, key=f"th_fig_{metric}")
        layout.reading(notes[metric])
        runs.render_export(fig, data, [], f"dpviz_theory_{metric}", f"th_exp_{metric}", caption=caption)

st.subheader("Utility curve over the LP share p")
util = _utility(json.dumps(setting.replace(epsilon=1.0, lp_share=0.0).to_dict()))
fig = figures.theory.utility_figure(util, share)
st.plotly_chart(fig, key="th_utility")
layout.reading(readings.utility_reading(util))
table = pd.DataFrame({"p": util.shares, **{f"loss ε={e}": v for e, v in util.loss.items()}})
runs.render_export(fig, table, [], "dpviz_theory_utility", "th_exp_utility", caption=caption)

st.subheader("The same setting trained by dpviz's DP-SGD")
c = st.columns([2, 1, 1])
strategy = c[0].radio("strategy", ["fft", "lp"], horizontal=True, key="th_ov_strategy")
task = state.task("theory-overlay")
if c[1].button("Train with DP-SGD", type="primary", key="th_ov_go", disabled=state.running(task)):
    if setting.loss != "logistic":
        layout.input_error(ConfigError("loss", "logistic for the overlay (DP-SGD's cross-entropy)", setting.loss))
    else:
        state.start_task("theory-overlay", lambda progress, cancel: theory.overlay(setting, strategy=strategy))
layout.render_task(task, "runs", "overlay")
if task["result"] and not state.running(task):
    o = task["result"]
    fig = figures.theory.overlay_figure(o)
    st.plotly_chart(fig, key="th_overlay")
    layout.reading(readings.overlay_reading(o))
    runs.render_export(fig, pd.DataFrame({k: o[k] for k in ("times", "engine", "diffusion")}), [],
                       "dpviz_theory_overlay", "th_exp_overlay", caption=caption)
