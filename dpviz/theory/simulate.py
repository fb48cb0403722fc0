"""Euler–Maruyama simulation of the Langevin diffusion, vectorised over seeds, strategies and shares.

One kernel (`integrate`) integrates a batch of independent runs at once: run b trains the head v alone (LP)
for its first ``switch[b]`` steps, then v and the first layer W together (FFT), with noise scale
``noise[b]``. LP is switch = all steps, FFT switch = 0, LP-FFT switch = p·T/h. Each step is

    θ ← θ − h·(1/n) Σ_i clip_C(∇ℓ_i(θ)) + noise·√h·ξ,   ξ ~ N(0, I) on the parameters being trained

— DP-SGD on the full batch (Ke et al. 2024, Definition 2.1, discretised). Per-example gradients are never
materialised: for the head g_i = r_i·h_i, for the first layer g_i = r_i·(v ⊙ φ'(W x_i)) x_iᵀ, a rank-one
matrix, so ‖g_i‖² = r_i²·(‖h_i‖² + ‖v ⊙ φ'_i‖²·‖x_i‖²) with r_i = ∂ℓ/∂f at example i.
"""

from __future__ import annotations

import math

import numpy as np

from dpviz.theory import langevin
from dpviz.theory.setting import N_TEST, Setting, act, data, first_layer, least_squares_head

STRATEGIES = ("lp", "fft", "lp-fft")
METRICS = ("loss", "test_accuracy", "alignment", "probe_accuracy", "head_alignment")
RECORDS = 40  # recorded time points per run
HEAD_SCALE = 1.0  # v ~ N(0, I): Ke et al. 2024's Gaussian head; its random signs are what distorts


def noise(s: Setting) -> float:
    """The diffusion's noise scale for the setting's (ε, δ) over its whole time (`langevin.noise_scale`)."""
    return langevin.noise_scale(epsilon=s.epsilon, delta=s.delta, clip_norm=s.clip_norm, n=s.n, time=s.time)


