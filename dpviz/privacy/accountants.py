"""The accountants a run's privacy is composed with: one declaration each, in one registry.

An accountant is an `Accountant`: its name (what `RunConfig.accountant` holds), a label and a colour (the
form, the Accountants page, figures), the accountant whose ε bounds a run that names it (``bound_by``:
itself for a bound), the package it needs beyond dpviz's own (``package``), ``epsilon(history, delta)``
over a schedule's (σ, q, T) entries, and how σ is calibrated by it. Validation, the form, the Accountants
page, figures and the command line read `names` and `get`; `dpviz.privacy.accounting` composes a schedule
through ``epsilon`` and calibrates σ with any accountant that ``calibrates``. A new accountant is one
`register` call, as Opacus's ``register_accountant`` is, in a module dpviz imports (a plugin named in
``DPVIZ_PLUGINS``, `dpviz.plugins`): nothing else names it. It may not take a built-in's name (runs stored
under that name would answer for it), and what its ``epsilon`` returns is checked before it is used
(`ask`, `check_answer`): an accountant is someone else's code, and its ε is the run's promise.

This module imports nothing heavy: the built-ins' ``epsilon`` functions (here too) import Opacus's accountants
(or dp_accounting) when first called, so validating a config or drawing the form costs nothing.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import numbers
import sys
import warnings
from dataclasses import dataclass
from typing import Callable

from dpviz.errors import ConfigError, DpvizError

History = list[tuple[float, float, int]]  # (σ, q, T): a Poisson-sampled Gaussian composed T times, in order


@dataclass(frozen=True, kw_only=True)
class Accountant:
    """One accountant, declared once.

    Attributes:
        name: what `RunConfig.accountant` holds, e.g. ``prv``.
        label: how pages and figures name it.
        color: its colour in every figure (Okabe & Ito's palette for the built-ins).
        epsilon: ``epsilon(history, delta)``: ε of the composition of ``history`` (each σ > 0, consecutive
            entries of the same (σ, q) merged) at δ; an upper bound unless ``bound_by`` names another.
        bound_by: the accountant whose ε bounds, and whose σ calibrates, a run that names this one (None:
            itself). GDP is an approximation, so a GDP run is calibrated and reported by PRV.
        package: the import name of the package it needs beyond dpviz's dependencies (None: none).
        calibrates: whether σ can be calibrated by it (a bound that `accounting.calibrate_sigma` searches).
        one_mechanism: it composes only entries of one (σ, q) (GDP reads one history entry).
        guess_by: the accountant whose calibrated σ starts this one's search: a looser bound, or ``gdp`` for
            GDP's closed form plus 5 % (`accounting.calibrate_sigma`); None: σ = 1.
        floor: ``floor(delta)``: the smallest ε it can certify whatever σ (RDP's orders), or None.
        cheap: ε in milliseconds, so a run's ε curve has a point at every step (`accounting.epsilon_curve`).
    """

    name: str
    label: str
    color: str
    epsilon: Callable[[History, float], float]
    bound_by: str | None = None
    package: str | None = None
    calibrates: bool = True
    one_mechanism: bool = False
    guess_by: str | None = "gdp"
    floor: Callable[[float], float] | None = None
    cheap: bool = False

    @property
    def bound(self) -> str:
        """The name of the accountant whose ε bounds a run that names this one."""
        return self.bound_by or self.name

    def available(self) -> bool:
        """Its package is installed (or it needs none)."""
        return self.package is None or importlib.util.find_spec(self.package) is not None


REGISTRY: dict[str, Accountant] = {}
BUILT_INS: dict[str, Accountant] = {}  # dpviz's own, filled below: no other may take their names


def register(accountant: Accountant) -> Accountant:
    """Add ``accountant`` (replacing another registered under its name, never a built-in one: the runs
    stored under a built-in's name would answer for it); returns it, so a module can keep it."""
    if accountant.name in BUILT_INS:
        owner = sys._getframe(1).f_globals.get("__name__", "?")
        raise ConfigError("accountant", f"a name of its own: {owner} may not replace dpviz's built-in accountant",
                          accountant.name)
    REGISTRY[accountant.name] = accountant
    return accountant


def names() -> tuple[str, ...]:
    """Every registered accountant's name, in the order registered (the built-ins first)."""
    return tuple(REGISTRY)


def get(name: str | Accountant) -> Accountant:
    """The accountant ``name`` (an `Accountant` is returned as it is); ValueError naming the choices."""
    if isinstance(name, Accountant):
        return name
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"accountant: one of {', '.join(REGISTRY)}, got {name!r}") from None


def colors() -> dict[str, str]:
    """{name: colour} of every accountant, for figures."""
    return {a.name: a.color for a in REGISTRY.values()}


# --- the built-ins' ε: Opacus's PRV, RDP and GDP, and Google's PLD ---------------------------------------

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
@functools.cache
def _rdp():
    """``opacus.accountants.analysis.rdp``, its per-order RDP memoised (once per process)."""
    from dpviz.privacy.opacus_accountants import rdp_analysis

    rdp = rdp_analysis()
    if not hasattr(rdp._compute_rdp, "cache_info"):
        rdp._compute_rdp = functools.lru_cache(maxsize=65536)(rdp._compute_rdp)
    return rdp


def opacus_epsilon(history: History, delta: float, *, mechanism: str) -> float:
    """ε of merged (σ, q, T) entries by Opacus's accountant ``mechanism`` (prv, rdp or gdp)."""
    import numpy as np

    from dpviz.privacy.opacus_accountants import create_accountant

    _rdp()
    acc = create_accountant(mechanism=mechanism)
    acc.history = list(history)
    # PRV at q = 1 takes log(0) on purpose; RDP's "optimal order is the smallest alpha" is advice to
    # Opacus's users, not to dpviz's (its ε is still a valid bound).
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        try:
            return float(acc.get_epsilon(delta=delta))
        except ValueError:
            if mechanism != "gdp":
                raise
            return math.inf  # GDP's root finder brackets ε in [0, 500]: beyond it, more than any budget


def pld_grid_of(rdp_epsilon: float) -> float:
    """The PLD grid for a schedule whose RDP ε is ``rdp_epsilon``: `PLD_DISCRETISATION` · 2^k where 2^k ≤ RDP's
    ε < 2^(k+1), k ≥ 0."""
    scale = min(rdp_epsilon, 2.0 ** 40)  # 2^40: RDP's ε may be ∞
    k = math.floor(math.log2(scale)) if scale >= 1 else 0
    return PLD_DISCRETISATION * 2 ** k


def pld_epsilon(history: History, delta: float, *, grid: float | None = None) -> float:
    """ε of merged (σ, q, T) entries by dp_accounting's PLD accountant on a privacy-loss grid of ``grid`` (None:
    `pld_grid_of` the entries' RDP ε): each entry a Poisson-sampled Gaussian composed T times, the entries
    composed (add-or-remove-one neighbours, as Opacus's accountants)."""
    try:  # imported only here: ≈ 0.9 s (scipy.signal and the rest of dp_accounting) no other accountant needs
        from dp_accounting import dp_event
        from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
    except ImportError as e:
        from dpviz.errors import missing_package

        raise missing_package("accountant", "accountant pld", "dp_accounting") from e
    if grid is None:
        grid = pld_grid_of(opacus_epsilon(history, delta, mechanism="rdp"))
    event = dp_event.ComposedDpEvent([
        dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), t)
        for s, q, t in history])
    acc = PLDAccountant(value_discretization_interval=grid)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def rdp_floor(delta: float) -> float:
    """The smallest ε RDP can certify at ``delta`` with Opacus's orders (α ≤ 63), whatever σ: the
    conversion's own term, as every order's Rényi divergence goes to 0 when σ grows."""
    import numpy as np

    from dpviz.privacy.opacus_accountants import create_accountant

    orders = create_accountant(mechanism="rdp").DEFAULT_ALPHAS
    eps, _ = _rdp().get_privacy_spent(orders=orders, rdp=np.zeros(len(orders)), delta=delta)
    return float(eps)


