"""Pure privacy math over the registered accountants: ε of a schedule, σ for a budget.

A schedule is a list of `Phase`s (name, steps, σ, q, C), exactly what a run
reports; composing them through an accountant of `dpviz.privacy.accountants` (Opacus's PRV, RDP and
GDP through their history, Google's PLD through dp_accounting's events) gives the run's ε.
Nothing here holds state; `tracker.PrivacyTracker` is the thin stateful part.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace


from dpviz.privacy import accountants as registry
from dpviz.privacy import bandmf
from dpviz.privacy.accountants import PLD_DISCRETISATION, opacus_epsilon, pld_epsilon, rdp_floor  # noqa: F401

MAX_SIGMA = 1e4
MAX_CURVE_POINTS = 5000  # RDP's curve has a point per step up to here (bounded memory beyond)

# Which accountant's ε bounds a run that names each one is `dpviz.privacy.accountants` (``bound``): PRV's
# upper bound, RDP and PLD's pessimistic estimate (`PLD_DISCRETISATION`) are valid upper bounds; GDP is a
# central-limit approximation, not a bound: σ calibrated by it overspent the budget by 2–9 % against an
# independent PLD accountant (Google's dp-accounting). A run that names GDP is calibrated and reported by
# PRV's bound, and GDP's figure is shown beside it, labelled approximate.


def bound_by(accountant: str) -> str:
    """The name of the accountant whose ε bounds (and whose σ calibrates) a run that names ``accountant``."""
    return registry.get(accountant).bound


@dataclass(frozen=True, kw_only=True)
class Phase:
    """One stage of DP-SGD with a fixed noise multiplier and sampling rate (fields by keyword only).

    Attributes:
        name: lp, fft, partial, …
        steps: number of noisy steps in the phase.
        noise_multiplier: σ; the Gaussian noise std is σ·C.
        sample_rate: Poisson sampling probability q = B / n.
        clip_norm: per-sample clipping norm C (does not enter ε).
        bands: 1 for DP-SGD's independent noise; b > 1 for BandMF's banded correlated noise with cyclic Poisson
            sampling over b parts (`dpviz.privacy.bandmf`), accounted as its equivalent DP-SGD schedule.
        count_noise: σ_b of the noisy count of clipped examples each step also releases (`RunConfig.clip_fraction_noise`;
            0: none). The pair is one Gaussian mechanism: a record moves the clipped sum by at most C and the count
            by at most 1, so with noise σ_g·C and σ_b its multiplier is 1/√(σ_g⁻² + σ_b⁻²). ``noise_multiplier``
            is that σ (what the accountant composes); the gradient's own is `grad_noise_multiplier` ≥ σ.
    """

    name: str
    steps: int
    noise_multiplier: float
    sample_rate: float
    clip_norm: float
    bands: int = 1
    count_noise: float = 0.0

    @property
    def grad_noise_multiplier(self) -> float:
        """σ_g of the gradient's noise: σ itself, or 1/√(σ⁻² − σ_b⁻²) beside a noisy count."""
        return grad_sigma(sigma=self.noise_multiplier, count_noise=self.count_noise)

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["bands"] == 1:  # DP-SGD's phases read as they always have
            del d["bands"]
        if not d["count_noise"]:
            del d["count_noise"]
        else:
            d["grad_noise_multiplier"] = self.grad_noise_multiplier
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Phase":
        return cls(**{k: v for k, v in d.items() if k != "grad_noise_multiplier"})

    def accounted(self) -> tuple[float, float, int]:
        """(σ, q, T) of the DP-SGD schedule as private as this phase (itself for DP-SGD)."""
        return bandmf.dpsgd_equivalent(sigma=self.noise_multiplier, sample_rate=self.sample_rate, steps=self.steps,
                                       bands=self.bands)


