"""A private search: hyperparameters tuned on the private data inside one total (ε, δ) budget.

The search draws the number of trials K from a Poisson or truncated negative binomial distribution,
runs K independent trials at one noise multiplier σ, scores each by a noisy count of its correct
predictions on held-out private training examples, and releases only the best trial's configuration
and model. σ is calibrated so that all of it — every trial, every score, the selection — is
(total ε, total δ)-DP by Papernot & Steinke's theorem (`dpviz.privacy.selection`, whose docstring states
the theorem and its conditions). How this module keeps those conditions:

* **independent trials**: each trial's learning rates and clip norm are drawn log-uniformly from the
  ranges, by a generator seeded by the search alone (never by an earlier trial's result), and each trial
  trains with its own seed;
* **one privacy curve for every trial**: batch size and epochs are not searched (they set q and T), so every
  trial has the same schedule and σ; each finished trial's σ is checked against the calibrated one;
* **the score is private**: the validation data are ``holdout`` training examples the trials do not train
  on (a fixed class-stratified subset: `RunConfig.holdout`); a trial's score is its count of correct
  predictions there plus Gaussian noise of std ``score_noise`` · holdout (sensitivity 1), composed into
  each trial's privacy. The test split is never used to select;
* **only the best is released**: the trials are kept privately in the store while the search runs (runs
  of kind ``search``: listed nowhere, answering no other request), and when it ends every trial but the
  best is deleted; the store keeps one search entry (`Store.put_search`) and the released run, whose
  summary names the search. The released run keeps only the noisy score the selection used: its exact
  held-out count (``holdout_correct``, a count of private records the accounting never saw) is removed from
  its stored summary (`PRIVATE_FIELDS`), and neither the entry nor what `run_search` returns holds it. K is
  shown to the user running the search but belongs to no release: with K known, the best of K costs about K
  trials composed.

**Each trial trains once.** One search of a key runs at a time (a lock per key in the store, across
threads and processes): a twin search launched at the same time waits and is answered by the stored
entry, and each trial claims its configuration as every run does (`Store.start_run`). A search killed mid-way,
launched again, resumes: K, the trials' rates and seeds and the score noise come from generators seeded
by the search alone, so it draws the same trials in the same order; the trials that finished answer from
the store, the one cut short goes on from its last checkpoint (`dpviz.training.resume`: a trial keeps the
automatic checkpoints a user's run keeps, each with a snapshot; one cut short before its first trains again
from step 0 as the same run, its seed drawing the same steps), and the scores are the same numbers. A
trial cut short that could not go on (secure randomness) is deleted as the search ends, with the losers.
Nothing was released before the end, and every trial is the same mechanism it would have been in one go,
so the search's total ε is still the theorem's: a resumed search is the same search.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field

import numpy as np

from dpviz.config import RunConfig
from dpviz.errors import Cancelled, ConfigError, StoreError
from dpviz.store.safefile import locked, real_folder
from dpviz.privacy import accounting, selection

SEARCHABLE = ("lr_lp", "lr_ft", "clip_norm")
"""What a private search varies: fields that change neither q, T nor σ (batch size and epochs do)."""
SCORE_NOISE = 0.05
"""Default std of a trial's noisy held-out accuracy (5 points): σ of the count = 0.05 · holdout."""
THEOREM = {"poisson": "Papernot & Steinke (ICLR 2022), Theorem 6 (Poisson number of trials)",
           "negative-binomial": "Papernot & Steinke (ICLR 2022), Theorem 2 (truncated negative binomial number "
                                "of trials)",
           selection.FIXED: "composition of every trial and its score (a fixed number of trials, PLD accountant)"}
CHOICES = (*selection.DISTRIBUTIONS, selection.FIXED)
"""``--trials`` of a private search: a random number by either theorem, or a fixed number composed."""
PRIVATE_FIELDS = ("holdout_correct",)
"""Fields of a trial's summary that are exact statistics of private records outside the search's ε (only the
noisy score is accounted): removed from the released run's stored summary (`released_summary`)."""


