"""Tuning: a TPE hyperparameter search, its trials live, and the best configuration as a run."""

import math
import time

import streamlit as st

from dashboard import layout, runs, state, studies
from dpviz import figures, strategies
from dpviz import autotune
from dpviz import jobs, runner, sweeps
from dpviz import catalog
from dpviz.config import RunConfig
from dpviz.errors import ConfigError, DpvizError
from dpviz.sweeps import private

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

**Or tune privately within one total budget.** *Private search* draws the number of trials at random
(Poisson or truncated negative binomial), calibrates every trial's noise so that the whole search — every
trial, its noisy score on held-out private training examples, and releasing the best — is (ε, δ)-DP by
Papernot & Steinke's theorem (ICLR 2022), and keeps only the best trial's run.
""")

# every learning rate some registered strategy declares, then the fields all strategies share
DEFAULT_RANGES = {**{f: autotune.RANGES.get(f, (1e-4, 1.0)) for n in strategies.names() for f in strategies.get(n).lr_fields},
                  "clip_norm": (0.1, 10.0), "batch_size": (64, 1024), "epochs": (5, 40)}
PRIVATE = "private data (costs privacy not in any run's ε)"
PRIVATE_SEARCH = "private search (one total ε)"


@st.cache_data(show_spinner="calibrating the search's noise", max_entries=32)
def _plan(key: str, _search: private.PrivateSearch) -> dict:
    """The search's plan, once per search (a calibration takes about a second)."""
    import dataclasses

    return dataclasses.asdict(private.plan(_search))


def render_private_launch(search: private.PrivateSearch) -> None:
    """The private search's plan (σ, each trial's ε, the total) and its launch button; one search at a time."""
    try:
        p = _plan(search.key(), search)
    except DpvizError as e:
        layout.input_error(e)
        return
    st.caption(f"Every trial trains at σ = {p['noise_multiplier']:.3g} (each trial's ε = "
               f"{p['trial_epsilon']:.3g}, {p['trial_epsilon_with_score']:.3g} with its noisy score), scored on "
               f"{p['holdout']} held-out training examples; the whole search spends ε = {p['search_epsilon']:.4g} "
               f"of {search.total_epsilon:g} at δ = {search.total_delta:g}.")
    task = state.task("private-search")
    if state.running(task):
        render_search_progress(task)
        return
    if st.button(f"Launch private search (total ε = {search.total_epsilon:g}, {search.distribution} trials, "
                 f"mean {search.mean_trials:g})", type="primary", key="tu_launch_private"):
        def work(progress, cancel):
            return private.run_search(search, run=runner.run, store=state.store(), cancel=cancel,
                                      progress=_trial_progress(progress))
        state.start_task("private-search", work)
        st.rerun()
    if task["error"]:
        layout.input_error(ConfigError("search", task["error"]))


def _trial_progress(progress):
    """``run_search``'s progress as the task's: trial i of k, its step s of S, and the time left at the pace
    measured over this search's steps so far (trials of one search take the same steps)."""
    paces: list = []  # one `eta.Pace` over all the trials' steps, made at the first step seen

    def report(i: int, k: int, s: int | None = None, total: int | None = None) -> None:
        if not s:
            progress(i, k, f"trial {i + 1} of {k}")
            return
        paces[:] = paces or [jobs.Pace(phases=[("trials", k * total)], eval_every=total)]
        paces[0].observe(i * total + s, time.time())
        left = jobs.time_left(paces[0])
        progress(i, k, f"trial {i + 1} of {k}, step {s} of {total}" + (f", {left} left" if left else ""))
    return report


@st.fragment(run_every=2.0)
def render_search_progress(task: dict) -> None:
    """The running search's progress, redrawn every 2 s; the whole page again once it has ended (its launch
    button back, its entry in the table)."""
    if not state.running(task):
        st.rerun()
    cancelling = task["cancel"].is_set()
    st.progress(task["done"] / max(task["total"], 1), text="cancelling… (the trial stops at its next step)"
                if cancelling else task["label"] or "calibrating the search's noise")
    if st.button("Cancelling…" if cancelling else "Cancel the search", key="tu_cancel_private", disabled=cancelling):
        task["cancel"].set()  # the running trial stops at its next step; nothing is released
        st.rerun(scope="fragment")


@st.fragment(run_every=3.0)
def render_private_searches() -> None:
    """Every stored private search: what it released and what it cost in total."""
    found = state.store().searches()
    if not found:
        return
    st.markdown("**Private searches** — each one entry with one total ε; only the best trial's run is kept.")
    st.dataframe([private.row(e) for e in found], hide_index=True, key="tu_private_table")
    last = found[0]
    if last.get("status") == "finished":
        st.caption(f"Newest: {last['theorem']}. Covered by the total ε: {last['covered']}. The number of trials "
                   "drawn is yours to see, not to publish with the model: with it known, the best of K costs about "
                   "K trials composed.")
        if last.get("released_run_id"):
            st.page_link("pages/runs.py", label=f"The released run {last['released_run_id']} is on the Runs page →",
                         icon=":material/rocket_launch:")


