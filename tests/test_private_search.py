"""A private search: Papernot & Steinke's bound through dp_accounting, calibrated σ, the held-out split,
and `tune --private` end to end (one stored entry, only the best trial kept, asked twice trains once)."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from dpviz import data
from dpviz.config import RunConfig
from dpviz.errors import ConfigError
from dpviz.privacy import accounting, selection
from dpviz.privacy.accounting import Phase
from dpviz.store import Store
from dpviz.sweeps import private

DELTA = 1e-5


def schedule(sigma: float = 0.0, steps: int = 40, q: float = 0.2) -> list[Phase]:
    return [Phase(name="fft", steps=steps, noise_multiplier=sigma, sample_rate=q, clip_norm=1.0)]


# --- the theorem, computed independently --------------------------------------------------------------
def _rdp_to_dp(orders, rdp, delta):
    """The classical conversion ε = min_λ rdp(λ) + log(1/δ)/(λ − 1) (Mironov 2017), looser than
    dp_accounting's, so the library's ε must not exceed it."""
    return min(r + math.log(1 / delta) / (a - 1) for a, r in zip(orders, rdp) if a > 1)


def test_geometric_search_of_a_gaussian_matches_theorem_2_by_hand():
    sigma, mean = 5.0, 8.0  # Q: one Gaussian mechanism, RDP λ/(2σ²) exactly
    orders = [a for a in selection.ORDERS if a > 1]
    rdp = [a / (2 * sigma**2) for a in orders]
    eta = 1.0
    gamma = selection.tnb_gamma(mean, eta)
    const = (1 + eta) * min((1 - 1 / b) * r + math.log(1 / gamma) / b for b, r in zip(orders, rdp))
    by_hand = _rdp_to_dp(orders, [r + const + math.log(mean) / (a - 1) for a, r in zip(orders, rdp)], DELTA)
    from dp_accounting import dp_event

    ours = selection._rdp_epsilon(dp_event.RepeatAndSelectDpEvent(dp_event.GaussianDpEvent(sigma), mean, eta), DELTA)
    assert ours <= by_hand + 1e-9 and ours > 0.8 * by_hand
    single = selection._rdp_epsilon(dp_event.GaussianDpEvent(sigma), DELTA)
    assert ours > single  # selecting among trials is never free


def _trial_rdp(phases, score_sigma, orders):
    """A trial's RDP per order, from Opacus's analysis of the subsampled Gaussian (another library than the
    dp_accounting the product calibrates with) plus the score's Gaussian, α / (2σ²)."""
    from opacus.accountants.analysis.rdp import compute_rdp

    out = np.zeros(len(orders))
    for p in phases:
        out += np.asarray(compute_rdp(q=p.sample_rate, noise_multiplier=p.noise_multiplier, steps=p.steps,
                                      orders=list(orders)))
    return out + np.asarray(orders) / (2 * score_sigma**2)


def _to_dp(orders, rdp, delta):
    """RDP → (ε, δ): Canonne, Kamath & Steinke (2020), Proposition 12, at the best order."""
    return min(r + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1) for a, r in zip(orders, rdp))


def _delta_at(orders, rdp, eps):
    """δ of a mechanism with RDP ``rdp`` at ε (the same proposition, solved for δ)."""
    return math.exp(min((a - 1) * (r - eps) + (a - 1) * math.log(1 - 1 / a) - math.log(a) for a, r in zip(orders, rdp)))


def search_by_hand(phases, score_sigma, mean, distribution, delta, eta=1.0):
    """Papernot & Steinke's bound on releasing the best of K trials, written out from the paper: Theorem 2
    (truncated negative binomial of shape η) or Theorem 6 (Poisson of mean μ)."""
    orders = [a for a in selection.ORDERS if a > 1]
    rdp = _trial_rdp(phases, score_sigma, orders)
    if distribution == "negative-binomial":
        gamma = selection.tnb_gamma(mean, eta)
        const = (1 + eta) * min((1 - 1 / b) * r + math.log(1 / gamma) / b for b, r in zip(orders, rdp))
        total = [r + const + math.log(mean) / (a - 1) for a, r in zip(orders, rdp)]
    else:  # Q is (ε̂, δ̂)-DP with ε̂ = log(1 + 1/(λ − 1))
        total = [r + mean * _delta_at(orders, rdp, math.log1p(1 / (a - 1))) + math.log(mean) / (a - 1)
                 for a, r in zip(orders, rdp)]
    return _to_dp(orders, total, delta)


