"""Tuning: a TPE hyperparameter search, its trials live, and the best configuration as a run."""

import math

import streamlit as st

from dashboard import layout, runs, state, studies
from dpviz import figures, strategies
from dpviz import autotune
from dpviz import sweeps
from dpviz import catalog
from dpviz.config import RunConfig
from dpviz.errors import ConfigError, DpvizError

layout.page_setup("Tuning", r"""
A search over learning rates (per phase), clipping norm C, batch size B and epochs, run as an Optuna study
with the TPE sampler: every trial is an ordinary DP run at the chosen ε, stored like any other. The anonymous
ViT study's point is that with *tuned* hyperparameters DP noise hurts far less.

**Tuning costs privacy.** Each trial trained on the private data spends its own ε; choosing the best of
*N* trials releases information about the private data that **no single run's ε includes** (the total is
at least the composition of the trials' budgets, unless a private-selection mechanism is used). The honest
alternative, offered below and selected by default, is to tune on a **public proxy task** — `glyphs`, digit
glyphs that dpviz generates from stroke templates, resembling the embedded digits — under the same ε (so
the hyperparameters suit the same noise), then launch the best configuration once on the private data.
""")

# every learning rate some registered strategy declares, then the fields all strategies share
DEFAULT_RANGES = {**{f: autotune.RANGES.get(f, (1e-4, 1.0)) for n in strategies.names() for f in strategies.get(n).lr_fields},
                  "clip_norm": (0.1, 10.0), "batch_size": (64, 1024), "epochs": (5, 40)}
PRIVATE = "private data (costs privacy not in any run's ε)"

st.subheader("1 · Search")
c = st.columns([2, 2, 4, 1, 1])
names = list(strategies.names())
strategy = c[0].selectbox("strategy", names, index=names.index("fft"), key="tu_strategy")
eps = c[1].select_slider("ε", [0.5, 1.0, 2.0, 4.0, 8.0], value=1.0, key="tu_eps")
where = c[2].radio("tune on", [f"public proxy: {p}" for p in catalog.public_datasets()] + [PRIVATE], key="tu_where", horizontal=True)
trials = int(c[3].number_input("trials", 2, 500, 12, key="tu_trials"))
workers = int(c[4].number_input("workers", 1, 16, state.MAX_WORKERS, key="tu_workers"))
proxy = None if where == PRIVATE else where.split(": ")[1]
if proxy is None:
    st.warning("Trials will train on the private dataset: the privacy they spend is **not** counted in any "
               "run's ε. Prefer a public proxy unless you account for the search separately.",
               icon=":material/warning:")

space = {}
for name, (lo, hi) in DEFAULT_RANGES.items():
    r = st.columns([2, 2, 2, 6])
    on = r[0].checkbox(f"search {name}", value=name in strategies.get(strategy).lr_fields, key=f"tu_on_{name}")
    is_int = isinstance(lo, int)
    fmt = "%d" if is_int else "%.4g"
    low = r[1].number_input(f"{name} low", value=lo, format=fmt, key=f"tu_lo_{name}", disabled=not on,
                            min_value=1 if is_int else 1e-6)
    high = r[2].number_input(f"{name} high", value=hi, format=fmt, key=f"tu_hi_{name}", disabled=not on,
                             min_value=1 if is_int else 1e-6)
    if on:
        space[name] = [low, high]

try:
    if not space:
        raise ConfigError("ranges", "tick at least one field to search")
    base = RunConfig(strategy=strategy, epsilon=eps)
    sweeps.check_space(space)
except DpvizError as e:
    layout.input_error(e)
    base = None
if base and st.button(f"Launch search ({trials} trials, {workers} workers)", type="primary", key="tu_launch"):
    try:
        studies.launch(sweeps.create_search(base, space, trials=trials, proxy=proxy, cache_dir=state.store().root),
                       workers, "tu_study", "Search")
    except DpvizError as e:
        layout.input_error(e)

st.subheader("2 · Trials")
study = studies.pick("tune", "tu_study", "search",
                     format_func=lambda s: f"{s.study_name} — {figures.tuning.subtitle(s)}")
if study is None:
    st.info("No search yet: launch one above (or `python -m dpviz tune … --proxy glyphs`).")
    st.stop()
name = study.study_name


@st.fragment(run_every=2.0)
def render_trials():
    rows = studies.progress(study, "trials", total=study.user_attrs.get("n_trials"))
    n_private = sweeps.private_trials(study)
    if n_private:
        st.warning(f"{n_private} trials of this search trained on the private data: the search as a whole "
                   "spent privacy that the per-run ε values below do not include.", icon=":material/warning:")
    for kind in figures.tuning.KINDS:  # one full-width figure each: three in a row crowd their labels
        st.plotly_chart(figures.tuning.tuning_figure(study, kind), key=f"tu_fig_{kind}")
    if rows.empty:
        return
    st.dataframe(rows.sort_values("test_accuracy", ascending=False), hide_index=True, key="tu_table")
    fig = figures.tuning.tuning_figure(study, "history")
    runs.render_export(fig, rows, [study.user_attrs["base"]], f"dpviz_tuning_{name}", "exp-tuning")


render_trials()

st.subheader("3 · Best configuration")
try:
    best = sweeps.best_config(study)
except ValueError:
    st.caption("No finished trial yet.")
    st.stop()
tuned = {k: best.to_dict()[k] for k in study.user_attrs["space"]}
st.markdown("Best trial's values: " + ", ".join(
    f"`{k} = {v:.4g}`" if isinstance(v, float) and not math.isinf(v) else f"`{k} = {v}`" for k, v in tuned.items()))
target = "the private dataset" + (f" (tuned on public '{study.user_attrs['proxy']}')"
                                  if study.user_attrs.get("proxy") else "")
if st.button(f"Launch the best configuration on {best.dataset} — {target}", key="tu_launch_best"):
    job = state.job_manager().submit(best)
    st.session_state["watch"] = job.job_id
    st.toast(f"Launched {best.strategy} at ε = {best.epsilon:g} with the tuned values")
st.page_link("pages/runs.py", label="Watch it on the Runs page →", icon=":material/rocket_launch:")