def default_holdout(n: int) -> int:
    """Held-out examples when none are asked for: a fifth of the training split, at most 500."""
    return max(1, min(500, n // 5))


@dataclass(frozen=True, kw_only=True)
class PrivateSearch:
    """What a private search is asked (keyword-only; validated by `check`).

    Attributes:
        base: the config every trial starts from (its ε and δ are replaced by the trial's).
        space: {field: (low, high)} of `SEARCHABLE` fields, drawn log-uniformly.
        total_epsilon: ε of the whole search.
        total_delta: δ of the whole search, at most 1/n.
        distribution: poisson or negative-binomial (`selection.DISTRIBUTIONS`).
        mean_trials: E[K], at least 1.
        nb_shape: the negative binomial's shape η (1: geometric).
        holdout: held-out training examples the trials are scored on; 0: `default_holdout`.
        score_noise: std of the noisy held-out accuracy.
    """

    base: RunConfig
    space: dict = field(default_factory=dict)
    total_epsilon: float
    total_delta: float = 1e-5
    distribution: str = "negative-binomial"
    mean_trials: float = 5.0
    nb_shape: float = selection.NB_SHAPE
    holdout: int = 0
    score_noise: float = SCORE_NOISE

    def key(self) -> str:
        blob = json.dumps({**{f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "base"},
                           "base": self.base.to_json(hashed_only=True),
                           "space": {k: list(v) for k, v in sorted(self.space.items())}}, sort_keys=True)
        return "ps-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def check(s: PrivateSearch) -> None:
    """One `ConfigError` naming the first field the search cannot take."""
    if not (math.isfinite(s.total_epsilon) and 0 < s.total_epsilon <= 100):
        raise ConfigError("total_epsilon", "a finite number in (0, 100]", s.total_epsilon)
    if not 0 < s.total_delta < 1:
        raise ConfigError("total_delta", "a number in (0, 1/n]", s.total_delta)
    if s.distribution not in CHOICES:
        raise ConfigError("trials", ", ".join(CHOICES) + " (how the number of trials is drawn)", s.distribution)
    if not (math.isfinite(s.mean_trials) and 1 <= s.mean_trials <= 1000):
        raise ConfigError("mean_trials", "a number in [1, 1000]", s.mean_trials)
    if s.distribution == selection.FIXED and s.mean_trials != round(s.mean_trials):
        raise ConfigError("mean_trials", "a whole number of trials with --trials fixed", s.mean_trials)
    if not (math.isfinite(s.nb_shape) and 0 < s.nb_shape <= 100):
        raise ConfigError("nb_shape", "a number in (0, 100]", s.nb_shape)
    if not (math.isfinite(s.score_noise) and 0.001 <= s.score_noise <= 1):
        raise ConfigError("score_noise", "a number in [0.001, 1] (std of the noisy held-out accuracy)", s.score_noise)
    if not s.base.private:
        raise ConfigError("epsilon", "a private base config (the search sets each trial's ε)", "inf")
    if not selection.available():
        from dpviz.errors import missing_package

        raise missing_package("trials", "a private search's accounting", "dp_accounting")
    for k in s.space:
        if k not in SEARCHABLE:
            raise ConfigError(k, f"no range in a private search: it varies {', '.join(SEARCHABLE)} only (batch size "
                              "and epochs change each trial's privacy; set them as fixed values)")


@dataclass(frozen=True)
class Plan:
    """The search's privacy, decided once before any trial: σ, the schedule, what each part costs."""

    noise_multiplier: float
    phases: list
    holdout: int
    score_sigma: float
    trial_epsilon: float  # one trial's training by the base config's accountant, at total δ: each trial's ε
    trial_epsilon_with_score: float  # … and its score, by PLD
    search_epsilon: float  # the whole search by the theorem (≤ total ε)


def plan(s: PrivateSearch, *, extra_records: int = 0) -> Plan:
    """Calibrate the search: the trials' schedule (on the training split less the holdout), the score's
    noise, and the smallest σ whose search ε ≤ ``s.total_epsilon`` (`selection.calibrate_search`).

    ``extra_records``: records the trials train on beyond the data (an audit's included canaries count in
    n, `dpviz.audit.search`), so the plan's schedule is the one the trials will have."""
    from dpviz.training import calibration

    shape, blocks = calibration.task_shape(s.base.fixed_rates())
    holdout = s.holdout or default_holdout(shape.n)
    cfg = s.base.fixed_rates().replace(holdout=holdout, delta=s.total_delta)
    shape, blocks = calibration.task_shape(cfg)
    n = shape.n + extra_records
    calibration.check_delta(cfg, n)
    plans, q = calibration.schedule(cfg, n, blocks)
    bands = calibration.bands(cfg, q)  # a BandMF trial is accounted as its equivalent DP-SGD schedule
    phases = [accounting.Phase(name=p.name, steps=p.steps, noise_multiplier=0.0, sample_rate=q,
                               clip_norm=cfg.clip_norm, bands=bands) for p in plans if not p.public]
    score_sigma = s.score_noise * holdout
    kw = dict(score_sigma=score_sigma, mean_trials=s.mean_trials, distribution=s.distribution, nb_shape=s.nb_shape)
    try:
        sigma = selection.calibrate_search(total_epsilon=s.total_epsilon, delta=s.total_delta, phases=phases, **kw)
    except ValueError as e:
        raise ConfigError("total_epsilon", str(e).split(": ", 1)[-1]) from None
    phases = selection.with_sigma(phases, sigma)
    bound, grid = accounting.bound_by(cfg.accountant), selection.search_grid(s.total_epsilon)
    return Plan(noise_multiplier=sigma, phases=phases, holdout=holdout, score_sigma=score_sigma,
                trial_epsilon=accounting.epsilon(phases=phases, delta=s.total_delta, accountant=bound),
                trial_epsilon_with_score=selection.trial_epsilon(phases=phases, score_sigma=score_sigma,
                                                                 delta=s.total_delta, grid=grid),
                search_epsilon=selection.spent(phases=phases, delta=s.total_delta, grid=grid, **kw))


def draw_count(s: PrivateSearch) -> int:
    """K, the search's number of trials: drawn once, by a generator seeded by the search alone."""
    return selection.draw_trials(np.random.default_rng(seed_of(s.key(), -2)), mean_trials=s.mean_trials,
                                 distribution=s.distribution, nb_shape=s.nb_shape)


def score_noise(s: PrivateSearch):
    """The generator of the trials' score noise (seeded by the search alone)."""
    return np.random.default_rng(seed_of(s.key(), -3))


def seed_of(key: str, i: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{key}/{i}".encode()).digest()[:7], "big")


def trial_configs(s: PrivateSearch, p: Plan, k: int) -> list[RunConfig]:
    """The K trials: the base config at each trial's ε (σ no smaller than the plan's: the target is the
    plan's ε less 0.1 %), the holdout, its own seed, and rates drawn log-uniformly by the search's own
    generator (independent of every result)."""
    rng = np.random.default_rng(seed_of(s.key(), -1))
    eps = p.trial_epsilon * (1 - 1e-3)
    out = []
    for i in range(k):
        drawn = {f: float(math.exp(rng.uniform(math.log(lo), math.log(hi)))) for f, (lo, hi) in sorted(s.space.items())}
        out.append(s.base.replace(epsilon=eps, delta=s.total_delta, holdout=p.holdout, seed=seed_of(s.key(), i) % 2**31,
                                  **drawn))
    return out


def noisy_score(summary: dict, rng, score_sigma: float) -> float:
    """The trial's held-out accuracy with Gaussian noise of std ``score_sigma`` on its count of correct
    predictions (the only way a trial's result reaches the selection)."""
    return (summary["holdout_correct"] + rng.normal(0.0, score_sigma)) / summary["holdout_size"]


def run_search(s: PrivateSearch, *, run, store, progress=None, cancel=None) -> dict:
    """Run the search (or return its stored entry) and release the best trial.

    Args:
        s: the search.
        run: `dpviz.runner.run` (passed in: the run path sits above sweeps).
        store: the `Store` trials train in and the entry is written to.
        progress: called as ``progress(i, k)`` before trial i of k, and as ``progress(i, k, s, S)`` at its
            step s of S.
        cancel: a `threading.Event`; set, the search stops at the running trial's next step, deletes its
            trials, and releases nothing.

    Returns:
        the search's entry: total and per-trial ε, trials drawn, the theorem, the released run.
    """
    check(s)
    key = s.key()
    done = store.get_search(key)
    if done is not None and done.get("status") == "finished":
        return {**done, "cached": True}
    p = plan(s)  # a search it refuses (no σ reaches its total ε) is refused before anything is written
    # One search of a key at a time, across threads and processes: a twin waits, then reads the release (a twin
    # running beside it could otherwise claim a losing trial just as the first one deleted it, and train it again).
    with locked(real_folder(store.root, "searches") / f"{key}.lock"):
        return _search(s, key, p, run=run, store=store, progress=progress, cancel=cancel)


def released_summary(summary: dict) -> dict:
    """A trial's summary as its release stores it: without `PRIVATE_FIELDS` (the exact held-out count) and
    without how one request got it."""
    return {k: v for k, v in summary.items() if k not in (*PRIVATE_FIELDS, "cached", "waited_for")}


def _release(store, key: str, entry: dict, summary: dict | None = None) -> dict:
    """Release the entry's run: the user's, its summary (``summary`` as the search got it, else the stored one)
    stored without the exact held-out count and naming the search; then the entry, finished. Written as
    "releasing" first, so that a search killed half-way through its release finishes it when launched again
    (the released run's exact count may already be gone: no trial is scored again)."""
    run_id = entry["released_run_id"]
    store.put_search(key, None, {**entry, "status": "releasing"})
    store.claim(run_id, "user")
    summary = summary if summary is not None else (store.get_run(run_id)["summary"] or {})
    store.update_run(run_id, summary={**released_summary(summary), "private_search": _brief(entry)})
    entry = {**entry, "status": "finished"}
    store.put_search(key, run_id, entry)
    return entry


def _search(s: PrivateSearch, key: str, p: Plan, *, run, store, progress, cancel) -> dict:
    """`run_search` under the search's lock, with its plan ``p``."""
    done = store.get_search(key)
    if done is not None and done.get("status") == "finished":
        return {**done, "cached": True}
    if done is not None and done.get("status") == "releasing":  # killed while releasing: finish the release
        return {**_release(store, key, done), "cached": True}
    k = draw_count(s)
    entry = _entry(s, p, k)
    store.put_search(key, None, {**entry, "status": "running"})
    best, noise, trials = None, score_noise(s), []
    for i, cfg in enumerate(trial_configs(s, p, k)):
        if cancel is not None and cancel.is_set():
            _cancelled(store, key, entry, trials, None)
        if (twin := store.get_search(key)) is not None and twin.get("status") == "finished":
            return {**twin, "cached": True}  # a twin search finished meanwhile: its release answers this one
        if progress is not None:
            progress(i, k)
        started: list[str] = []  # the trial's run id, to delete should it be cancelled half-way
        try:  # its checkpoints keep snapshots: a trial cut short goes on from the last one, trained once
            summary = run(cfg, store=store, kind="search", cancel=cancel, on_start=started.append,
                          auto_checkpoints=True,
                          progress=None if progress is None else (lambda st, tot, _m, i=i: progress(i, k, st, tot)))
        except Cancelled:
            _cancelled(store, key, entry, trials, started[0] if started else None)
        except StoreError:  # a trial answered by a twin search's run, which that search deleted as it ended
            if (twin := store.get_search(key)) is not None and twin.get("status") == "finished":
                return {**twin, "cached": True}
            raise
        check_sigma(summary, p)
        score = noisy_score(summary, noise, p.score_sigma)
        trials.append((score, summary))
        if best is None or score > best[0]:
            best = (score, summary)
    if (twin := store.get_search(key)) is not None and twin.get("status") == "finished":
        return {**twin, "cached": True}  # a twin search released first: the same trials, the same best
    if best is None:  # Poisson drew K = 0: nothing is released, and nothing was spent on data
        store.put_search(key, None, {**entry, "status": "finished", "released_run_id": None})
        return {**entry, "status": "finished", "released_run_id": None, "cached": False}
    score, summary = best
    entry.update(released_run_id=summary["run_id"], noisy_holdout_accuracy=round(score, 4),
                 released={f: summary["config"][f] for f in SEARCHABLE}, test_accuracy=summary["test_accuracy"])
    entry = _release(store, key, entry, summary)
    for scored in trials:  # after the entry is written: a twin search that looks now finds the release
        if scored[1]["run_id"] != summary["run_id"]:
            _forget(store, scored)
    _forget_stopped(store, trial_configs(s, p, k))
    return {**entry, "cached": False}


def _cancelled(store, key: str, entry: dict, trials: list, trial: str | None) -> None:
    """Stop a cancelled search: its trials deleted (those it finished and the one cut short), its entry marked
    cancelled, nothing released."""
    for scored in trials:
        _forget(store, scored)
    if trial is not None:
        with contextlib.suppress(StoreError):
            store.delete_run(trial)
    store.put_search(key, None, {**entry, "status": "cancelled"})
    raise ConfigError("search", "cancelled; nothing released")


def check_sigma(summary: dict, p: Plan) -> None:
    sigmas = [ph["noise_multiplier"] for ph in summary["phases"]]
    if min(sigmas) < p.noise_multiplier * (1 - 1e-9):  # the trial's own calibration must not undercut the plan
        raise RuntimeError(f"privacy accounting error: a trial trained at σ = {min(sigmas)} < the search's "
                           f"{p.noise_multiplier}")


def _forget(store, scored) -> None:
    """Delete a trial that will not be released (only the search's own hidden runs)."""

    if scored is None:
        return
    try:  # the same search in another process may have deleted it first (it waited for the same trials)
        if store.known(scored[1]["run_id"])["kind"] == "search":
            store.delete_run(scored[1]["run_id"])
    except StoreError:
        pass


def _forget_stopped(store, configs) -> None:
    """Delete the search's hidden trials that stopped unfinished (a trial cut short that trained again as a new
    run, where its draws could not be taken again: `dpviz.training.resume.replays`): released nowhere, they
    would stay in the store for good."""
    hashes = {cfg.hash() for cfg in configs}
    for r in store.list_runs(kind="search"):
        if r["config_hash"] in hashes and r["status"] in ("interrupted", "cancelled", "failed"):
            with contextlib.suppress(StoreError):
                store.delete_run(r["run_id"])


def _entry(s: PrivateSearch, p: Plan, k: int) -> dict:
    return {"search_key": s.key(), "dataset": s.base.dataset, "backbone": s.base.backbone,
            "strategy": s.base.strategy, "base": s.base.to_dict(),
            "space": {f: list(v) for f, v in s.space.items()}, "total_epsilon": s.total_epsilon,
            "total_delta": s.total_delta, "epsilon_spent": p.search_epsilon,
            "per_trial_epsilon": p.trial_epsilon, "per_trial_accountant": accounting.bound_by(s.base.accountant),
            "per_trial_epsilon_with_score": p.trial_epsilon_with_score, "noise_multiplier": p.noise_multiplier,
            "distribution": s.distribution, "mean_trials": s.mean_trials,
            "nb_shape": s.nb_shape if s.distribution == "negative-binomial" else None, "trials_drawn": k,
            "holdout": p.holdout, "score_noise": s.score_noise, "score_sigma": p.score_sigma,
            "theorem": THEOREM[s.distribution] + ("" if s.distribution == selection.FIXED else
                                                  ", composed by dp_accounting's RepeatAndSelectDpEvent and RDP "
                                                  "accountant"),
            "covered": "the released configuration and model, and its noisy held-out score; not the number of "
                       "trials drawn, nor the test accuracy (an analysis of private data)"}


def _brief(entry: dict) -> dict:
    return {k: entry[k] for k in ("search_key", "total_epsilon", "total_delta", "epsilon_spent", "per_trial_epsilon",
                                  "distribution", "mean_trials", "trials_drawn", "theorem")}


def describe(entry: dict) -> str:
    """The search's entry in a few lines: what was released and what it cost."""
    lines = [f"private search {entry['search_key']}: total ε {entry['epsilon_spent']:.4g} of {entry['total_epsilon']:g} "
             f"at δ = {entry['total_delta']:g} ({entry['theorem']})",
             f"  trials drawn: {entry['trials_drawn']} ({entry['distribution']}, mean {entry['mean_trials']:g}); each at "
             f"σ = {entry['noise_multiplier']:.4g}, ε {entry['per_trial_epsilon']:.4g} by {entry['per_trial_accountant']} "
             f"({entry['per_trial_epsilon_with_score']:.4g} with its noisy score, by pld)",
             f"  scored on {entry['holdout']} held-out training examples, accuracy noise std {entry['score_noise']:g}"]
    if entry.get("released_run_id"):
        rates = "  ".join(f"{k}={v:.4g}" for k, v in entry["released"].items() if k in entry["space"])
        lines.append(f"  released: run {entry['released_run_id']}  {rates}  noisy held-out accuracy "
                     f"{entry['noisy_holdout_accuracy']:.4f}  test accuracy {entry['test_accuracy']:.4f}")
    else:
        lines.append("  released: nothing (no trial was drawn)")
    lines.append("  covered by the total ε: " + entry["covered"])
    return "\n".join(lines)


def row(entry: dict) -> dict:
    """One search as a table row (the Tuning page's, `python -m dpviz` scripts')."""
    return {"search": entry["search_key"], "status": entry.get("status"), "dataset": entry["dataset"],
            "strategy": entry["strategy"], "total ε": entry["total_epsilon"], "ε spent": round(entry["epsilon_spent"], 4),
            "δ": entry["total_delta"], "ε per trial": round(entry["per_trial_epsilon"], 4),
            "trials": f"{entry['distribution']}, mean {entry['mean_trials']:g}, drawn {entry['trials_drawn']}",
            "released run": entry.get("released_run_id"), "noisy held-out acc.": entry.get("noisy_holdout_accuracy"),
            "test acc.": entry.get("test_accuracy")}
