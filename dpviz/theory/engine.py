"""The same setting trained by dpviz's real DP-SGD, overlaid on its diffusion (Ke et al. 2024, Theorem 2.2).

Each seed's data and initial network come from the lab (`simulate.initial`), so both sides start from the
same point. The engine side is dpviz's own mechanism: Poisson sampling at rate q, per-sample clipping by
book-keeping (`dpsgd.Stepper`), Gaussian noise σ·C (`dpsgd.private_step`), σ calibrated by dpviz's
accountant (PRV) for (ε, δ) over all its steps. Its two-logit output (−f/2, f/2) makes the
cross-entropy exactly the logistic loss log(1 + e^{−y f}) of the lab.

A DP-SGD step with learning rate η moves θ by −η·(Σ_batch clip(g_i) + σC ξ)/(qn): in expectation the
clipped mean gradient over time η, plus noise of std η·σC/B (B = qn). Langevin diffusion over the same
time with s = σ·C·√η / B has the same drift and noise variance; what it leaves out is the sampling
noise of the minibatch and the discreteness of the steps — the gap the overlay measures.
"""

from __future__ import annotations

import math

import numpy as np

from dpviz.theory.setting import Setting
from dpviz.theory.simulate import initial, integrate

OVERLAY_SEEDS = 4
OVERLAYS = ("lp", "fft")  # what the engine overlay can train over the diffusion


def _model(w: np.ndarray, v: np.ndarray, relu: bool):
    import torch
    from torch import nn

    class Logits(nn.Module):  # (B, 1) → (B, 2) = (−f/2, f/2): cross-entropy = log(1 + e^{−y f})
        def forward(self, f):
            return torch.cat([-f / 2, f / 2], 1)

    first = nn.Linear(w.shape[1], w.shape[0], bias=False)
    head = nn.Linear(w.shape[0], 1, bias=False)
    with torch.no_grad():
        first.weight.copy_(torch.from_numpy(w))
        head.weight.copy_(torch.from_numpy(v)[None])
    return nn.Sequential(first, nn.ReLU() if relu else nn.Identity(), head, Logits())


def _engine(s: Setting, x, y, w, v, *, strategy, lr, batch, sigma, seed) -> list[float]:
    """Full-data loss after every step of DP-SGD on one seed's data (``strategy``: lp or fft)."""
    import torch
    import torch.nn.functional as F

    from dpviz.privacy import dpsgd

    model = _model(w, v, s.activation == "relu")
    model[0].weight.requires_grad_(strategy == "fft")
    xs, ys = torch.from_numpy(x), torch.from_numpy((y > 0).astype(np.int64))
    stepper, gen = dpsgd.Stepper(model), torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    q, losses = batch / s.n, []
    for _ in range(round(s.time / lr)):
        with torch.no_grad():
            losses.append(F.cross_entropy(model(xs), ys).item())
        idx = (torch.rand(s.n, generator=gen) < q).nonzero().squeeze(1)  # Poisson sampling, as the trainer
        dpsgd.private_step(stepper, xs[idx], ys[idx], clip_norm=s.clip_norm, noise_multiplier=sigma,
                           expected_batch=q * s.n, generator=gen)
        opt.step()
    with torch.no_grad():
        losses.append(F.cross_entropy(model(xs), ys).item())
    stepper.close()
    return losses


def overlay(s: Setting, *, strategy: str = "fft", lr: float | None = None, batch: int | None = None,
            seeds: int = OVERLAY_SEEDS) -> dict:
    """DP-SGD's and the matched diffusion's mean loss over time t = η·step, their gap, the ε spent.

    Args:
        s: the setting (its loss must be logistic: DP-SGD trains with cross-entropy).
        strategy: "lp" or "fft".
        lr: η (default: the setting's dt, so both sides take the same time steps).
        batch: the expected batch size qn (default n/4).
        seeds: runs averaged on each side.
    """
    from dpviz.errors import ConfigError
    from dpviz.privacy import accounting

    if s.loss != "logistic":
        raise ConfigError("loss", "logistic for the engine overlay (DP-SGD trains with cross-entropy)", s.loss)
    if strategy not in OVERLAYS:
        raise ConfigError("strategy", " or ".join(OVERLAYS), strategy)
    lr, batch = lr or s.dt, batch or max(1, s.n // 4)
    s = s.replace(seeds=seeds, dt=lr)
    steps = s.steps
    phase = accounting.Phase(name=strategy, steps=steps, noise_multiplier=0.0, sample_rate=batch / s.n,
                             clip_norm=s.clip_norm)
    sigma = accounting.calibrate_sigma(target_epsilon=s.epsilon, delta=s.delta, phases=[phase])
    spent = accounting.epsilon(phases=[accounting.Phase(**{**phase.to_dict(), "noise_multiplier": sigma})],
                               delta=s.delta) if sigma > 0 else math.inf
    x, y, _, _, w, v = initial(s, seeds, 1, np.random.default_rng(s.seed))
    runs = [_engine(s, x[i], y[i], w[i], v[i], strategy=strategy, lr=lr, batch=batch, sigma=sigma, seed=s.seed + i)
            for i in range(seeds)]
    engine = np.mean(runs, axis=0)
    scale = sigma * s.clip_norm * math.sqrt(lr) / batch
    switch = np.full(seeds, steps if strategy == "lp" else 0)
    times, out = integrate(s, switch, np.full(seeds, scale), 1, np.random.default_rng(s.seed))
    at = np.round(times / lr).astype(int)  # the engine's steps at the diffusion's recorded times
    diffusion = out["loss"].mean(1)
    gap = np.abs(engine[at] - diffusion)
    return {"strategy": strategy, "epsilon": s.epsilon, "epsilon_spent": spent, "noise_multiplier": sigma,
            "noise": scale, "lr": lr, "batch": batch, "seeds": seeds, "times": times.tolist(),
            "engine": engine[at].tolist(), "diffusion": diffusion.tolist(), "gap": float(gap.mean()),
            "gap_relative": float(gap.mean() / max(engine[0], 1e-12))}
