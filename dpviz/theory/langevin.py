"""ε ↔ noise of Langevin diffusion with clipped per-example gradients: pure math, no state.

The diffusion (Ke et al. 2024, Definition 2.1, after Ganesh et al. 2023):

    dθ = −∇L_C(θ) dt + s dW,   s = √(2/β),   L_C's gradient = (1/n) Σ_i clip_C(∇ℓ_i(θ)).

Neighbouring data sets differ by adding or removing one example (the relation dpviz's DP-SGD uses), so
the drifts of two runs differ by at most Δ = C/n at every instant. By Girsanov's theorem the Rényi
divergence of order α between the two runs' laws up to time T is at most

    D_α ≤ α · Δ² · T / (2 s²) = α · β · C² · T / (4 n²)     (Ke et al. 2024, Theorem 4.1; reconstructed)

— the Rényi curve of a Gaussian mechanism, linear in α with slope ρ = β C² T / (4 n²). It converts to
(ε, δ)-DP by the conversion Opacus's RDP accountant uses (Canonne, Kamath & Steinke 2020; Balle et al.
2020): ε = min_{α>1} [α ρ + log((α−1)/α) − (log δ + log α)/(α−1)]. The constant is
*reconstructed* (derived above, not checked against Ganesh et al. 2023): the Theory page says so.

Euler–Maruyama with step h is DP-SGD on the full batch with noise std s·√h per step.
"""

from __future__ import annotations

import math

import numpy as np

_ALPHAS = np.concatenate([1 + np.geomspace(1e-4, 10, 400), np.geomspace(11, 1e6, 400)])


def rdp_slope(*, beta: float, clip_norm: float, n: int, time: float) -> float:
    """ρ with D_α ≤ α·ρ for the diffusion up to ``time`` (β = 2/s²)."""
    return beta * clip_norm ** 2 * time / (4 * n ** 2)


def epsilon(*, rho: float, delta: float) -> float:
    """(ε, δ)-DP of a mechanism whose Rényi divergence is α·ρ at every order α > 1."""
    if rho <= 0:
        return 0.0
    a = _ALPHAS
    return float(np.min(a * rho + np.log((a - 1) / a) - (math.log(delta) + np.log(a)) / (a - 1)))


def rho_for_epsilon(*, epsilon: float, delta: float) -> float:
    """The largest ρ whose (ε, δ) conversion stays within ``epsilon`` (bisection; ε is increasing in ρ)."""
    lo, hi = 0.0, 1.0
    while _eps(hi, delta) < epsilon:
        hi *= 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _eps(mid, delta) <= epsilon else (lo, mid)
    return lo


def _eps(rho: float, delta: float) -> float:
    return epsilon(rho=rho, delta=delta)


def noise_scale(*, epsilon: float, delta: float, clip_norm: float, n: int, time: float) -> float:
    """s = √(2/β) of the diffusion that spends exactly (ε, δ) over ``time``; 0 for ε = ∞ (no noise).

    β = 4 n² ρ(ε, δ) / (C² T) inverts `rdp_slope`, so s = C √T / (n √(2 ρ)): monotone decreasing in ε,
    in n, and increasing in C and T.
    """
    if math.isinf(epsilon):
        return 0.0
    rho = rho_for_epsilon(epsilon=epsilon, delta=delta)
    return clip_norm * math.sqrt(time) / (n * math.sqrt(2 * rho))


def spent(*, noise: float, delta: float, clip_norm: float, n: int, time: float) -> float:
    """ε spent by the diffusion with noise scale ``noise`` up to ``time`` (∞ without noise)."""
    if noise <= 0:
        return math.inf
    return epsilon(rho=rdp_slope(beta=2 / noise ** 2, clip_norm=clip_norm, n=n, time=time), delta=delta)
