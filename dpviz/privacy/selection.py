"""Pure privacy math of hyperparameter search: the best of a random number of DP trials, and what a
search of a fixed number of trials costs.

**The theorem.** Papernot & Steinke, "Hyperparameter Tuning with Renyi Differential Privacy" (ICLR 2022,
arXiv:2110.03620), Theorems 2 and 6. Let Q be a randomized algorithm that is (λ, ε(λ))-RDP at every order
λ > 1 and outputs a candidate with a quality score. Draw K from a truncated negative binomial distribution
(shape η > 0, Theorem 2; η = 1 is the geometric) or from a Poisson distribution (Theorem 6), run Q
independently K times on the same data and release only the candidate of highest score (nothing when
K = 0). The release is (λ, ε'(λ))-RDP with

* truncated negative binomial: ε'(λ) = ε(λ) + (1 + η)(1 − 1/λ̂) ε(λ̂) + (1 + η) log(1/γ) / λ̂
  + log E[K] / (λ − 1), for any λ̂ ≥ 1 (γ is fixed by E[K] and η);
* Poisson of mean μ: ε'(λ) = ε(λ) + μ δ̂ + log μ / (λ − 1), where Q is (ε̂, δ̂)-DP with
  ε̂ = log(1 + 1/(λ − 1)).

Its conditions, which `dpviz.sweeps.private` keeps: (1) every run of Q is independent: fresh noise,
a fresh seed, hyperparameters drawn at random from a fixed distribution, never chosen from earlier
trials' results (an adaptive sampler such as TPE breaks it); (2) one ε(λ) bounds Q whatever
hyperparameters it draws: every trial has the same σ, sampling rate and steps; (3) the score is part
of Q's output, so it must itself be private: it is a Gaussian-noised count of correct predictions on
held-out private data, composed into Q; (4) only the best candidate and its score are released, not
the other trials, their scores, nor K itself (with K known, the release is a best-of-k for a fixed k,
which costs about k trials' composition).

dp_accounting represents this as ``RepeatAndSelectDpEvent`` and its RDP accountant implements both
theorems (``_compute_rdp_repeat_and_select``); this module builds the events and calibrates σ through it.
A fixed number of trials is costed by the PLD accountant (`fixed_count_epsilon`): every trial composed.
"""

from __future__ import annotations

import math

from dpviz.privacy.accountants import pld_grid_of
from dpviz.privacy.accounting import PLD_DISCRETISATION, Phase, with_sigma  # noqa: F401  (with_sigma: callers')

DISTRIBUTIONS = ("poisson", "negative-binomial")
"""How the number of trials K is drawn: Poisson (shape ∞) or truncated negative binomial (shape η)."""
FIXED = "fixed"
"""A fixed number of trials, every one (and its score) composed by PLD: the ordinary search, costed honestly."""

NB_SHAPE = 1.0
"""The truncated negative binomial's default shape η: 1, the geometric distribution (Papernot & Steinke's
Figure 2: the smaller η, the lower the overhead, and η = 1 keeps E[K] a plain mean of a familiar law)."""

# Rényi orders for the search's accountant: fine near 1 (large ε), Opacus's integers, and large orders
# (small ε at small δ); the accountant takes the best order, so more orders can only tighten ε.
ORDERS = tuple([1 + x / 20 for x in range(1, 20)] + [2 + x / 4 for x in range(40)] + list(range(12, 64))
               + [80, 96, 128, 192, 256, 384, 512, 1024])