def _loss_and_residual(s: Setting, f: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-example loss and r = ∂ℓ/∂f, both (batch, n)."""
    if s.loss == "squared":
        return 0.5 * (f - y) ** 2, f - y
    m = -y * f
    return np.logaddexp(0, m), -y * 0.5 * (1 + np.tanh(0.5 * m))  # −y·sigmoid(−y f), without overflow


def _gradients(s: Setting, w, v, x, y, xsq, fft: np.ndarray):
    """Clipped mean gradients (for v: (B, m); for W: (B, m, d)) and the mean loss (B,).

    ``xsq``: ‖x_i‖² (B, n). φ' is 0/1 (ReLU) or 1, so Σ_j (v_j φ'_ij)² = φ' @ v², a product, not a
    (B, n, m) temporary.
    """
    h, dphi = act(s, x @ w.transpose(0, 2, 1))  # (B, n, m)
    loss, r = _loss_and_residual(s, (h @ v[..., None])[..., 0], y)
    sq = r ** 2 * (np.einsum("bnm,bnm->bn", h, h) + fft[:, None] * (dphi @ (v * v)[..., None])[..., 0] * xsq)
    cr = np.minimum(1.0, s.clip_norm / np.maximum(np.sqrt(sq), 1e-12)) * r / s.n  # c_i r_i / n, (B, n)
    gv = (h.transpose(0, 2, 1) @ cr[..., None])[..., 0]
    gw = v[..., None] * ((dphi * cr[..., None]).transpose(0, 2, 1) @ x)  # (B, m, d)
    return gv, gw, loss.mean(1)


def _metrics(s: Setting, w, v, x, y, xt, yt, loss, orient) -> dict:
    """Each metric of `METRICS` per run (B,).

    alignment = mean_j o_j·cos(w_j, z), o_j = the sign of unit j's pretrained alignment (``orient``,
    (B, m)): it falls when units turn away from the orientation pretraining gave them (distortion)."""
    h, _ = act(s, x @ w.transpose(0, 2, 1))
    ht, _ = act(s, xt @ w.transpose(0, 2, 1))
    probe = least_squares_head(h, y)  # the best linear head on the current features
    cos = (v * probe).sum(1) / np.maximum(np.linalg.norm(v, axis=1) * np.linalg.norm(probe, axis=1), 1e-12)
    return {"loss": loss, "test_accuracy": (np.sign((ht @ v[..., None])[..., 0]) == yt).mean(1),
            "alignment": (orient * w[..., 0] / np.linalg.norm(w, axis=2)).mean(1),
            "probe_accuracy": (np.sign((ht @ probe[..., None])[..., 0]) == yt).mean(1),
            "head_alignment": cos}


def initial(s: Setting, count: int, reps: int, rng: np.random.Generator):
    """``count`` seeds of data, test data and initial (W, v), each repeated ``reps`` times (paired runs)."""
    x, y = data(s, s.n, count, rng)
    xt, yt = data(s, N_TEST, count, rng)
    w = first_layer(s, count, rng)
    h0, _ = act(s, x @ w.transpose(0, 2, 1))
    v = rng.standard_normal((count, s.width)) * HEAD_SCALE if s.head == "random" \
        else least_squares_head(h0, y)
    return [np.tile(a, (reps,) + (1,) * (a.ndim - 1)).astype(np.float32) for a in (x, y, xt, yt, w, v)]


def integrate(s: Setting, switch: np.ndarray, scale: np.ndarray, reps: int, rng: np.random.Generator,
         record: bool = True):
    """Integrate ``len(switch)`` = reps·seeds runs; return record times and each metric (records, B).

    Without ``record`` only the start and the end are measured (the utility curve needs the end alone).
    """
    x, y, xt, yt, w, v = initial(s, s.seeds, reps, rng)
    xsq, orient = (x * x).sum(2), np.sign(w[..., 0])
    K, h = s.steps, s.time / s.steps
    every = max(1, K // RECORDS) if record else K
    times, out = [], {k: [] for k in METRICS}
    for k in range(K + 1):
        fft = (k >= switch).astype(np.float32)
        gv, gw, loss = _gradients(s, w, v, x, y, xsq, fft)
        if k % every == 0 or k == K:
            times.append(k * h)
            for name, val in _metrics(s, w, v, x, y, xt, yt, loss, orient).items():
                out[name].append(val)
        if k == K:
            break
        step_noise = (scale * math.sqrt(h)).astype(np.float32)
        v = v - h * gv + step_noise[:, None] * rng.standard_normal(v.shape, dtype=np.float32)
        if fft.any():
            dw = h * gw + step_noise[:, None, None] * rng.standard_normal(w.shape, dtype=np.float32)
            w = w - fft[:, None, None] * dw
    return np.array(times), {k: np.array(val) for k, val in out.items()}


def lp_closed_form(s: Setting, times: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """E[L(v_t)] of LP with the squared loss, averaged over the same seeds' data and heads as `simulate`.

    With the features H fixed, L(v) = L* + ½ (v − v*)ᵀ A (v − v*), A = HᵀH/n, so LP's diffusion is an
    Ornstein–Uhlenbeck process dv = −A(v − v*)dt + s dW. In A's eigenbasis (λ_k, c_k = q_kᵀ(v₀ − v*)):

        E[L(v_t)] = L* + ½ Σ_k λ_k c_k² e^{−2λ_k t} + (s²/4) Σ_{λ_k>0} (1 − e^{−2λ_k t})

    (Ke et al. 2024, §4: the linear-in-v phase has an exact loss; exact when no example is clipped).
    """
    x, y, _, _, w, v0 = initial(s, s.seeds, 1, rng)
    h, _ = act(s, x @ w.transpose(0, 2, 1))
    a = h.transpose(0, 2, 1) @ h / s.n
    vstar = np.stack([np.linalg.lstsq(h[i], y[i], rcond=None)[0] for i in range(s.seeds)])  # (S, m)
    lstar = 0.5 * (((h @ vstar[..., None])[..., 0] - y) ** 2).mean(1)  # (S,)
    lam, q = np.linalg.eigh(a)  # (S, m), (S, m, m)
    lam = np.clip(lam, 0, None)
    c = (q.transpose(0, 2, 1) @ (v0 - vstar)[..., None])[..., 0]
    e = np.exp(-2 * lam[None] * times[:, None, None])  # (R, S, m)
    pos = (lam > 1e-10)[None]
    excess = 0.5 * (lam[None] * c[None] ** 2 * e).sum(2) + scale ** 2 / 4 * (pos * (1 - e)).sum(2)
    return (lstar[None] + excess).mean(1)