def _opacus(mechanism: str) -> Callable[[History, float], float]:
    return functools.partial(opacus_epsilon, mechanism=mechanism)


# The built-ins, in the order the form and the tables list them. Colours: Okabe & Ito's blue, bluish green,
# vermillion and reddish purple (`dpviz.figures.style.OKABE_ITO`).
register(Accountant(name="prv", label="PRV (Opacus; upper bound)", color="#D55E00", epsilon=_opacus("prv")))
register(Accountant(name="rdp", label="RDP (Opacus; orders α ≤ 63)", color="#0072B2", epsilon=_opacus("rdp"), floor=rdp_floor,
                    cheap=True))
register(Accountant(name="gdp", label="GDP (Opacus; approximate, reported by PRV)", color="#009E73",
                    epsilon=_opacus("gdp"), bound_by="prv", one_mechanism=True, guess_by=None))
register(Accountant(name="pld", label="PLD (Google's dp-accounting; upper bound)", color="#CC79A7", epsilon=pld_epsilon,
                    package="dp_accounting", guess_by="rdp"))
BUILT_INS.update(REGISTRY)


# --- what an accountant's ε must be before it is used ---------------------------------------------------
#
# Calibration trusts ε to pick σ, and a run reports it as its promise, so an ε that is not a number, or one
# that says less than the schedule spends, would train with too little noise and store a false guarantee.
# Each ε is checked where it is cheap (`ask`: every call) and where it becomes an answer (`check_answer`:
# the ε of a calibrated σ, a run's reported ε; once per schedule, not per step of a σ search).

PLD_TOLERANCE = 0.01
"""How far below dp_accounting's PLD ε (`pld_epsilon`, on its own grid) an accountant's ε may be. PLD's
pessimistic estimate is an upper bound, within 0.25 % of the same estimate on a grid 3× finer at every
schedule measured (ε from 0.05 to 50, 20 to 100,000 steps; most at the smallest ε), so the true ε is no
further below it; 1 % leaves room beyond that, and PRV's and RDP's bounds lie above PLD's everywhere measured."""


class Refused(ConfigError):
    """An accountant's ε that would break the promise it makes: one line naming the accountant."""