def grad_sigma(*, sigma: float, count_noise: float) -> float:
    """σ_g such that gradient noise σ_g·C beside a count's noise σ_b is one Gaussian mechanism of multiplier σ:
    σ⁻² = σ_g⁻² + σ_b⁻² (σ_b must exceed σ)."""
    if not count_noise or not sigma:
        return sigma
    if count_noise <= sigma:
        raise ValueError(f"clip_fraction_noise: more than σ = {sigma:.4g} (the count's noise must leave the gradient "
                         f"part of the budget); got {count_noise:g}")
    return 1.0 / math.sqrt(sigma ** -2 - count_noise ** -2)


def epsilon(*, phases: list[Phase], delta: float, accountant: str | registry.Accountant = "prv") -> float:
    """ε spent by the composition of ``phases`` at the given δ, by ``accountant`` (a name or an `Accountant`).

    PRV returns Opacus's upper bound on ε (not the estimate), so the value is a
    guarantee; PLD returns dp_accounting's pessimistic estimate on the grid
    `pld_grid`, a guarantee too. A schedule without noise (σ = 0) has
    ε = ∞; no steps, ε = 0. Consecutive phases of the same (σ, q) are merged
    first; an accountant of one mechanism (GDP, which reads only the last history
    entry) refuses phases of different σ or q with ValueError. The accountant's ε is checked
    (`accountants.ask`): anything but a number ≥ 0, or an exception, is `accountants.Refused`.
    """
    acc = registry.get(accountant)
    history = _history(phases)
    if not history:
        return 0.0
    if any(s <= 0 for s, _, _ in history):
        return math.inf
    if acc.one_mechanism and len({(s, q) for s, q, _ in history}) > 1:
        raise ValueError(f"accountant: {acc.name} composes only phases with one σ and q; use one of "
                         f"{', '.join(a for a in registry.names() if not registry.get(a).one_mechanism)}")
    return registry.ask(acc, history, delta)


def _history(phases: list[Phase]) -> list[tuple]:
    """The merged (σ, q, T) entries an accountant composes for ``phases``."""
    return _merge([p.accounted() for p in phases if p.steps > 0])


def pld_grid(*, phases: list[Phase], delta: float) -> float:
    """The PLD accountant's grid for ``phases`` (every σ > 0): `PLD_DISCRETISATION` · 2^k where 2^k ≤ RDP's
    ε of the same schedule < 2^(k+1), k ≥ 0 (RDP's ε is a looser bound, from Opacus's orders, in ≈ 10 ms).
    A function of the schedule alone, so a calibration and the run's report use the same grid."""
    return registry.pld_grid_of(epsilon(phases=phases, delta=delta, accountant="rdp"))


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
                    accountant: str | registry.Accountant = "prv", rel_tol: float = 0.005) -> float:
    """Smallest σ (within ``rel_tol`` of ε) such that the whole schedule spends ≤ target ε.

    One σ for every phase: under composition each phase then spends privacy in
    proportion to its steps (the simplest exact split of one budget). A bracket is
    found by doubling, then narrowed by the Illinois variant of regula falsi on
    log ε(σ) (a handful of accountant calls instead of ~20 for bisection). The
    returned σ is always the bracket's upper end, whose ε is ≤ target, so the
    budget is never exceeded. The ε the search reads must fall as σ grows, and the
    returned σ's is checked as an answer (`accountants.check_answer`): an accountant
    that fails either is `accountants.Refused`.
    """
    if not math.isfinite(target_epsilon):
        return 0.0
    acc = registry.get(accountant)
    sigma, spent = _search(target_epsilon, delta, phases, acc, rel_tol)
    registry.check_answer(acc, _history(with_sigma(phases, sigma)), delta, spent)
    return sigma


def check_sigma(*, sigma: float, target_epsilon: float, delta: float, phases: list[Phase],
                accountant: str | registry.Accountant = "prv") -> bool:
    """Whether ``sigma`` spends at most ``target_epsilon`` over ``phases`` by ``accountant``, its ε checked as an
    answer (`accountants.check_answer`, which refuses a broken one): a σ found before, taken again."""
    acc = registry.get(accountant)
    spent = epsilon(phases=with_sigma(phases, sigma), delta=delta, accountant=acc)
    if spent > target_epsilon:
        return False
    registry.check_answer(acc, _history(with_sigma(phases, sigma)), delta, spent)
    return True


