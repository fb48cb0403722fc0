"""The accountants a run's privacy is composed with: one declaration each, in one registry.

An accountant is an `Accountant`: its name (what `RunConfig.accountant` holds), a label and a colour (the
form, the Accountants page, figures), the accountant whose ε bounds a run that names it (``bound_by``:
itself for a bound), the package it needs beyond dpviz's own (``package``), ``epsilon(history, delta)``
over a schedule's (σ, q, T) entries, and how σ is calibrated by it. Validation, the form, the Accountants
page, figures and the command line read `names` and `get`; `dpviz.privacy.accounting` composes a schedule
through ``epsilon`` and calibrates σ with any accountant that ``calibrates``. A new accountant is one
`register` call, as Opacus's ``register_accountant`` is, in a module dpviz imports (a plugin named in
``DPVIZ_PLUGINS``, `dpviz.plugins`): nothing else names it.

This module imports nothing heavy: the built-ins' ``epsilon`` functions (here too) import Opacus's accountants
(or dp_accounting) when first called, so validating a config or drawing the form costs nothing.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import warnings
from dataclasses import dataclass
from typing import Callable

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


def register(accountant: Accountant) -> Accountant:
    """Add ``accountant`` (replacing one of the same name); returns it, so a module can keep it."""
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