@pytest.mark.parametrize("dist", selection.DISTRIBUTIONS)
def test_the_searchs_calibrated_sigma_meets_the_theorem_written_out_by_hand(dist):
    """The σ `calibrate_search` gives a DP-SGD trial (Poisson-sampled steps and a noisy score) keeps the whole
    search within its total by the theorem computed here from the paper, with Opacus's RDP of the trial;
    1 % less noise would not."""
    phases, score_sigma, mean, total = schedule(steps=120, q=0.05), 8.0, 6.0, 2.0
    sigma = selection.calibrate_search(total_epsilon=total, delta=DELTA, phases=phases, score_sigma=score_sigma,
                                       mean_trials=mean, distribution=dist)
    ours = selection.search_epsilon(phases=schedule(sigma, 120, 0.05), score_sigma=score_sigma, delta=DELTA,
                                    mean_trials=mean, distribution=dist)
    by_hand = search_by_hand(schedule(sigma, 120, 0.05), score_sigma, mean, dist, DELTA)
    assert by_hand <= total * 1.005, (dist, sigma, by_hand)
    assert by_hand == pytest.approx(ours, rel=0.02)
    assert search_by_hand(schedule(sigma * 0.97, 120, 0.05), score_sigma, mean, dist, DELTA) > total


def test_the_truncated_negative_binomial_has_the_asked_mean():
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    for mean, shape in ((5, 1), (10, 0.5), (3, 2)):
        assert selection.tnb_gamma(mean, shape) == pytest.approx(rdp._gamma_truncated_negative_binomial(shape, mean),
                                                                 rel=1e-6)
    rng = np.random.default_rng(0)
    for dist in selection.DISTRIBUTIONS:
        draws = [selection.draw_trials(rng, mean_trials=4, distribution=dist) for _ in range(20000)]
        assert np.mean(draws) == pytest.approx(4, rel=0.03)
        assert min(draws) == (0 if dist == "poisson" else 1)


@pytest.mark.parametrize("dist", selection.DISTRIBUTIONS)
def test_calibrated_sigma_meets_the_total_and_is_the_smallest(dist):
    kw = dict(delta=DELTA, score_sigma=10.0, mean_trials=5, distribution=dist)
    sigma = selection.calibrate_search(total_epsilon=1.0, phases=schedule(), **kw)
    assert selection.search_epsilon(phases=schedule(sigma), **kw) <= 1.0
    assert selection.search_epsilon(phases=schedule(sigma * 0.99), **kw) > 1.0
    # more trials on average need more noise for the same total
    assert selection.calibrate_search(total_epsilon=1.0, phases=schedule(), **{**kw, "mean_trials": 8}) > sigma


def test_a_total_below_the_score_s_cost_is_refused():
    with pytest.raises(ValueError, match="total_epsilon"):
        selection.calibrate_search(total_epsilon=0.05, delta=DELTA, phases=schedule(), score_sigma=0.5,
                                   mean_trials=5, distribution="poisson")


def test_a_fixed_count_search_costs_its_trials_composed():
    one = schedule(2.0)
    k = selection.fixed_count_epsilon(trials=[one] * 4, delta=DELTA)
    assert k == pytest.approx(accounting.epsilon(phases=schedule(2.0, steps=160), delta=DELTA, accountant="pld"),
                              rel=1e-6)
    assert k > selection.fixed_count_epsilon(trials=[one], delta=DELTA)


# --- the held-out split -------------------------------------------------------------------------------
def test_the_holdout_is_fixed_stratified_and_never_trained_on():
    full = data.load(RunConfig())
    held = data.load(RunConfig(holdout=200))
    assert held.n == full.n - 200 and len(held.y_holdout) == 200
    rows = {tuple(r.flatten().tolist()) for r in held.x_train}
    assert not any(tuple(r.flatten().tolist()) in rows for r in held.x_holdout)
    share = np.bincount(held.y_holdout.numpy(), minlength=10) / 200
    assert np.abs(share - np.bincount(full.y_train.numpy(), minlength=10) / full.n).max() < 0.01
    again = data.load(RunConfig(holdout=200, seed=7))
    assert (again.y_holdout == held.y_holdout).all() and (again.x_holdout == held.x_holdout).all()
    assert RunConfig().hash() == RunConfig(holdout=0).hash() != RunConfig(holdout=200).hash()