MONOTONE_TOLERANCE = 1e-6
"""How much an ε may rise as σ grows (relative): none, bar rounding. PRV, RDP, GDP and PLD fell at every
step of 150 σ from 0.7 to 1.5 times the calibrated one, at seven schedules."""


class _Readings:
    """ε at each σ a search asks for; an accountant whose ε rises with σ is `accountants.Refused` (more noise
    never spends more: a search over such an ε finds a σ by accident)."""

    def __init__(self, acc: registry.Accountant, phases: list[Phase], delta: float):
        self.acc, self.phases, self.delta, self.seen = acc, phases, delta, {}

    def __call__(self, sigma: float) -> float:
        eps = epsilon(phases=with_sigma(self.phases, sigma), delta=self.delta, accountant=self.acc)
        for s, e in self.seen.items():
            (s_lo, e_lo), (s_hi, e_hi) = sorted([(s, e), (sigma, eps)])
            if e_hi > e_lo * (1 + MONOTONE_TOLERANCE):
                raise registry.refuse(self.acc, "non-increasing as σ grows",
                                      f"it returned {e_lo:.4g} at σ = {s_lo:.4g} and {e_hi:.4g}",
                                      _history(with_sigma(self.phases, s_hi)))
        self.seen[sigma] = eps
        return eps


def check_floor(*, target_epsilon: float, delta: float, acc: registry.Accountant, rel_tol: float = 1e-3) -> None:
    """ValueError where ``acc`` cannot certify ``target_epsilon`` at ``delta`` whatever σ (RDP's orders' floor)."""
    if acc.floor is not None and target_epsilon <= (floor := acc.floor(delta)) * (1 + rel_tol):
        raise ValueError(f"epsilon: {acc.label} cannot certify ε = {target_epsilon:g} at δ = {delta:g} whatever σ "
                         f"(its floor is {floor:.3g}); use accountant prv, or a larger ε")


def _search(target_epsilon, delta, phases, acc: registry.Accountant, rel_tol) -> tuple[float, float]:
    """`calibrate_sigma`'s search: (σ, its ε), unchecked as an answer (a first guess uses it too)."""
    if not acc.calibrates:
        raise ValueError(f"accountant: {acc.name} does not calibrate σ; use {acc.bound}")
    check_floor(target_epsilon=target_epsilon, delta=delta, acc=acc, rel_tol=rel_tol)
    eps_of = _Readings(acc, phases, delta)
    f = lambda e: math.log(e) - math.log(target_epsilon) if e > 0 else -math.inf  # noqa: E731
    lo, hi = 0.0, _first_guess(target_epsilon, delta, phases, acc)
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
            if math.isinf(eps_of.seen[lo]):  # no finite ε even at σ = 10⁴: the accountant, not the budget
                raise registry.refuse(acc, f"finite at some σ ≤ {MAX_SIGMA:g}", "it returned inf",
                                      _history(with_sigma(phases, lo)))
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
    return hi, eps_of.seen[hi]


def _first_guess(target_epsilon, delta, phases, acc: registry.Accountant) -> float:
    """A σ just above the answer: that of ``acc.guess_by``, a looser bound (for PLD, RDP's σ: a few % above
    PLD's, for phases of any σ and q, in ≈ 0.05 s; PLD's evaluations cost the most at small σ, which
    doubling up from σ = 1 would visit), or else GDP's closed form plus 5 % (nearly free); σ = 1 where
    ``guess_by`` is None or neither applies."""
    if acc.guess_by is None:
        return 1.0
    if acc.guess_by != "gdp":
        try:
            return _search(target_epsilon, delta, phases, registry.get(acc.guess_by), 0.01)[0]
        except registry.Refused:
            raise
        except ValueError:  # below its floor: GDP's guess, as the other accountants
            pass
    try:
        return 1.05 * _search(target_epsilon, delta, phases, registry.get("gdp"), 0.001)[0]
    except registry.Refused:
        raise
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


