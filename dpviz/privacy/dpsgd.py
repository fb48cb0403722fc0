"""One DP-SGD step: per-sample gradients, clipping, Gaussian noise.

The clipping and noise are done here rather than by Opacus's optimizer so that
a multi-phase run keeps one noise generator and one accounting history, and so
each step can report the clipped fraction and the mean per-sample norm.
Per-sample gradients come from Opacus's `GradSampleModule` (hooks mode).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from opacus import GradSampleModule
from torch import nn


@dataclass
class StepStats:
    """What one step reports. Norm statistics are None for non-private steps."""

    loss: float
    train_accuracy: float
    batch_size: int
    clip_fraction: float | None = None
    grad_norm: float | None = None


def wrap(module: nn.Module) -> GradSampleModule:
    """Attach per-sample gradient hooks to the trainable parameters of ``module``."""
    return GradSampleModule(module, batch_first=True, loss_reduction="sum")


def unwrap(gsm: GradSampleModule) -> nn.Module:
    """Remove the hooks again (between phases, whose trainable sets differ)."""
    module = gsm._module
    gsm._close()
    return module


def _trainable(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def private_step(gsm: GradSampleModule, x: torch.Tensor, y: torch.Tensor, *, clip_norm: float,
                 noise_multiplier: float, expected_batch: float, generator: torch.Generator) -> StepStats:
    """Set ``p.grad`` to the noisy mean of clipped per-sample gradients.

    grad = (Σ_i g_i · min(1, C/‖g_i‖) + N(0, σ²C² I)) / (q·n), with ‖g_i‖ the
    norm over all trainable parameters; dividing by the expected batch size
    q·n (not the sampled one) keeps the sensitivity at C under Poisson sampling.
    """
    params = _trainable(gsm)
    B = len(y)
    loss = acc = 0.0
    clip_frac = norm_mean = None
    if B > 0:
        out = gsm(x)
        loss_sum = F.cross_entropy(out, y, reduction="sum")
        loss_sum.backward()
        gs = [p.grad_sample.reshape(B, -1) for p in params]  # each (B, numel)
        norms = torch.sqrt(sum(g.pow(2).sum(1) for g in gs))  # (B,)
        factor = (clip_norm / (norms + 1e-6)).clamp(max=1.0)
        for p, g in zip(params, gs):
            p.grad = (factor @ g).reshape(p.shape)
            p.grad_sample = None
        loss, acc = loss_sum.item() / B, (out.argmax(1) == y).float().mean().item()
        clip_frac = (norms > clip_norm).float().mean().item()
        norm_mean = norms.mean().item()
    for p in params:
        if p.grad is None or B == 0:
            p.grad = torch.zeros_like(p)
        noise = torch.randn(p.shape, generator=generator, device=p.device) * (noise_multiplier * clip_norm)
        p.grad = (p.grad + noise) / expected_batch
    return StepStats(loss, acc, B, clip_frac, norm_mean)


def plain_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> StepStats:
    """Non-private baseline: ordinary mean gradient over the sampled batch."""
    params = _trainable(module)
    if len(y) == 0:
        for p in params:
            p.grad = torch.zeros_like(p)
        return StepStats(0.0, 0.0, 0)
    out = module(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    return StepStats(loss.item(), (out.argmax(1) == y).float().mean().item(), len(y))
