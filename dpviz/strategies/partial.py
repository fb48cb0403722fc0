"""Partial fine-tuning: the last k backbone blocks and the head train (the anonymous ViT study's depth sweep)."""

from __future__ import annotations

from dpviz.errors import ConfigError
from dpviz.strategies import register
from dpviz.strategies.base import Param, PhasePlan, Strategy


@register
class PartialFineTune(Strategy):
    """Stem and earlier blocks stay frozen; a ViT's final norm trains with its last block."""

    name, label, color = "partial", "last k blocks", "#CC79A7"
    lr_fields = ("lr_ft",)
    params = (Param(name="tune_blocks", default=1, label="blocks to tune", kind="int", low=1, high=64, step=1,
                    valid=(1, None),  # the backbone's block count bounds it, once known (`plan`)
                    help="how many of the backbone's last blocks train (with the head)"),)

    def plan(self, *, total_steps, steps_per_epoch, num_blocks):
        k = self.cfg.tune_blocks
        if k > num_blocks:
            raise ConfigError("tune_blocks", f"must be in [1, {num_blocks}] for backbone {self.cfg.backbone}", k)
        return [PhasePlan(name="partial", steps=total_steps, lr=self.cfg.lr_ft, trainable=f"last:{k}")]