def test_a_holdout_over_half_the_data_is_refused():
    from dpviz.errors import ConfigError

    with pytest.raises(ConfigError, match="holdout"):
        data.load(RunConfig(holdout=1000))


# --- end to end ---------------------------------------------------------------------------------------
def cli(env, *args):
    return subprocess.run([sys.executable, "-m", "dpviz", *args], env=env, capture_output=True, text=True,
                          timeout=900)


SEARCH = ["tune", "--private", "--total-epsilon", "4", "--trials", "negative-binomial", "--mean-trials", "2",
          "--strategy", "lp", "--epochs", "2", "2", "--lr-lp", "0.05", "5", "--json"]


@pytest.mark.subprocess
def test_tune_private_releases_one_run_within_the_total_and_answers_again_from_the_store(cli_env, cache_dir):
    r = cli(cli_env, *SEARCH)
    assert r.returncode == 0, r.stderr
    entry = json.loads(r.stdout)
    assert entry["status"] == "finished" and not entry["cached"]
    assert entry["epsilon_spent"] <= entry["total_epsilon"] == 4.0
    assert entry["per_trial_epsilon"] < entry["epsilon_spent"]  # the search costs more than one trial
    assert entry["trials_drawn"] >= 1 and "Theorem 2" in entry["theorem"]
    store = Store(cache_dir)
    runs = store.list_runs(kind=("user", "trial", "search"))
    assert [r["run_id"] for r in runs] == [entry["released_run_id"]]  # the other trials are gone
    released = store.get_run(entry["released_run_id"])
    summary = released["summary"]
    assert summary["private_search"]["total_epsilon"] == 4.0 and summary["config"]["holdout"] == entry["holdout"]
    assert min(p["noise_multiplier"] for p in summary["phases"]) >= entry["noise_multiplier"]
    assert 0.05 <= summary["config"]["lr_lp"] <= 5
    assert [s["search_key"] for s in store.searches()] == [entry["search_key"]]
    listed = cli(cli_env, "list").stdout  # the released run is listed with what the search spent
    assert f"by private search {entry['search_key']}" in listed and f"{entry['epsilon_spent']:.4g}" in listed
    again = cli(cli_env, *SEARCH)
    assert again.returncode == 0 and json.loads(again.stdout)["cached"] is True
    assert [r["run_id"] for r in store.list_runs(kind=("user", "trial", "search"))] == [entry["released_run_id"]]


@pytest.mark.parametrize("extra,field", [
    (["--private", "--trials", "poisson"], "total_epsilon"),
    (["--private", "--total-epsilon", "1", "--trials", "5"], "trials"),
    (["--private", "--total-epsilon", "1", "--trials", "poisson", "--batch-size", "64", "128"], "batch_size"),
    (["--private", "--total-epsilon", "1", "--trials", "poisson", "--epsilon", "2"], "epsilon"),
    (["--private", "--total-epsilon", "1", "--trials", "poisson", "--mean-trials", "0.5"], "mean_trials"),
    (["--total-epsilon", "1"], "total_epsilon"),
    (["--trials", "poisson"], "trials"),
])
@pytest.mark.subprocess
def test_private_search_flags_are_refused_in_one_line(cli_env, cache_dir, extra, field):
    r = cli(cli_env, "tune", "--lr-ft", "0.01", "0.1", *extra)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and field in r.stderr
    assert Store(cache_dir).list_runs() == [] and Store(cache_dir).searches() == []


def test_a_trial_below_the_planned_sigma_stops_the_search():
    plan = private.Plan(noise_multiplier=2.0, phases=[], holdout=100, score_sigma=5.0, trial_epsilon=1.0,
                        trial_epsilon_with_score=1.1, search_epsilon=2.0)
    private.check_sigma({"phases": [{"noise_multiplier": 2.0}]}, plan)
    with pytest.raises(RuntimeError, match="privacy accounting error"):
        private.check_sigma({"phases": [{"noise_multiplier": 1.99}]}, plan)


