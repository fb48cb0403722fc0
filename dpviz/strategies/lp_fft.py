"""LP then FFT (Ke et al. 2024): the head first, so FFT starts from a trained head, under one budget."""

from __future__ import annotations

from dpviz.strategies import register
from dpviz.strategies.base import Param, PhasePlan, Strategy


@register
class LinearProbeThenFineTune(Strategy):
    """LP for round(p·T) steps, then FFT; with one σ each phase spends its share of steps (and of ε)."""

    name, label, color = "lp-fft", "LP, then full fine-tuning", "#009E73"
    lr_fields = ("lr_lp", "lr_ft")
    auto_axes = ("lp_fraction",)
    params = (Param(name="lp_fraction", default=0.3, label="LP fraction p (share of steps and budget on LP)", low=0.0,
                    high=1.0, step=0.05, help="share p of the steps, and so of the privacy loss, spent on LP"),)

    def plan(self, *, total_steps, steps_per_epoch, num_blocks):
        k = round(self.cfg.lp_fraction * total_steps)
        phases = (PhasePlan(name="lp", steps=k, lr=self.cfg.lr_lp, trainable="head"),
                  PhasePlan(name="fft", steps=total_steps - k, lr=self.cfg.lr_ft))
        return [p for p in phases if p.steps > 0]
