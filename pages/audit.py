"""Privacy audit: canaries in one training run, an empirical lower bound on ε beside the accountant's ε."""

import pandas as pd
import streamlit as st

from dashboard import forms, layout, runs, state
from dpviz import audit, figures, results, strategies
from dpviz.audit import readings, sweep
from dpviz.errors import DpvizError

layout.page_setup("Privacy audit", r"""
The accountant bounds ε **from above** for the σ, q and T a run reports; it cannot see a bug in the mechanism
as implemented. An audit bounds ε **from below**: it trains the configuration once with M canaries, each
included with probability ½ by the auditor's own coin, scores every canary and counts how many inclusions
an attacker guesses right (Steinke, Nasr & Jagielski 2023; the f-DP bound of Mahloujifar et al. 2024).
ε_lb is the larger of the two bounds, so the **confidence covers both together**: each bound is tested at
half the significance (Bonferroni; at 95 %, each at 97.5 %). The **f-DP bound assumes a Gaussian trade-off
curve** (it rejects the Gaussian curve that is exactly (ε, δ)-DP); the one-run bound assumes only (ε, δ)-DP.
If ε_lb ever exceeded the accountant's ε, the mechanism would leak more than it claims. **White-box**:
gradient canaries of norm 10·C, clipped and noised like every record, scored from every update;
**black-box**: inserted images, scored by the final model's loss. M canaries can show at most the
*ceiling*; the *ideal attack* scores simulated runs of the exact Gaussian mechanism by their likelihood ratio —
the most any attack shows on average for that M. One run's ε_lb is random, the ideal's too: its bar is the
median of 20 runs, its whisker 90 % of them. Canaries are sampled by the run's own sampler: black-box
canaries are records of the training set, white-box ones are drawn at every step by the same sampling code.
Under **BandMF** (the form's noise choice) each canary belongs to one part, takes part only in that part's
steps and is scored on the releases with the correlation undone; the ideal attack is then that of the DP-SGD
schedule the accountant composes (⌈T/b⌉ steps at rate b·q).
""")
st.info(readings.NOTE, icon=":material/shield:")

st.subheader("1 · Configure the run and the audit")
with st.expander("Run configuration (as on the Runs page)", expanded=False):
    cfg, _ = forms.render_run_form(state.store().root)
c = st.columns([2, 2, 2, 2, 1])
try:
    threat = c[1].selectbox("threat", audit.THREATS, key="au_threat")
    kind = c[2].selectbox("black-box canaries", audit.KINDS, key="au_kind", disabled=threat != "black-box",
                          help="mislabeled private-distribution images, or out-of-distribution ±1 patterns "
                               "(black-box only: white-box canaries are gradients)")
    spec = audit.AuditSpec(
        canaries=int(c[0].number_input("canaries M", 10, audit.MAX_CANARIES, 1000, step=100, key="au_m")),
        threat=threat, kind=kind if threat == "black-box" else audit.KINDS[0],
        confidence=c[3].select_slider("confidence", [0.9, 0.95, 0.99], value=0.95, key="au_conf",
                                      help="for both bounds together: each is tested at half the significance"),
        seed=int(c[4].number_input("audit seed", 0, 2 ** 31 - 1, 0, key="au_seed")))
except DpvizError as e:
    layout.input_error(e)
    st.stop()
if cfg is None:
    st.stop()

one = state.task("audit")
busy = state.running(one)
if st.button("Cancel the audit" if busy else "Audit in the background", type="secondary" if busy else "primary",
             key="au_go"):
    if busy:
        one["cancel"].set()
    else:
        state.start_task("audit", lambda progress, cancel: audit.audit(
            cfg, spec, store=state.store(), cancel=cancel,
            progress=lambda step, total, *_: progress(step, total, f"{cfg.strategy} {spec.threat}")))
layout.render_task(one, "steps", "audit")

st.subheader("2 · The audit of this configuration")
report = audit.stored(cfg, spec, store=state.store())
if report is None:
    st.caption("The audit is running: its progress and the time left are above; its report appears here when it "
               "ends." if busy else "No stored audit for this configuration and audit settings yet: launch one "
               "above. " + audit.time_estimate(state.store(), cfg))
