"""Pure privacy math over Opacus's accountants and Google's PLD accountant: ε of a schedule, σ for a budget.

A schedule is a list of `Phase`s (name, steps, σ, q, C), exactly what a run
reports; composing them through Opacus's accountant history (or, for ``pld``,
dp_accounting's events) gives the run's ε.
Nothing here holds state; `tracker.PrivacyTracker` is the thin stateful part.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import asdict, dataclass, replace

import numpy as np

from dpviz.privacy.opacus_accountants import create_accountant, rdp_analysis

_opacus_rdp = rdp_analysis()

MAX_SIGMA = 1e4
MAX_CURVE_POINTS = 5000  # RDP's curve has a point per step up to here (bounded memory beyond)

# The accountant whose ε bounds a run that names each one. PRV's upper bound and RDP are valid upper
# bounds; GDP is a central-limit approximation, not a bound: σ calibrated by it overspent the budget by
# 2–9 % against an independent PLD accountant (Google's dp-accounting). A run that names GDP is calibrated and
# reported by PRV's bound, and GDP's figure is shown beside it, labelled approximate. PLD's pessimistic
# estimate is a valid upper bound too (`PLD_DISCRETISATION`).
BOUND_BY = {"prv": "prv", "rdp": "rdp", "gdp": "prv", "pld": "pld"}

# The PLD accountant's privacy-loss grid (dp_accounting's ``value_discretization_interval``, in nats): this
# for a schedule whose RDP ε is below 2, doubled each time RDP's ε doubles (`pld_grid`).
#
# Why ε is an upper bound at any grid: dp_accounting builds each step's privacy loss distribution by its
# pessimistic estimate (connect-the-dots, Doroshenko et al. 2022), a distribution on the grid that
# dominates the true one, and puts every mass it truncates (losses beyond the range it keeps, of
# probability e^-50 or less; each composition's tails beyond 1e-15) at infinite loss, i.e. into δ;
# composing dominating distributions dominates the composition, so its ε at δ bounds the true ε. The grid
# only sets how loose, and what it costs: dp_accounting's work grows with the composed losses' range over
# the grid, i.e. with ε / grid.
#
# Measured on a 2-core CPU: against a 3e-5 grid, 1e-4 adds at most 0.05 % to ε (50 to 100,000 steps, q
# from 0.001 to 1; the most at q = 0.001 over 100,000 steps, where each step's loss is smallest; a 1e-3
# grid added 5 % there), ten times less than `calibrate_sigma`'s rel_tol, so a σ calibrated by PLD is the
# accountant's answer, not the grid's. The doubled grids add at most 0.035 % more than 1e-4 would (ε from
# 8 to 100) and keep one ε at 20–260 ms and one calibration under ≈ 1 s (2 s the slowest seen) whatever ε
# is, where a fixed 1e-4 grid took 0.4 s an ε at ε ≈ 8, 4.6 s at ε ≈ 100, and 37 s and 1.3 GB to
# calibrate for ε = 100. One calibration, in a fresh process, takes 0.23–0.30 s at the default schedule
# (120 steps, q = 256/1437, ε = 1, δ = 1e-5) and 0.17–0.18 s at 2,000 steps (PRV: 0.63–0.67 s and
# 0.68–0.79 s), plus ≈ 0.9 s once per process to import dp_accounting. 1e-4 is dp_accounting's default.
PLD_DISCRETISATION = 1e-4

# Opacus's RDP of one subsampled-Gaussian step at one order is a pure function of (q, σ, α) and the
# slow part of every PRV and RDP evaluation (PRV sizes its domain with RDP): an ε curve evaluates the
# same (q, σ) at ~13 step counts and recomputed it each time (4.5 s of a 9 s CLI run). Memoised, the
# values are the same floats, computed once per (q, σ, α).
if not hasattr(_opacus_rdp._compute_rdp, "cache_info"):
    _opacus_rdp._compute_rdp = functools.lru_cache(maxsize=65536)(_opacus_rdp._compute_rdp)


@dataclass(frozen=True, kw_only=True)
class Phase:
    """One stage of DP-SGD with a fixed noise multiplier and sampling rate (fields by keyword only).

    Attributes:
        name: lp, fft, partial, …
        steps: number of noisy steps in the phase.
        noise_multiplier: σ; the Gaussian noise std is σ·C.
        sample_rate: Poisson sampling probability q = B / n.
        clip_norm: per-sample clipping norm C (does not enter ε).
    """

    name: str
    steps: int
    noise_multiplier: float
    sample_rate: float
    clip_norm: float

    def to_dict(self) -> dict:
        return asdict(self)


def epsilon(*, phases: list[Phase], delta: float, accountant: str = "prv") -> float:
    """ε spent by the composition of ``phases`` at the given δ.

    PRV returns Opacus's upper bound on ε (not the estimate), so the value is a
    guarantee; PLD returns dp_accounting's pessimistic estimate on the grid
    `pld_grid`, a guarantee too. A schedule without noise (σ = 0) has
    ε = ∞; no steps, ε = 0.
    Opacus's GDP accountant reads only the last history entry, so for GDP the
    phases (which share σ and q) are merged into one entry first; phases with
    different σ or q cannot be composed by GDP and raise ValueError.
    """
    history = [(p.noise_multiplier, p.sample_rate, p.steps) for p in phases if p.steps > 0]
    if not history:
        return 0.0
    if any(s <= 0 for s, _, _ in history):
        return math.inf
    if accountant == "gdp" and len({(s, q) for s, q, _ in history}) > 1:
        raise ValueError("accountant: gdp composes only phases with one σ and q; use prv, rdp or pld")
    history = _merge(history)
    if accountant == "pld":
        return _pld_epsilon(history, delta, grid=pld_grid(phases=phases, delta=delta))
    acc = create_accountant(mechanism=accountant)
    acc.history = history
    # PRV at q = 1 takes log(0) on purpose; RDP's "optimal order is the smallest alpha" is advice to
    # Opacus's users, not to dpviz's (its ε is still a valid bound).
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        try:
            return float(acc.get_epsilon(delta=delta))
        except ValueError:
            if accountant != "gdp":
                raise
            return math.inf  # GDP's root finder brackets ε in [0, 500]: beyond it, more than any budget


def pld_grid(*, phases: list[Phase], delta: float) -> float:
    """The PLD accountant's grid for ``phases`` (every σ > 0): `PLD_DISCRETISATION` · 2^k where 2^k ≤ RDP's
    ε of the same schedule < 2^(k+1), k ≥ 0 (RDP's ε is a looser bound, from Opacus's orders, in ≈ 10 ms).
    A function of the schedule alone, so a calibration and the run's report use the same grid."""
    scale = min(epsilon(phases=phases, delta=delta, accountant="rdp"), 2.0 ** 40)  # 2^40: RDP's ε may be ∞
    k = math.floor(math.log2(scale)) if scale >= 1 else 0
    return PLD_DISCRETISATION * 2 ** k


