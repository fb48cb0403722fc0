"""DP linear probing: the backbone stays frozen and only the new head trains (Ke et al. 2024)."""

from __future__ import annotations

from dpviz.strategies import register
from dpviz.strategies.base import PhasePlan, Strategy


@register
class LinearProbe(Strategy):
    """The head alone, on penultimate features computed once (no backbone forward per step)."""

    name, label, color = "lp", "linear probing (head only)", "#0072B2"
    lr_fields = ("lr_lp",)

    def plan(self, *, total_steps, steps_per_epoch, num_blocks):
        return [PhasePlan(name="lp", steps=total_steps, lr=self.cfg.lr_lp, trainable="head")]