def render_comparison() -> None:
    """The `private-tuning` study: one `auto` run, a private search and a fixed-count search at one total ε, with
    which releases the most accurate model at each ε (shipped with dpviz, or the user's own runs of it)."""
    from dashboard import findings
    from dpviz import studies

    found = [r for r in studies.available(store_root=state.store().root) if r.study == "private-tuning"]
    if not found:
        return
    with st.expander("Measured: one auto run vs a private search vs a fixed count, at the same total ε"):
        for i, res in enumerate(found):
            st.markdown(f"*{findings.heading(res)} on {res.task}*")
            findings.render_results(res, f"tu_study_{i}")


def render_search_cost(cost: dict | None) -> None:
    """What an ordinary search on the private data cost, composed, and what a random count would."""
    if not cost:
        return
    rnd = cost["random_count_epsilon"]
    st.info(f"**What this search cost**: its {cost['trials']} trials composed spend **ε = "
            f"{cost['composed_epsilon']:.3g}** at δ = {cost['delta']:g} (PLD), where each trial says "
            f"ε ≤ {max(cost['per_trial_epsilon']):.3g}. The same trials with a random number of trials of mean "
            f"{cost['trials']} would cost ε = {rnd['poisson']:.3g} (Poisson) or {rnd['negative-binomial']:.3g} "
            "(negative binomial) by Papernot & Steinke, had their scores been private: the **private search** "
            "option above does that.", icon=":material/calculate:")

st.subheader("1 · Search")
c = st.columns([2, 2, 4, 2, 1])
names = list(strategies.names())
strategy = c[0].selectbox("strategy", names, index=names.index("fft"), key="tu_strategy")
eps = c[1].select_slider("ε", [0.5, 1.0, 2.0, 4.0, 8.0], value=1.0, key="tu_eps")
where = c[2].radio("tune on", [f"public proxy: {p}" for p in catalog.public_datasets()] + [PRIVATE, PRIVATE_SEARCH],
                   key="tu_where", horizontal=True)
in_budget = where == PRIVATE_SEARCH
if in_budget:
    dist = c[3].selectbox("trials drawn", list(private.CHOICES), key="tu_dist")
    mean = float(c[4].number_input("mean trials", 1.0, 100.0, 5.0, key="tu_mean"))
else:
    trials = int(c[3].number_input("trials", 2, 500, 12, key="tu_trials"))
    workers = int(c[4].number_input("workers", 1, 16, state.MAX_WORKERS, key="tu_workers"))
proxy = None if where in (PRIVATE, PRIVATE_SEARCH) else where.split(": ")[1]
if where == PRIVATE:
    st.warning("Trials will train on the private dataset: the privacy they spend is **not** counted in any "
               "run's ε. Prefer a public proxy unless you account for the search separately.",
               icon=":material/warning:")

space = {}
for name, (lo, hi) in DEFAULT_RANGES.items():
    r = st.columns([3, 2, 2, 5])
    fixed = in_budget and name not in private.SEARCHABLE  # q and T set each trial's privacy: not searched privately
    on = r[0].checkbox(f"search {name}", value=name in strategies.get(strategy).lr_fields, key=f"tu_on_{name}",
                       disabled=fixed, help="a private search keeps batch size and epochs fixed" if fixed else None) \
        and not fixed
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
    if in_budget:
        search = private.PrivateSearch(base=base, space={k: tuple(v) for k, v in space.items()}, total_epsilon=eps,
                                       distribution=dist, mean_trials=mean)
        private.check(search)
        sweeps.check_ranges(base, search.space)
except DpvizError as e:
    layout.input_error(e)
    base = None
if base and in_budget:
    render_private_launch(search)
elif base and st.button(f"Launch search ({trials} trials, {workers} workers)", type="primary", key="tu_launch"):
    try:
        studies.launch(sweeps.create_search(base, space, trials=trials, proxy=proxy, cache_dir=state.store().root),
                       workers, "tu_study", "Search")
    except DpvizError as e:
        layout.input_error(e)

render_private_searches()
render_comparison()

st.subheader("2 · Trials")
study = studies.pick("tune", "tu_study", "search",
                     format_func=lambda s: f"{s.study_name} — {figures.tuning.subtitle(s)}")
if study is None:
    st.info("A private search is running (its progress is above): its trials appear here as they finish."
            if state.running(state.task("private-search")) else
            "No search yet: launch one above (or `python -m dpviz tune … --proxy glyphs`).")
    st.stop()
name = study.study_name


@st.fragment(run_every=2.0)
def render_trials():
    rows = studies.progress(study, "trials", total=study.user_attrs.get("n_trials"))
    n_private = sweeps.private_trials(study)
    if n_private:
        st.warning(f"{n_private} trials of this search trained on the private data: the search as a whole "
                   "spent privacy that the per-run ε values below do not include.", icon=":material/warning:")
        render_search_cost(sweeps.search_cost(study))
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