def test_an_audit_of_a_private_search_bounds_epsilon_below_its_total(cache_dir):
    from dpviz.audit.run import AuditSpec
    from dpviz.audit.search import audit_search

    search = private.PrivateSearch(base=RunConfig(strategy="lp", epochs=2), space={"lr_lp": (0.05, 5.0)},
                                   total_epsilon=8.0, distribution="negative-binomial", mean_trials=2)
    store = Store(cache_dir)
    report = audit_search(search, AuditSpec(canaries=200), store=store)
    assert report["released"] and report["trials_drawn"] >= 1
    assert report["epsilon_spent"] <= 8.0
    assert 0 <= max(report["epsilon_lb"], report["epsilon_lb_fdp"]) <= report["epsilon_spent"]
    assert report["bound_significance"] == pytest.approx(0.025) and "Gaussian" in report["fdp_assumption"]
    assert store.list_runs(kind=("user", "trial", "search")) == []  # an audit stores only its report
    assert audit_search(search, AuditSpec(canaries=200), store=store)["cached"] is True


def test_the_command_line_offers_every_way_to_count_trials():
    from dpviz.cli.sweeps import _trials

    assert all(_trials(c) == c for c in private.CHOICES) and _trials("7") == 7


def test_a_fixed_count_search_is_calibrated_by_composition():
    kw = dict(delta=DELTA, score_sigma=10.0, mean_trials=4, distribution=selection.FIXED)
    sigma = selection.calibrate_search(total_epsilon=2.0, phases=schedule(), **kw)
    spent = selection.fixed_search_epsilon(phases=schedule(sigma), score_sigma=10.0, delta=DELTA, trials=4)
    assert 1.99 < spent <= 2.0
    assert selection.draw_trials(np.random.default_rng(0), mean_trials=4, distribution=selection.FIXED) == 4


