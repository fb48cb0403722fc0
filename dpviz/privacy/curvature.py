"""Curvature of the training loss and the terms of DP-SGD's per-step improvement (Bu et al. 2024).

Pure math on a model and a fixed batch; nothing here reads the store.

For DP-SGD with learning rate η, expected batch B, clipping norm C, average
clip factor c (clip(g_i) ≈ c·g_i), noise multiplier σ, mean gradient G,
Hessian H and per-sample gradient covariance Σ, the noisy update is
g̃ = (Σ_i clip(g_i) + N(0, σ²C²I)) / B, so E[g̃] = c·G and
Cov[g̃] = c²Σ/B + σ²C²I/B². A second-order expansion of the loss gives
(our reconstruction of Bu et al. 2024's analysis, not a quotation)::

    E[ΔL] ≈ η·c·GᵀG − (η²/2)·c²·[GᵀHG + tr(HΣ)/B + σ²C²·tr(H)/(B²c²)]

so at the best η* = GᵀG / (c·D) the improvement is (GᵀG)² / (2·D), with the
denominator D the sum of three terms: the curvature along the gradient
GᵀHG, the sampling term tr(HΣ)/B, and the **decelerator**
σ²C²·tr(H)/(B²c²), which only DP noise adds. (Bu et al. 2024 write the decelerator
σ²·tr(H)/(B·c²) with σ normalised per sample; the terms here use dpviz's own
σ, C and B exactly as its DP-SGD step does.)

tr(H) comes from Hutchinson's estimator: the mean of vᵀHv over Rademacher
vectors v, each Hv a Hessian-vector product by double backprop on the plain
model in evaluation mode. The estimator is unbiased; its standard error is the
sample standard deviation over probes divided by √probes. Restricting vᵀHv to
one block's coordinates estimates that block's diagonal trace tr(H_bb).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel


@dataclass(frozen=True)
class Estimate:
    """A Monte-Carlo mean with its standard error."""

    value: float
    stderr: float
    samples: int


def mean_se(xs: torch.Tensor) -> Estimate:
    n = len(xs)
    se = float(xs.std(unbiased=True) / math.sqrt(n)) if n > 1 else math.inf
    return Estimate(float(xs.mean()), se, n)


def param_blocks(model: nn.Module, params: list[nn.Parameter]) -> dict[str, list[int]]:
    """Indices of ``params`` per block: stem, block1…blockL, head (built-in and wrapped backbones)."""
    names = {id(p): n for n, p in model.named_parameters()}
    out: dict[str, list[int]] = {}
    for i, p in enumerate(params):
        n = names.get(id(p), "")
        parts = n.split(".")
        if parts[0] == "head":
            key = "head"
        elif "blocks" in parts and parts.index("blocks") + 1 < len(parts):
            key = f"block{int(parts[parts.index('blocks') + 1]) + 1}"
        else:
            key = "stem"
        out.setdefault(key, []).append(i)
    order = ["stem"] + sorted((k for k in out if k.startswith("block")), key=lambda k: int(k[5:])) + ["head"]
    return {k: out[k] for k in order if k in out}


class LossCurvature:
    """Gradient and Hessian-vector products of the mean cross-entropy on one fixed batch.

    The gradient graph is built once (``create_graph=True``); every Hv is one more backward through it.
    """

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, params: list[nn.Parameter]):
        self.model, self.x, self.y, self.params = model, x, y, params
        was_training = model.training
        model.eval()  # dropout/norm statistics fixed: H of one deterministic function
        # fused attention kernels have no double backward: the math kernel records differentiable ops
        with sdpa_kernel([SDPBackend.MATH]):
            loss = F.cross_entropy(model(x), y)
            self.grads = torch.autograd.grad(loss, params, create_graph=True)
        model.train(was_training)
        self.G = [g.detach() for g in self.grads]

    def hvp(self, v: list[torch.Tensor]) -> list[torch.Tensor]:
        return [h.detach() for h in torch.autograd.grad(self.grads, self.params, v, retain_graph=True)]

    def per_sample_grads(self, idx: torch.Tensor) -> list[list[torch.Tensor]]:
        """Gradients of single examples ``idx`` (one backward each; m is small)."""
        out = []
        for i in idx.tolist():
            loss = F.cross_entropy(self.model(self.x[i:i + 1]), self.y[i:i + 1])
            out.append([g.detach() for g in torch.autograd.grad(loss, self.params)])
        return out


def _dot(a, b) -> torch.Tensor:
    return sum((u * v).sum() for u, v in zip(a, b))


def hutchinson(lc: LossCurvature, blocks: dict[str, list[int]], *, rtol: float, max_probes: int,
               min_probes: int, generator: torch.Generator) -> tuple[Estimate, dict[str, Estimate]]:
    """tr(H) and per-block tr(H_bb); stops once stderr ≤ rtol·|trace| (after ``min_probes``)."""
    totals, per_block = [], {b: [] for b in blocks}
    while len(totals) < max_probes:
        v = [torch.randint(0, 2, p.shape, generator=generator).to(p) * 2 - 1 for p in lc.params]
        hv = lc.hvp(v)
        parts = {b: float(sum((v[i] * hv[i]).sum() for i in idx)) for b, idx in blocks.items()}
        for b, val in parts.items():
            per_block[b].append(val)
        totals.append(sum(parts.values()))
        if len(totals) >= min_probes:
            est = mean_se(torch.tensor(totals, dtype=torch.float64))
            if est.stderr <= rtol * abs(est.value):
                break
    return (mean_se(torch.tensor(totals, dtype=torch.float64)),
            {b: mean_se(torch.tensor(v, dtype=torch.float64)) for b, v in per_block.items()})


def sigma_trace(lc: LossCurvature, m: int, generator: torch.Generator) -> tuple[Estimate, torch.Tensor]:
    """tr(HΣ) = E[(g_i − G)ᵀH(g_i − G)] over m examples of the batch; also their gradient norms (m,)."""
    idx = torch.randperm(len(lc.y), generator=generator)[:m]
    gs = lc.per_sample_grads(idx)
    vals, norms = [], []
    for g in gs:
        u = [a - b for a, b in zip(g, lc.G)]
        vals.append(float(_dot(u, lc.hvp(u))))
        norms.append(float(torch.sqrt(sum(a.pow(2).sum() for a in g))))
    # Σ uses the 1/n normalisation; the m draws are unbiased for it up to the (m−1)/m of G's own noise
    return mean_se(torch.tensor(vals, dtype=torch.float64)), torch.tensor(norms)


def improvement_terms(*, gtg: float, gthg: float, trace: float, tr_h_sigma: float, noise_multiplier: float,
                      batch_size: float, clip_norm: float, clip_factor_mean: float, noise_factor: float = 1.0) -> dict:
    """The denominator's terms, the best learning rate and the best per-step improvement.

    Args:
        gtg: GᵀG. gthg: GᵀHG. trace: tr(H). tr_h_sigma: tr(HΣ).
        noise_multiplier: σ (0 without DP). batch_size: expected B = q·n.
        clip_norm: C. clip_factor_mean: c, the mean per-sample clip factor.
        noise_factor: κ, the per-step variance of the noise in the running sum of updates relative to
            independent noise (`dpviz.privacy.bandmf.noise_factor`): 1 for DP-SGD; for BandMF the decelerator
            over many steps is κ·σ²C²tr(H)/(B²c²), its σ the larger one BandMF's accounting calibrates.
    """
    c = max(clip_factor_mean, 1e-12)
    terms = {"curvature": gthg, "sampling": tr_h_sigma / batch_size,
             "decelerator": noise_factor * noise_multiplier ** 2 * clip_norm ** 2 * trace / (batch_size ** 2 * c ** 2)}
    D = sum(terms.values())
    return {"terms": terms, "denominator": D, "dominant": max(terms, key=lambda k: abs(terms[k])),
            "lr_star": gtg / (c * D) if D > 0 else math.inf,
            "improvement_star": gtg ** 2 / (2 * D) if D > 0 else math.inf}


def predicted_best_batch(*, gtg: float, gthg: float, trace: float, tr_h_sigma: float, clip_norm: float,
                         clip_factor_mean: float, n: int, epochs: float, sigmas: dict[int, float]) -> dict:
    """Total predicted improvement over ``epochs`` for each batch size B (σ(B) from an accountant).

    Steps are epochs·n/B and each improves by (GᵀG)²/(2·D(B)); a local, first-order prediction
    from one checkpoint's curvature, not a simulation of training.
    """
    out = {}
    for B, s in sigmas.items():
        t = improvement_terms(gtg=gtg, gthg=gthg, trace=trace, tr_h_sigma=tr_h_sigma, noise_multiplier=s,
                              batch_size=B, clip_norm=clip_norm, clip_factor_mean=clip_factor_mean)
        out[B] = epochs * n / B * t["improvement_star"]
    best = max(out, key=out.get) if out else None
    return {"total_improvement": out, "best_batch_size": best}


class DeceleratorMonitor:
    """The continual strategy's automatic switch: the decelerator measured on *public* data only.

    At each check the decelerator κ·σ²C²·tr(H)/(B²c²) of the coming private phase (its σ, B, C, κ of its
    noise mechanism, and c from a few public per-sample gradients) is estimated on a fixed public batch with
    a small probe budget; the switch fires once it is ≤ ``threshold`` × its largest value so far.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, *, noise_multiplier: float, batch_size: float,
                 clip_norm: float, clipping: str, threshold: float, seed: int = 0, batch: int = 256,
                 noise_factor: float = 1.0):
        self.x, self.y = x[:batch], y[:batch]
        self.sigma, self.B, self.C, self.clipping, self.threshold = (noise_multiplier, batch_size, clip_norm,
                                                                     clipping, threshold)
        self.kappa = noise_factor  # 1 for DP-SGD; BandMF's κ (`dpviz.privacy.bandmf.noise_factor`)
        self.gen = torch.Generator().manual_seed(seed)
        self.history: list[float] = []

    def measure(self, model: nn.Module) -> float:
        from dpviz.privacy.clipping import clip_factors

        params = [p for p in model.parameters() if p.requires_grad]
        lc = LossCurvature(model, self.x, self.y, params)
        tr, _ = hutchinson(lc, {"all": list(range(len(params)))}, rtol=0.1, max_probes=20, min_probes=5,
                           generator=self.gen)
        idx = torch.randperm(len(self.y), generator=self.gen)[:8]
        norms = torch.stack([torch.sqrt(sum(g.pow(2).sum() for g in gs)) for gs in lc.per_sample_grads(idx)])
        c = float(clip_factors(norms, self.C, self.clipping).mean())
        dec = self.kappa * self.sigma ** 2 * self.C ** 2 * tr.value / (self.B ** 2 * c ** 2)
        self.history.append(dec)
        return dec

    def state(self) -> dict:
        """What a stopped run's monitor goes on from (`dpviz.training.resume`): its history and its probes' generator."""
        return {"history": list(self.history), "gen": self.gen.get_state()}

    def load_state(self, state: dict) -> None:
        self.history = list(state["history"])
        self.gen.set_state(state["gen"])

    def should_switch(self) -> bool:
        """True once the latest decelerator is ≤ threshold × its peak so far.

        Relative to the peak, not the first value: with a fresh random head tr(H) starts small or
        even negative (an indefinite Hessian), rises while the head fits, then falls.
        """
        peak = max(self.history, default=0.0)
        return len(self.history) >= 3 and peak > 0 and self.history[-1] <= self.threshold * peak