else:
    m = st.columns(6)
    m[0].metric("budget ε", "∞" if report["epsilon"] is None else f"{report['epsilon']:g}")
    m[1].metric("accountant's ε spent", "—" if report["epsilon_spent"] is None else f"{report['epsilon_spent']:.3f}")
    m[2].metric("ε_lb (best bound)", f"{max(report['epsilon_lb'], report['epsilon_lb_fdp']):.3f}",
                help=f"one-run {report['epsilon_lb']:.3f}; f-DP {report['epsilon_lb_fdp']:.3f}, assuming a Gaussian "
                     f"trade-off curve; {readings.confidence_text(report)}")
    m[3].metric(f"ceiling for M = {report['canaries']}", f"{report['ceiling']:.2f}")
    m[4].metric("AUC", f"{report['auc']:.3f}")
    m[5].metric("TPR at FPR 1 %", f"{report['tpr_at_fpr_1pct']:.3f}")
    data = pd.DataFrame({"score": report["scores_in"] + report["scores_out"],
                         "included": [True] * len(report["scores_in"]) + [False] * len(report["scores_out"])})
    for name, fig in (("bounds", figures.audit.bounds_figure(report)), ("scores", figures.audit.scores_figure(report)),
                      ("roc", figures.audit.roc_figure(report, *audit.roc(report)))):
        st.plotly_chart(fig, key=f"au_fig_{name}")
        runs.render_export(fig, data, [report["config"]], f"dpviz_audit_{name}_{report['audit_key']}",
                           f"au_exp_{name}",
                           caption=results.caption([report["config"]]) + "\n" + readings.caption(report))
    layout.reading(readings.reading(report))

st.subheader("3 · Audit sweep: ε_lb against ε")
# Two rows: at 1024 px every chip of the defaults shows whole (one row of four cut "lp-fft" and "white-box").
c = st.columns(2)
strats = c[0].multiselect("strategies", strategies.names(), default=["lp", "fft", "lp-fft"], key="au_sw_strategies")
eps = c[1].multiselect("ε", list(sweep.EPSILONS), default=list(sweep.EPSILONS), key="au_sw_eps",
                       format_func=figures.eps_text)
c = st.columns([4, 1], vertical_alignment="bottom")
threats = c[0].multiselect("threats", audit.THREATS, default=list(audit.THREATS), key="au_sw_threats")
many = state.task("audit-sweep")
busy = state.running(many)
if c[1].button("Cancel" if busy else "Run", type="secondary" if busy else "primary", key="au_sw_go"):
    if busy:
        many["cancel"].set()
    else:
        try:
            sweep.plan(cfg, strategies=strats, epsilons=eps, threats=threats)
            state.start_task("audit-sweep", lambda progress, cancel: sweep.sweep(
                cfg, spec, strategies=strats, epsilons=eps, threats=threats, store=state.store(),
                progress=progress, cancel=cancel))
        except DpvizError as e:
            layout.input_error(e)
layout.render_task(many, "audits", "audit sweep")


@st.fragment(run_every=2.0 if state.running(many) else None)
def render_sweep():
    """The sweep's figure and table from the stored audits: it fills in while the sweep runs. One stored point (the
    audit above, when it is one of the sweep's) is no sweep yet: the page says so rather than drawing it as one."""
    try:
        rows = sweep.stored(cfg, spec, strategies=strats, epsilons=eps, threats=threats, store=state.store())
        points = len(sweep.plan(cfg, strategies=strats, epsilons=eps, threats=threats))
    except DpvizError as e:
        layout.input_error(e)
        return
    if len(rows) < min(2, points):
        which = f" (the audit of {sweep.row_label(cfg, rows[0])})" if rows else ""
        st.caption(f"{len(rows)} of this sweep's {points} audits stored{which}: run it above (≈ 3 s per audit on the "
                   "default); ε_lb against ε is drawn from two audits on.")
        return
    fig = figures.audit.sweep_figure(rows)
    st.plotly_chart(fig, key="au_sweep_fig")
    layout.reading(readings.sweep_reading(rows))
    table = pd.DataFrame(rows).drop(columns=["audit_key"])
    st.dataframe(table, hide_index=True, key="au_sweep_table")
    audited = sweep.configs(cfg, rows)  # the caption names the configurations audited, each point's
    runs.render_export(fig, table, audited, "dpviz_audit_sweep", "au_sweep_exp",
                       caption=results.caption(audited) + "\n" + readings.caption(rows[0]))


render_sweep()