def epsilon_curve(*, phases: list[Phase], delta: float, accountant: str | registry.Accountant,
                  points: int = 12) -> dict[int, float]:
    """ε after t steps at ~``points`` values of t (always including phase ends).

    Between grid points a run reports the ε of the next grid point, an upper
    bound since ε grows with t; a ``cheap`` accountant (RDP) is evaluated at every step of a
    schedule of up to `MAX_CURVE_POINTS` steps. Every point must be finite, and the last, the run's ε, is
    checked as an answer (`accountants.check_answer`).
    """
    total = sum(p.steps for p in phases)
    if total == 0:
        return {0: 0.0}
    if registry.get(accountant).cheap and total <= MAX_CURVE_POINTS:
        ts = set(range(1, total + 1))
    else:
        ts = {max(1, round(total * i / points)) for i in range(1, points + 1)}
    ends, acc = set(), 0
    for p in phases:
        acc += p.steps
        ends.add(acc)
    ts = sorted(ts | ends)
    curve = {t: epsilon(phases=truncate(phases, t), delta=delta, accountant=accountant) for t in ts}
    _check_curve(curve, phases=phases, delta=delta, accountant=registry.get(accountant))
    return curve


def _check_curve(curve: dict[int, float], *, phases: list[Phase], delta: float,
                 accountant: registry.Accountant) -> None:
    """Each point of a run's ε curve is reported as what the run had spent by then: finite, and the last, the
    run's ε, checked as an answer."""
    history = _history(phases)
    if any(s <= 0 for s, _, _ in history):
        return  # no noise: ∞ is the schedule's ε, not the accountant's
    for t, eps in curve.items():
        if not math.isfinite(eps):
            registry.check_answer(accountant, _history(truncate(phases, t)), delta, eps)
    registry.check_answer(accountant, history, delta, curve[max(curve)])


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

    ACCOUNTANTS = registry.names()  # the accountants this module composes (config's choices are these)
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
                        accountants=None) -> list[dict]:
    """For each accountant and B: the σ a run of ``epochs`` epochs needs for (ε, δ) (Bu et al. 2024's comparison).

    Returns rows {accountant, batch_size, noise_multiplier, sample_rate, steps, sigma2_over_b, error}; σ²/B
    is the noise variance per example that the decelerator scales with. An accountant that cannot reach
    ε (RDP below its floor) gives rows with σ None and the reason in ``error``. Raises `ConfigError` (a
    ValueError) naming the argument: one `check_sigma_table_args` refuses, or ``epsilon`` if no
    accountant can reach it.
    """
    from dpviz.errors import ConfigError

    accountants = tuple(accountants) if accountants is not None else registry.names()
    check_sigma_table_args(epsilon=epsilon, delta=delta, epochs=epochs, dataset_size=dataset_size,
                           batch_sizes=batch_sizes, accountants=accountants)
    rows = []
    for acc in accountants:
        for B in batch_sizes:
            q, T = B / dataset_size, steps_for(epochs=epochs, dataset_size=dataset_size, batch_size=B)
            dp = Phase(name="dp", steps=T, noise_multiplier=0.0, sample_rate=q, clip_norm=1.0)
            try:
                s, why = calibrate_sigma(target_epsilon=epsilon, delta=delta, accountant=acc, phases=[dp]), None
            except registry.Refused:
                raise
            except ValueError as e:  # this accountant cannot reach ε here; the others' rows still stand
                s, why = None, str(e).split(": ", 1)[-1]
            rows.append({"accountant": acc, "batch_size": int(B), "noise_multiplier": s, "sample_rate": q,
                         "steps": T, "sigma2_over_b": None if s is None else s * s / B, "error": why})
    if all(r["error"] for r in rows):
        raise ConfigError("epsilon", rows[0]["error"])
    return rows
