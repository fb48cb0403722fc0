"""DP full fine-tuning: every backbone weight and the new (random) head train from step 0."""

from __future__ import annotations

from dpviz.strategies import register
from dpviz.strategies.base import PhasePlan, Strategy


@register
class FullFineTune(Strategy):
    name, label, color = "fft", "full fine-tuning", "#D55E00"
    lr_fields = ("lr_ft",)

    def plan(self, *, total_steps, steps_per_epoch, num_blocks):
        return [PhasePlan(name="fft", steps=total_steps, lr=self.cfg.lr_ft)]
