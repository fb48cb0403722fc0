"""Lower bounds on ε from one training run's canary guesses: pure math on counts and scores.

One run, m canaries, each included independently with probability ½. An attacker looks at what the run
released and guesses r canaries (in or out), v of them right. Two bounds turn (m, r, v) into an ε that
(ε, δ)-DP rules out with the stated confidence:

* Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1) training run" (Thm. 5.2): under
  (ε, δ)-DP, P[V ≥ v] ≤ β + 2mδ·α with p = e^ε/(1 + e^ε), β = P[Bin(r, p) ≥ v] and
  α = max_{1≤i≤v} P[v − i ≤ Bin(r, p) < v] / i;
* Mahloujifar et al. 2024, "Auditing f-differential privacy in one run": the same counts checked against
  the Gaussian trade-off curve that (ε, δ) allows (μ-GDP with μ = `gaussian_mu`), which is tighter.

ε_lb is the largest ε whose claim the counts still reject. Guesses come from ranking scores (`guess_counts`):
the top k as "in", the bottom k as "out", for k on a fixed grid. An audit reports the larger of the two
bounds at the best k, so the stated confidence is the family's: one Bonferroni correction over both bounds
and every k of the grid (`significance`): each bound at (1 − confidence)/2, each of its tests at
(1 − confidence)/(2·|grid|). The f-DP bound is a bound on ε only for a mechanism whose trade-off curve is
Gaussian (`FDP_ASSUMPTION`); the one-run bound assumes nothing beyond (ε, δ)-DP. `tests/test_audit.py`
checks these functions against brute-force tails, the closed form when every guess is right, and
`jax_privacy.auditing`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special
from scipy.stats import binom

GUESS_FRACTIONS = (1.0, 0.9, 0.75, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02)  # of the m canaries, half each side
BOUNDS = 2
"""The bounds an audit takes the larger of (one-run ε–δ, f-DP): the stated confidence is split between them."""
CONFIDENCE_COVERS = ("both bounds together: the larger ε_lb of the one-run and the f-DP bound, at the best number "
                     "of guesses, holds at the stated confidence (Bonferroni: each bound at (1 − confidence)/2, "
                     "split again over the guess grid)")
FDP_ASSUMPTION = ("the f-DP bound (Mahloujifar et al.) assumes a Gaussian trade-off curve: it rejects the μ-GDP curve "
                  "that is exactly (ε, δ)-DP, so its ε_lb bounds ε from below only for a mechanism whose trade-off "
                  "curve is Gaussian (DP-SGD's is close to it, not exactly); the one-run bound (Steinke et al.) "
                  "assumes only (ε, δ)-DP")


def p_value_one_run(*, m: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """P[at least ``correct`` of ``guesses`` right] allowed by (ε, δ)-DP (Steinke et al., Thm. 5.2)."""
    p = special.expit(epsilon)
    beta = binom.sf(correct - 1, guesses, p)
    if delta == 0 or correct == 0:
        return float(beta)
    i = np.arange(1, correct + 1)
    alpha = np.max((binom.sf(correct - i - 1, guesses, p) - beta) / i)
    return float(min(1.0, beta + alpha * delta * 2 * m))


def gaussian_mu(*, epsilon: float, delta: float) -> float:
    """μ of the Gaussian mechanism that is exactly (ε, δ)-DP.

    Solves δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) for μ.
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta: must be in (0, 1) for a Gaussian trade-off, got {delta}")
    def gap(mu):
        return special.ndtr(-epsilon / mu + mu / 2) - math.exp(epsilon) * special.ndtr(-epsilon / mu - mu / 2) - delta

    lo, hi = 1e-6, 1.0
    while gap(hi) < 0:
        lo, hi = hi, 2 * hi
    for _ in range(200):  # bisection: gap is increasing in μ
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
        if hi - lo < 1e-12 * hi:
            break
    return hi