def _pld_epsilon(history: list[tuple], delta: float, *, grid: float) -> float:
    """ε of (σ, q, T) entries by dp_accounting's PLD accountant on a privacy-loss grid of ``grid``: each
    entry a Poisson-sampled Gaussian composed T times, the entries composed (add-or-remove-one neighbours,
    as Opacus's accountants)."""
    try:  # imported only here: ≈ 0.9 s (scipy.signal and the rest of dp_accounting) no other accountant needs
        from dp_accounting import dp_event
        from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
    except ImportError as e:
        from dpviz.errors import missing_package

        raise missing_package("accountant", "accountant pld", "dp_accounting") from e
    event = dp_event.ComposedDpEvent([
        dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), t)
        for s, q, t in history])
    acc = PLDAccountant(value_discretization_interval=grid)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def rdp_floor(delta: float) -> float:
    """The smallest ε RDP can certify at ``delta`` with Opacus's orders (α ≤ 63), whatever σ: the
    conversion's own term, as every order's Rényi divergence goes to 0 when σ grows."""
    orders = create_accountant(mechanism="rdp").DEFAULT_ALPHAS
    eps, _ = _opacus_rdp.get_privacy_spent(orders=orders, rdp=np.zeros(len(orders)), delta=delta)
    return float(eps)


def _merge(history: list[tuple]) -> list[tuple]:
    """Join consecutive entries with the same (σ, q): the same mechanism composed T₁ + T₂ times.

    Exact for every accountant, required for GDP (which reads one entry), and
    halves PRV's cost for a two-phase run.
    """
    out: list[tuple] = []
    for s, q, t in history:
        if out and out[-1][:2] == (s, q):
            out[-1] = (s, q, out[-1][2] + t)
        else:
            out.append((s, q, t))
    return out


def with_sigma(phases: list[Phase], sigma: float) -> list[Phase]:
    """``phases`` with every σ set to ``sigma``."""
    return [replace(p, noise_multiplier=sigma) for p in phases]