def refuse(acc: Accountant, rule: str, what: str, history: History) -> Refused:
    """The refusal of ``acc``'s ε: the ``rule`` it breaks and ``what`` it did, at the schedule ``history``."""
    return Refused("accountant", f"{acc.name}: ε must be {rule}; {what} at {schedule_text(history)}")


def schedule_text(history: History) -> str:
    """``history`` in a few words: σ, q and the steps of each entry."""
    return "; ".join(f"σ = {s:.4g}, q = {q:.4g}, {t} steps" for s, q, t in history)


def ask(acc: Accountant, history: History, delta: float) -> float:
    """``acc``'s ε of ``history`` at ``delta``: a real number ≥ 0, +∞ included (no finite bound at this σ,
    the safe side: calibration raises σ); `Refused` for anything else, and for an exception."""
    try:
        value = acc.epsilon(history, delta)
    except DpvizError:
        raise  # already one line naming what is missing (PLD's package)
    except Exception as e:  # noqa: BLE001 - someone else's code: one line naming it, not a traceback
        raise refuse(acc, "returned, not raised", f"it raised {type(e).__name__}: {_line(e)}", history) from e
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not real or math.isnan(value) or value < 0:
        raise refuse(acc, "a number ≥ 0", f"it returned {_line(repr(value))}", history)
    return float(value)


def check_answer(acc: Accountant, history: History, delta: float, epsilon: float) -> None:
    """`Refused` unless ``epsilon``, ``acc``'s ε of ``history`` about to be used as an answer (a calibrated σ's,
    a run's reported one), is finite and, for a bound, not below what one step alone spends (`one_step_delta`,
    exact) nor, for a plugin's, below dp_accounting's PLD ε of the schedule less `PLD_TOLERANCE`."""
    if not math.isfinite(epsilon):
        raise refuse(acc, "finite where it is the answer", f"it returned {epsilon}", history)
    if acc.bound_by is not None:
        return  # an approximation, shown beside the bound that calibrates and reports its runs
    if any(one_step_delta(sigma=s, q=q, epsilon=epsilon) > delta * (1 + 1e-6) for s, q, _ in history):
        raise refuse(acc, "at least what one step alone spends", f"it returned {epsilon:.4g}", history)
    if acc is BUILT_INS.get(acc.name):
        # dpviz's own bounds, which no plugin may replace: proven, their ε checked against PLD's by the tests
        # (tests/test_accountant_seam.py) and every run's recomputed by PLD in its privacy check. Here, PLD
        # would import dp_accounting (≈ 0.9 s) into the form's every preview and every run's start.
        return
    reference = _pld_reference(acc, history, delta)
    if epsilon < reference * (1 - PLD_TOLERANCE):
        raise refuse(acc, f"at least dp_accounting's PLD ε of the same schedule, less {100 * PLD_TOLERANCE:g} %",
                     f"it returned {epsilon:.4g} where PLD gives {reference:.4g}", history)


def one_step_delta(*, sigma: float, q: float, epsilon: float) -> float:
    """δ(ε) of one Poisson-sampled Gaussian step (σ, q) for removing a record, exactly: a step's output y has
    privacy loss log(1 − q + q·e^((2y − 1)/2σ²)), above ε for y > x = σ²·log((e^ε − 1 + q)/q) + ½, so
    δ(ε) = q·Φ̄((x − 1)/σ) − (e^ε − 1 + q)·Φ̄(x/σ). A composition spends at least any of its steps: an ε whose δ
    here exceeds the run's δ is below the true ε, whatever the other steps."""
    from scipy.special import log_ndtr

    log_ratio = epsilon + math.log1p(-(1 - q) * math.exp(-epsilon)) - math.log(q)  # log((e^ε − 1 + q)/q)
    x = sigma * sigma * log_ratio + 0.5
    return float(q * math.exp(log_ndtr((1 - x) / sigma))
                 - math.exp(log_ratio + math.log(q) + log_ndtr(-x / sigma)))


def _pld_reference(acc: Accountant, history: History, delta: float) -> float:
    """dp_accounting's PLD ε of ``history``, the reference ``acc``'s ε is held to; `Refused` where it cannot be
    computed (nothing else vouches for a plugin's ε)."""
    if not BUILT_INS["pld"].available():
        from dpviz.errors import install_hint

        raise refuse(acc, "checked against dp_accounting's PLD", "dp_accounting is not installed "
                     f"({install_hint('dp_accounting')})", history)
    try:
        return _pld_of(tuple(map(tuple, history)), delta)
    except Exception as e:  # noqa: BLE001 - e.g. dp_accounting's arrays overflow at an absurd σ
        raise refuse(acc, "checked against dp_accounting's PLD", f"PLD failed ({type(e).__name__}: {_line(e)})",
                     history) from e


@functools.lru_cache(maxsize=256)
def _pld_of(history: tuple, delta: float) -> float:
    """`pld_epsilon`, once per schedule: a calibration and the run's reported ε check the same one."""
    return pld_epsilon(list(history), delta)


def _line(x) -> str:
    return " ".join(str(x).split())[:120]