def _fdp_rejects(*, m: int, guesses: int, correct: int, epsilon: float, delta: float, significance: float) -> bool:
    """Whether ``correct`` of ``guesses`` is too many for the Gaussian trade-off of (ε, δ) (Mahloujifar et al.).

    Walks the worst-case distribution of correct guesses down from ``correct``: r and h are the mass the
    trade-off curve f(x) = Φ(Φ⁻¹(x) − μ) lets sit at or above the observed count; the claim is rejected
    when that mass cannot reach guesses/m.
    """
    mu = gaussian_mu(epsilon=epsilon, delta=delta)
    r = significance * correct / m
    h = significance * (guesses - correct) / m
    for i in range(correct - 1, -1, -1):
        h_new = max(h, float(special.ndtr(special.ndtri(min(r, 1.0)) - mu)))
        if h_new == h:
            break
        r = min(r + i / (guesses - i) * (h_new - h), 1.0)
        h = h_new
    return r + h - guesses / m > 0


def _largest_rejected(rejects, tol: float = 1e-6) -> float:
    """The largest ε ≥ 0 that ``rejects(ε)`` still rejects (0 when none is): rejection shrinks with ε."""
    if not rejects(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejects(hi):
        lo, hi = hi, 2 * hi
        if hi > 1e3:
            return math.inf
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rejects(mid) else (lo, mid)
    return lo


def epsilon_one_run(*, m: int, guesses: int, correct: int, delta: float, significance: float) -> float:
    """Steinke et al.'s ε_lb for ``correct`` of ``guesses`` right among ``m`` canaries."""
    if guesses == 0:
        return 0.0
    if p_value_one_run(m=m, guesses=guesses, correct=correct, epsilon=0.0, delta=0.0) > significance:
        return 0.0  # not even ε = 0 without δ is rejected
    return _largest_rejected(lambda e: p_value_one_run(m=m, guesses=guesses, correct=correct, epsilon=e,
                                                       delta=delta) <= significance)


def epsilon_one_run_fdp(*, m: int, guesses: int, correct: int, delta: float, significance: float) -> float:
    """Mahloujifar et al.'s ε_lb (Gaussian trade-off) for the same counts; at least as tight in practice."""
    if guesses == 0 or correct == 0:
        return 0.0
    return _largest_rejected(lambda e: _fdp_rejects(m=m, guesses=guesses, correct=correct, epsilon=e,
                                                    delta=delta, significance=significance))


def guess_counts(scores: np.ndarray, included: np.ndarray, k: int) -> tuple[int, int]:
    """(guesses, correct) when the top k scores are guessed "in" and the bottom k "out"."""
    order = np.argsort(scores, kind="stable")
    top, bottom = order[len(order) - k:], order[:k]
    return 2 * k, int(included[top].sum() + (~included[bottom]).sum())


def grid(m: int) -> list[int]:
    """The k values tried (guesses per side), largest first."""
    return sorted({max(1, int(f * m / 2)) for f in GUESS_FRACTIONS}, reverse=True)


def significance(m: int, confidence: float) -> float:
    """The significance of each test an audit of ``m`` canaries makes: 1 − ``confidence`` split (Bonferroni)
    over both bounds and every k of the guess grid, so that the larger bound at the best k holds at
    ``confidence``."""
    return (1 - confidence) / (BOUNDS * len(grid(m)))


def family(m: int, confidence: float) -> dict:
    """What a report's confidence covers, as fields: the family of tests, each bound's and each test's
    significance, and the f-DP bound's assumption."""
    return {"confidence_covers": CONFIDENCE_COVERS, "bound_significance": round((1 - confidence) / BOUNDS, 12),
            "test_significance": round(significance(m, confidence), 12), "guess_grid": len(grid(m)),
            "fdp_assumption": FDP_ASSUMPTION}


def best_bounds(scores: np.ndarray, included: np.ndarray, *, delta: float, confidence: float) -> dict:
    """ε_lb (both bounds) at the best k of the grid, the k used; the larger of the two holds at ``confidence``
    (each test at `significance`: Bonferroni over both bounds and the grid)."""
    m, ks = len(scores), grid(len(scores))
    significance_ = significance(m, confidence)
    best = {"epsilon_lb": 0.0, "epsilon_lb_fdp": 0.0, "guesses": 0, "correct": 0}
    for k in ks:
        r, v = guess_counts(scores, included, k)
        e = epsilon_one_run(m=m, guesses=r, correct=v, delta=delta, significance=significance_)
        f = epsilon_one_run_fdp(m=m, guesses=r, correct=v, delta=delta, significance=significance_)
        if max(e, f) > max(best["epsilon_lb"], best["epsilon_lb_fdp"]):
            best = {"epsilon_lb": e, "epsilon_lb_fdp": f, "guesses": r, "correct": v}
    return best


def ceiling(*, m: int, delta: float, confidence: float) -> float:
    """The largest ε_lb that m canaries can show at this confidence: every canary guessed, all right."""
    sig = significance(m, confidence)
    return max(epsilon_one_run(m=m, guesses=m, correct=m, delta=delta, significance=sig),
               epsilon_one_run_fdp(m=m, guesses=m, correct=m, delta=delta, significance=sig))


def roc(scores: np.ndarray, included: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of "in if score ≥ t" over every threshold t, from (0, 0) to (1, 1)."""
    order = np.argsort(-scores, kind="stable")
    hits = included[order]
    tpr = np.concatenate([[0.0], np.cumsum(hits) / max(1, hits.sum())])
    fpr = np.concatenate([[0.0], np.cumsum(~hits) / max(1, (~hits).sum())])
    return fpr, tpr


def auc(scores: np.ndarray, included: np.ndarray) -> float:
    """Area under the ROC curve: P[an in-canary outscores an out-canary] (ties count ½)."""
    fpr, tpr = roc(scores, included)
    return float(np.trapezoid(tpr, fpr))


def tpr_at_fpr(scores: np.ndarray, included: np.ndarray, fpr_max: float) -> float:
    """The largest TPR of a threshold whose FPR is at most ``fpr_max``."""
    fpr, tpr = roc(scores, included)
    return float(tpr[fpr <= fpr_max].max())


def ideal_scores(included: np.ndarray, *, steps: int, sample_rate: float, noise_multiplier: float,
                 seed: int) -> np.ndarray:
    """Scores an attacker with the exact mechanism's distribution would get (the limit of any attack).

    Every step releases, along each canary's direction, N(1, σ²) when it sampled an included canary and
    N(0, σ²) otherwise (units of C); the score is the exact log-likelihood ratio of the T releases.
    """
    rng = np.random.default_rng([seed, 2])
    m, q, s2 = len(included), sample_rate, noise_multiplier ** 2
    scores = np.zeros(m)
    for _ in range(steps):  # (m,) per step: memory stays O(m)
        x = rng.normal(0.0, noise_multiplier, m) + (included & (rng.random(m) < q))
        scores += np.logaddexp(math.log1p(-q), math.log(q) + (x - 0.5) / s2) if s2 > 0 else x
    return scores


IDEAL_DRAWS = 20
"""Independent runs of the exact mechanism the ideal attack is scored on: its ε_lb varies from run to run."""


def ideal_spread(included: np.ndarray, *, steps: int, sample_rate: float, noise_multiplier: float, seed: int,
                 delta: float, confidence: float, draws: int = IDEAL_DRAWS) -> dict:
    """The ideal attack's best ε_lb over ``draws`` independent runs of the exact mechanism: median, 5 % and
    95 % quantiles.

    One run's ε_lb is a random variable, for the ideal attack as for the measured one: at M = 1000 canaries,
    σ = 3, q = 0.06 and T = 100 its draws span 0 to 0.3 around a mean of 0.12. The likelihood-ratio score is the
    most powerful in distribution, so it is the most any attack shows *on average*; one measured run may show
    more by chance. A measured ε_lb is judged against this spread, never against a single draw.
    """
    best = []
    for k in range(draws):  # (m,) scores per draw: ≈ 0.05 s each at m = 1000, T = 100
        scores = ideal_scores(included, steps=steps, sample_rate=sample_rate, noise_multiplier=noise_multiplier,
                              seed=seed * 1000 + k)
        b = best_bounds(scores, included, delta=delta, confidence=confidence)
        best.append(max(b["epsilon_lb"], b["epsilon_lb_fdp"]))
    low, median, high = np.quantile(best, [0.05, 0.5, 0.95])
    return {"draws": draws, "median": float(median), "low": float(low), "high": float(high)}