@pytest.mark.subprocess
def test_the_same_search_launched_twice_at_once_trains_each_trial_once(cli_env, cache_dir):
    procs = [subprocess.Popen([sys.executable, "-m", "dpviz", *SEARCH], env=cli_env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    entries = [json.loads(o[0]) for o in outs]
    assert entries[0]["released_run_id"] == entries[1]["released_run_id"]  # one trained it, the other waited
    store = Store(cache_dir)
    assert [r["run_id"] for r in store.list_runs(kind=("user", "trial", "search"))] == [entries[0]["released_run_id"]]
    assert len(store.searches()) == 1


def test_a_cancelled_private_search_stops_within_its_trial_and_leaves_nothing(cache_dir):
    """Cancel at step 3 of the second trial: the trial stops at its next step (not at its end), the progress
    counted its steps, and neither that trial nor the first one stays stored; nothing is released."""
    import threading

    from dpviz import runner
    from dpviz.errors import ConfigError

    search = private.PrivateSearch(base=RunConfig(strategy="lp", epochs=3), space={"lr_lp": (0.05, 5.0)},
                                   total_epsilon=8.0, distribution=selection.FIXED, mean_trials=3)
    store, cancel, seen = Store(cache_dir), threading.Event(), []

    def progress(i, k, s=None, total=None):
        seen.append((i, s, total))
        if (i, s) == (1, 3):
            cancel.set()

    with pytest.raises(ConfigError, match="cancelled; nothing released"):
        private.run_search(search, run=runner.run, store=store, cancel=cancel, progress=progress)
    steps = [s for i, s, _ in seen if i == 1 and s]
    total = next(t for i, s, t in seen if s)
    assert max(steps) <= 4 < total, seen  # stopped at the step after the cancel, well before the trial's end
    assert [(i, s) for i, s, _ in seen if s is None] == [(0, None), (1, None)]  # the third trial never began
    assert store.list_runs(kind=("user", "trial", "search")) == []
    assert store.get_search(search.key())["status"] == "cancelled"


@pytest.mark.slow
def test_a_bandmf_trial_is_accounted_as_its_equivalent_dp_sgd_schedule_and_the_search_stays_within_its_total():
    """A BandMF phase's trial event composes ⌈T/b⌉ steps at rate b·q (its equivalent DP-SGD schedule), so its
    ε is that schedule's; a planned BandMF search meets its total, and its σ is larger than DP-SGD's (fewer,
    less amplified steps); b·q > 1 is refused in one line."""
    banded = [Phase(name="fft", steps=40, noise_multiplier=2.0, sample_rate=0.1, clip_norm=1.0, bands=4)]
    equivalent = [Phase(name="fft", steps=10, noise_multiplier=2.0, sample_rate=0.4, clip_norm=1.0)]
    kw = dict(score_sigma=20.0, delta=DELTA)
    assert selection.trial_epsilon(phases=banded, **kw) == pytest.approx(selection.trial_epsilon(phases=equivalent, **kw))
    assert selection.trial_epsilon(phases=banded, **kw) != pytest.approx(
        selection.trial_epsilon(phases=[Phase(**{**banded[0].to_dict(), "bands": 1})], **kw), rel=1e-2)
    base = dict(space={"lr_ft": (0.01, 1.0)}, total_epsilon=4.0, distribution="poisson", mean_trials=3)
    sgd = private.plan(private.PrivateSearch(base=RunConfig(strategy="fft"), **base))
    band = private.plan(private.PrivateSearch(base=RunConfig(strategy="fft", mechanism="bandmf", bands=2), **base))
    assert band.search_epsilon <= 4.0 and [p.bands for p in band.phases] == [2]
    assert band.noise_multiplier > sgd.noise_multiplier
    with pytest.raises(ConfigError, match="^bands: at most"):
        private.plan(private.PrivateSearch(base=RunConfig(strategy="fft", mechanism="bandmf", bands=8), **base))


def _everything_stored(store) -> str:
    """Every row of every table of the store's SQLite database, as SQL text (JSON columns included)."""
    import sqlite3

    with sqlite3.connect(store.db) as c:
        return "\n".join(c.iterdump())


@pytest.mark.slow  # a full audit / a two-trial search: the rest tier
def test_a_released_trial_keeps_only_its_noisy_score_not_its_exact_holdout_count(cache_dir, monkeypatch):
    """A real search of 2 trials (real training, real SQLite): neither what it returns, nor its stored entry, nor
    the released run's stored summary, nor any other row of the store holds the exact held-out count of a trial
    (a count of private records outside the total ε); the noisy score that selected it is kept. A search killed
    half-way through its release finishes it when launched again, without the count either."""
    from dpviz import runner

    search = private.PrivateSearch(base=RunConfig(strategy="lp", epochs=2), space={"lr_lp": (0.05, 5.0)},
                                   total_epsilon=8.0, distribution=selection.FIXED, mean_trials=2)
    store = Store(cache_dir)
    trained = []
    entry = private.run_search(search, run=lambda cfg, **kw: trained.append(r := runner.run(cfg, **kw)) or r,
                               store=store)
    assert len(trained) == 2 and all("holdout_correct" in t for t in trained)  # the search itself read them
    assert entry["status"] == "finished" and 0 <= entry["noisy_holdout_accuracy"] <= 1.2
    released = store.get_run(entry["released_run_id"])["summary"]
    assert released["private_search"]["search_key"] == search.key() and released["holdout_size"] == entry["holdout"]
    again = private.run_search(search, run=runner.run, store=store)
    for doc in (entry, again, store.get_search(search.key()), released, store.searches(), store.list_runs()):
        assert "holdout_correct" not in json.dumps(doc), doc
    assert "holdout_correct" not in _everything_stored(store)

    # killed after the entry said "releasing", before the released run's summary lost its count: launched
    # again, the search finishes the release from the store, training nothing
    store.put_search(search.key(), None, {**again, "status": "releasing"})
    store.update_run(entry["released_run_id"], summary={**released, "holdout_correct": 7})
    resumed = private.run_search(search, run=lambda *a, **k: pytest.fail("trained again"), store=store)
    assert resumed["status"] == "finished" and resumed["released_run_id"] == entry["released_run_id"]
    assert "holdout_correct" not in _everything_stored(store)