def calibrate_sigma(*, target_epsilon: float, delta: float, phases: list[Phase],
                    accountant: str = "prv", rel_tol: float = 0.005) -> float:
    """Smallest σ (within ``rel_tol`` of ε) such that the whole schedule spends ≤ target ε.

    One σ for every phase: under composition each phase then spends privacy in
    proportion to its steps (the simplest exact split of one budget). A bracket is
    found by doubling, then narrowed by the Illinois variant of regula falsi on
    log ε(σ) (a handful of accountant calls instead of ~20 for bisection). The
    returned σ is always the bracket's upper end, whose ε is ≤ target, so the
    budget is never exceeded.
    """
    if not math.isfinite(target_epsilon):
        return 0.0
    if accountant == "rdp" and target_epsilon <= (floor := rdp_floor(delta)) * (1 + rel_tol):
        raise ValueError(f"epsilon: RDP's orders (α ≤ 63) cannot certify ε = {target_epsilon:g} at δ = {delta:g} "
                         f"whatever σ (its floor is {floor:.3g}); use accountant prv, or a larger ε")
    eps_of = lambda s: epsilon(phases=with_sigma(phases, s), delta=delta, accountant=accountant)  # noqa: E731
    f = lambda e: math.log(e) - math.log(target_epsilon) if e > 0 else -math.inf  # noqa: E731
    lo, hi = 0.0, _first_guess(target_epsilon, delta, phases, accountant)
    f_hi = f(eps_of(hi))
    if f_hi <= 0 and hi > 0.2:  # also evaluate just below the guess: usually a tight bracket at once
        f_lo = f(eps_of(0.9 * hi))
        if f_lo > 0:
            lo = 0.9 * hi
        else:
            hi, f_hi = 0.9 * hi, f_lo
    while f_hi > 0:
        lo, f_lo = hi, f_hi
        hi *= 2
        if hi > MAX_SIGMA:
            raise ValueError(f"epsilon: {target_epsilon} is too small for this schedule (σ > {MAX_SIGMA:g})")
        f_hi = f(eps_of(hi))
    if lo == 0.0:
        f_lo = math.inf
    side = 0
    for _ in range(60):
        if -f_hi <= rel_tol or hi - lo <= 1e-6 * hi:
            break
        if math.isfinite(f_lo) and math.isfinite(f_hi):
            mid = hi - f_hi * (hi - lo) / (f_hi - f_lo)  # secant through the bracket
            mid = min(max(mid, lo + 0.01 * (hi - lo)), hi - 0.01 * (hi - lo))
        else:
            mid = (lo + hi) / 2
        f_mid = f(eps_of(mid))
        if f_mid <= 0:
            hi, f_hi = mid, f_mid
            if side == -1:
                f_lo /= 2  # Illinois: halve the stale end so the bracket keeps shrinking
            side = -1
        else:
            lo, f_lo = mid, f_mid
            if side == 1:
                f_hi /= 2
            side = 1
    return hi


def _first_guess(target_epsilon, delta, phases, accountant) -> float:
    """A σ just above the answer: GDP's (a closed form, so nearly free) plus 5 %. For PLD, RDP's σ: a
    looser bound, so a σ a few % above PLD's, for phases of any σ and q (GDP composes one), in ≈ 0.05 s;
    PLD's evaluations cost the most at small σ, which doubling up from σ = 1 would visit."""
    if accountant == "gdp":
        return 1.0
    if accountant == "pld":
        try:
            return calibrate_sigma(target_epsilon=target_epsilon, delta=delta, phases=phases, accountant="rdp",
                                   rel_tol=0.01)
        except ValueError:  # below RDP's floor: GDP's guess, as the other accountants
            pass
    try:
        return 1.05 * calibrate_sigma(target_epsilon=target_epsilon, delta=delta, phases=phases,
                                      accountant="gdp", rel_tol=0.001)
    except ValueError:  # GDP cannot compose phases with different σ or q
        return 1.0


def truncate(phases: list[Phase], steps: int) -> list[Phase]:
    """The schedule's first ``steps`` steps, phase by phase."""
    out, left = [], steps
    for p in phases:
        k = min(p.steps, left)
        if k > 0:
            out.append(replace(p, steps=k))
        left -= k
    return out


