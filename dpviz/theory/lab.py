"""The lab's answers as plain data: the three strategies over time, and the utility curve over p.

Both are pure functions of a `Setting`; the page, the CLI (`python -m dpviz theory --json`) and tests
call them the same way. Figures are drawn from their results by `dpviz.figures.theory`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from dpviz.theory import langevin
from dpviz.theory.setting import Setting
from dpviz.theory.simulate import METRICS, STRATEGIES, integrate, lp_closed_form, noise

UTILITY_EPSILONS = (0.25, 0.5, 1.0, 2.0, 4.0)
UTILITY_SHARES = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0)
UTILITY_SEEDS = 6


@dataclass(frozen=True)
class Curves:
    """Per strategy and metric, the mean and standard deviation over seeds at each recorded time.

    Attributes:
        setting: the setting simulated (as a dict).
        noise: s, the diffusion's noise scale for the setting's (ε, δ).
        epsilon_spent: ε that noise spends over the whole time (the budget, up to bisection).
        times: recorded diffusion times.
        mean, std: {strategy: {metric: values per time}}.
        closed_form: E[loss] of LP from its closed form (squared loss only), else None.
    """

    setting: dict
    noise: float
    epsilon_spent: float
    times: list
    mean: dict
    std: dict
    closed_form: list | None

    def as_dict(self) -> dict:
        return asdict(self)


def curves(s: Setting) -> Curves:
    """LP, FFT and LP-FFT (switching at p·T) in one batch of 3 × seeds paired runs (same data and init)."""
    scale = noise(s)
    K, S = s.steps, s.seeds
    switch = np.repeat([K, 0, round(s.lp_share * K)], S)
    times, out = integrate(s, switch, np.full(3 * S, scale), 3, np.random.default_rng(s.seed))
    mean, std = {}, {}
    for i, name in enumerate(STRATEGIES):
        mean[name] = {m: out[m][:, i * S:(i + 1) * S].mean(1).tolist() for m in METRICS}
        std[name] = {m: out[m][:, i * S:(i + 1) * S].std(1).tolist() for m in METRICS}
    closed = lp_closed_form(s, times, scale, np.random.default_rng(s.seed)).tolist() if s.loss == "squared" \
        else None
    spent = langevin.spent(noise=scale, delta=s.delta, clip_norm=s.clip_norm, n=s.n, time=s.time)
    return Curves(s.to_dict(), scale, spent, times.tolist(), mean, std, closed)


@dataclass(frozen=True)
class Utility:
    """Final training loss and test accuracy of LP-FFT against the LP share p, one curve per ε.

    Attributes:
        shares: the p grid; epsilons: one curve each (∞ allowed).
        loss, test_accuracy: {str(ε): mean over seeds per share}.
        best_share: {str(ε): the p of the lowest final loss}.
    """

    shares: list
    epsilons: list
    loss: dict
    test_accuracy: dict
    best_share: dict

    def as_dict(self) -> dict:
        return asdict(self)


def utility(s: Setting, *, epsilons=UTILITY_EPSILONS, shares=UTILITY_SHARES) -> Utility:
    """Every (ε, p) of the grid in one batch of len(ε)·len(p)·seeds paired runs (Ke et al. 2024, Figure 2 right).

    To stay within seconds it integrates with h ≥ 0.1 and at most `UTILITY_SEEDS` seeds per point.
    """
    s = s.replace(dt=max(s.dt, 0.1), seeds=min(s.seeds, UTILITY_SEEDS))
    K, S, E, P = s.steps, s.seeds, len(epsilons), len(shares)
    scales = [noise(s.replace(epsilon=float(e))) for e in epsilons]
    switch = np.tile(np.repeat([round(p * K) for p in shares], S), E)  # (E·P·S,), ε outermost
    scale = np.repeat(scales, P * S)
    _, out = integrate(s, switch, scale, E * P, np.random.default_rng(s.seed), record=False)
    final = {m: out[m][-1].reshape(E, P, S).mean(2) for m in ("loss", "test_accuracy")}  # (E, P)
    keys = [str(float(e)) for e in epsilons]
    return Utility(list(shares), [float(e) for e in epsilons],
                   {k: final["loss"][i].tolist() for i, k in enumerate(keys)},
                   {k: final["test_accuracy"][i].tolist() for i, k in enumerate(keys)},
                   {k: float(shares[int(np.argmin(final["loss"][i]))]) for i, k in enumerate(keys)})