def shape_of(distribution: str, nb_shape: float = NB_SHAPE) -> float:
    """dp_accounting's ``shape`` of ``distribution``: ∞ for Poisson, η for the negative binomial."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"trials: one of {', '.join(DISTRIBUTIONS)}; got {distribution!r}")
    return math.inf if distribution == "poisson" else float(nb_shape)


def available() -> bool:
    """Whether dp_accounting (the ``pld`` extra) is installed: a search is costed by it."""
    import importlib.util

    return importlib.util.find_spec("dp_accounting") is not None


def _events():
    try:
        from dp_accounting import dp_event  # ≈ 0.9 s once: only where a search is costed
    except ImportError as e:
        from dpviz.errors import missing_package

        raise missing_package("trials", "a private search's accounting", "dp_accounting") from e
    return dp_event


def trial_event(*, phases: list[Phase], score_sigma: float | None):
    """One trial as a dp_accounting event: its DP-SGD phases (Poisson-sampled Gaussians, each composed over
    its steps; a BandMF phase as the DP-SGD schedule it is exactly as private as, `Phase.accounted`) and,
    when ``score_sigma`` is given, the Gaussian-noised count it is scored by (sensitivity 1 under adding or
    removing one example: one example changes the count of correct predictions by at most 1)."""
    ev = _events()
    parts = [ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(sigma)), steps)
             for sigma, q, steps in (p.accounted() for p in phases) if steps > 0]
    if score_sigma is not None:
        parts.append(ev.GaussianDpEvent(score_sigma))
    return ev.ComposedDpEvent(parts)


def _rdp_epsilon(event, delta: float) -> float:
    import logging

    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

    acc = RdpAccountant(orders=list(ORDERS))
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)  # orders near 1 whose series does not converge at small σ are left out, said
    try:                          # as a warning per order: leaving an order out only loosens ε, never lowers it
        acc.compose(event)
        return float(acc.get_epsilon(delta))
    finally:
        absl.setLevel(level)


def search_epsilon(*, phases: list[Phase], score_sigma: float | None, delta: float, mean_trials: float,
                   distribution: str, nb_shape: float = NB_SHAPE) -> float:
    """ε at ``delta`` of releasing the best of K trials, K drawn from ``distribution`` with mean
    ``mean_trials`` (Papernot & Steinke, through dp_accounting's RDP accountant)."""
    if mean_trials < 1:
        raise ValueError(f"mean_trials: at least 1; got {mean_trials}")
    ev = _events()
    inner = trial_event(phases=phases, score_sigma=score_sigma)
    return _rdp_epsilon(ev.RepeatAndSelectDpEvent(inner, float(mean_trials), shape_of(distribution, nb_shape)), delta)


def _pld_epsilon(event, delta: float, grid: float | None = None) -> float:
    """ε of ``event`` by the PLD accountant on a privacy-loss grid of ``grid`` (None: `PLD_DISCRETISATION`). Its
    pessimistic estimate bounds ε from above on any grid; a coarser one only loosens it a little."""
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    acc = PLDAccountant(value_discretization_interval=grid or PLD_DISCRETISATION)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def trial_epsilon(*, phases: list[Phase], score_sigma: float | None, delta: float, grid: float | None = None) -> float:
    """ε at ``delta`` of one trial (its training and its score) by the PLD accountant (``grid``: `_pld_epsilon`)."""
    return _pld_epsilon(trial_event(phases=phases, score_sigma=score_sigma), delta, grid)


def fixed_count_epsilon(*, trials: list[list[Phase]], delta: float) -> float:
    """ε at ``delta`` of running every schedule in ``trials`` on the same data and releasing them all,
    i.e. an ordinary search of a fixed number of trials: each trial composed, by the PLD accountant."""
    from dpviz.privacy.accounting import epsilon

    return epsilon(phases=[p for t in trials for p in t], delta=delta, accountant="pld")


def fixed_search_epsilon(*, phases: list[Phase], score_sigma: float | None, delta: float, trials: int,
                         grid: float | None = None) -> float:
    """ε at ``delta`` of ``trials`` trials, each with its score, all composed (PLD on ``grid``: `_pld_epsilon`):
    what a search of a fixed number of trials costs when every trial and score may be released."""
    return _pld_epsilon(_events().SelfComposedDpEvent(trial_event(phases=phases, score_sigma=score_sigma), int(trials)),
                        delta, grid)


def spent(*, phases: list[Phase], score_sigma: float | None, delta: float, mean_trials: float, distribution: str,
          nb_shape: float = NB_SHAPE, grid: float | None = None) -> float:
    """ε at ``delta`` of the whole search: by the theorem for a random count, composed for `FIXED` (PLD on
    ``grid``: `_pld_epsilon`)."""
    if distribution == FIXED:
        return fixed_search_epsilon(phases=phases, score_sigma=score_sigma, delta=delta, trials=round(mean_trials),
                                    grid=grid)
    return search_epsilon(phases=phases, score_sigma=score_sigma, delta=delta, mean_trials=mean_trials,
                          distribution=distribution, nb_shape=nb_shape)


def calibrate_search(*, total_epsilon: float, delta: float, phases: list[Phase], score_sigma: float | None,
                     mean_trials: float, distribution: str, nb_shape: float = NB_SHAPE,
                     rel_tol: float = 2e-3) -> float:
    """The smallest σ (to ``rel_tol``) at which the whole search — every trial at σ, scored, and the best
    released — is (``total_epsilon``, ``delta``)-DP; ``distribution`` `FIXED`: ``mean_trials`` trials
    composed (`fixed_search_epsilon`), on the PLD grid `search_grid` of the target (an upper bound, as the finer
    grid's ε: the σ found keeps the search within the target on either). The answer always satisfies the target:
    bisection keeps the upper end feasible.

    Raises:
        ValueError: when even σ = 10⁴ does not reach the target (the score's noise, or the theorem's
            log E[K] / (λ − 1) term, alone spends more than ``total_epsilon``).
    """
    grid = search_grid(total_epsilon)

    def at(s: float) -> float:
        return spent(phases=with_sigma(phases, s), score_sigma=score_sigma, delta=delta, mean_trials=mean_trials,
                     distribution=distribution, nb_shape=nb_shape, grid=grid)

    lo, hi = 0.3, 2.0
    while at(hi) > total_epsilon:
        lo, hi = hi, hi * 2
        if hi > 1e4:
            raise ValueError(f"total_epsilon: {total_epsilon:g} is below what the search costs at any noise "
                             f"(its score and the mean of {mean_trials:g} trials alone spend "
                             f"{at(1e4):.3g} at δ = {delta:g}); raise it or lower --mean-trials")
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if at(mid) <= total_epsilon else (mid, hi)
    return hi


def search_grid(total_epsilon: float) -> float:
    """The PLD grid a search of ``total_epsilon`` is costed on: the run accountant's grid for that ε
    (`dpviz.privacy.accountants.pld_grid_of`: `PLD_DISCRETISATION` doubled per doubling of ε from 1). Measured on
    a 2-core CPU (``bench/bench_private_search.py``): at a total ε of 8 the K = 3 search's ε is the same to five
    digits as on the 1e-4 grid, in a seventh of the time."""
    return pld_grid_of(total_epsilon)


def tnb_gamma(mean: float, shape: float) -> float:
    """γ of the truncated negative binomial with shape η = ``shape`` and mean ``mean`` (> 1): the mean is
    η(1 − γ) / (γ(1 − γ^η)) (γ^η·log-form at η = 0 excluded), decreasing in γ, solved by bisection."""
    def mean_of(g: float) -> float:
        return shape * (1 - g) / (g * (1 - g ** shape))

    lo, hi = 1e-12, 1 - 1e-12
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_of(mid) > mean else (lo, mid)
    return (lo + hi) / 2


def draw_trials(rng, *, mean_trials: float, distribution: str, nb_shape: float = NB_SHAPE) -> int:
    """K, drawn once per search from ``distribution`` by the numpy Generator ``rng``: Poisson(μ) (0 is
    possible: the search then releases nothing), or the truncated negative binomial (K ≥ 1; K = 1 when
    the mean is 1)."""
    if distribution == FIXED:
        return round(mean_trials)
    shape = shape_of(distribution, nb_shape)
    if math.isinf(shape):
        return int(rng.poisson(mean_trials))
    if mean_trials <= 1:
        return 1
    gamma = tnb_gamma(mean_trials, shape)
    while True:  # the negative binomial conditioned on K ≥ 1
        k = int(rng.negative_binomial(shape, gamma))
        if k >= 1:
            return k