def epsilon_curve(*, phases: list[Phase], delta: float, accountant: str, points: int = 12) -> dict[int, float]:
    """ε after t steps at ~``points`` values of t (always including phase ends).

    Between grid points a run reports the ε of the next grid point, an upper
    bound since ε grows with t; RDP is cheap enough to evaluate at every step of a
    schedule of up to `MAX_CURVE_POINTS` steps.
    """
    total = sum(p.steps for p in phases)
    if total == 0:
        return {0: 0.0}
    if accountant == "rdp" and total <= MAX_CURVE_POINTS:
        ts = set(range(1, total + 1))
    else:
        ts = {max(1, round(total * i / points)) for i in range(1, points + 1)}
    ends, acc = set(), 0
    for p in phases:
        acc += p.steps
        ends.add(acc)
    ts = sorted(ts | ends)
    return {t: epsilon(phases=truncate(phases, t), delta=delta, accountant=accountant) for t in ts}


def spent_at(curve: dict[int, float], step: int) -> float:
    """Upper bound on ε after ``step`` steps from a curve of `epsilon_curve`."""
    if step <= 0:
        return 0.0
    for t in sorted(curve):
        if t >= step:
            return curve[t]
    return curve[max(curve)]


def steps_for(*, epochs: int, dataset_size: int, batch_size: int) -> int:
    """T = epochs · round(n/B) steps, as a run is scheduled (`dpviz.training.calibration.schedule`)."""
    return epochs * max(1, round(dataset_size / batch_size))


def check_sigma_table_args(*, epsilon: float, delta: float, epochs: int, dataset_size: int, batch_sizes,
                           accountants) -> None:
    """The arguments of `sigma_by_batch_size` are ones it can tabulate; a `ConfigError` naming the first
    that is not: ε finite and > 0, epochs and n >= 1, each B in [1, n], δ in (0, 1/n], known accountants."""
    from dpviz.errors import ConfigError

    ACCOUNTANTS = tuple(BOUND_BY)  # the accountants this module composes (config's choices are these)
    given = dict(epsilon=epsilon, epochs=epochs, dataset_size=dataset_size, batch_sizes=batch_sizes,
                 delta=delta, accountants=accountants)
    checks = (("epsilon", epsilon > 0 and math.isfinite(epsilon), "a finite number > 0"),
              ("epochs", epochs >= 1, "an integer >= 1"),
              ("dataset_size", dataset_size >= 1, "an integer >= 1"),
              ("batch_sizes", all(1 <= b <= dataset_size for b in batch_sizes),
               f"integers in [1, dataset_size = {dataset_size}]"),
              ("delta", 0 < delta <= 1 / max(dataset_size, 1), "a number in (0, 1/dataset_size]"),
              ("accountants", set(accountants) <= set(ACCOUNTANTS), f"some of {', '.join(ACCOUNTANTS)}"))
    for name, ok, allowed in checks:
        if not ok:
            raise ConfigError(name, allowed, given[name])


def sigma_by_batch_size(*, epsilon: float, delta: float, epochs: int, dataset_size: int, batch_sizes,
                        accountants=("rdp", "gdp", "prv", "pld")) -> list[dict]:
    """For each accountant and B: the σ a run of ``epochs`` epochs needs for (ε, δ) (Bu et al. 2024's comparison).

    Returns rows {accountant, batch_size, noise_multiplier, sample_rate, steps, sigma2_over_b, error}; σ²/B
    is the noise variance per example that the decelerator scales with. An accountant that cannot reach
    ε (RDP below its floor) gives rows with σ None and the reason in ``error``. Raises `ConfigError` (a
    ValueError) naming the argument: one `check_sigma_table_args` refuses, or ``epsilon`` if no
    accountant can reach it.
    """
    from dpviz.errors import ConfigError

    check_sigma_table_args(epsilon=epsilon, delta=delta, epochs=epochs, dataset_size=dataset_size,
                           batch_sizes=batch_sizes, accountants=accountants)
    rows = []
    for acc in accountants:
        for B in batch_sizes:
            q, T = B / dataset_size, steps_for(epochs=epochs, dataset_size=dataset_size, batch_size=B)
            dp = Phase(name="dp", steps=T, noise_multiplier=0.0, sample_rate=q, clip_norm=1.0)
            try:
                s, why = calibrate_sigma(target_epsilon=epsilon, delta=delta, accountant=acc, phases=[dp]), None
            except ValueError as e:  # this accountant cannot reach ε here; the others' rows still stand
                s, why = None, str(e).split(": ", 1)[-1]
            rows.append({"accountant": acc, "batch_size": int(B), "noise_multiplier": s, "sample_rate": q,
                         "steps": T, "sigma2_over_b": None if s is None else s * s / B, "error": why})
    if all(r["error"] for r in rows):
        raise ConfigError("epsilon", rows[0]["error"])
    return rows
