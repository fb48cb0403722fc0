"""Per-sample clip factors: the one place every DP step, audit and curvature estimate takes them from."""

from __future__ import annotations

import torch

AUTO_S_GAMMA = 0.01


def clip_factors(norms: torch.Tensor, clip_norm: float, clipping: str = "abadi",
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-sample scale c_i (B,): Abadi min(1, C/‖g_i‖), or AUTO-S C/(‖g_i‖ + γ) with γ = 0.01.

    Both keep ‖c_i g_i‖ ≤ C, so the noise std σ·C gives the same guarantee; AUTO-S rescales every
    gradient (no threshold to tune: C only sets the step size; automatic clipping as Bu et al. 2024 use it).
    ``mask`` (B,) bool: a padded batch's real rows; a padded row's factor is 0 (`dpviz.training.shapes`).
    """
    if clipping == "auto-s":
        c = clip_norm / (norms + AUTO_S_GAMMA)
    else:
        c = (clip_norm / (norms + 1e-6)).clamp(max=1.0)
    return c if mask is None else c * mask
