"""DP-LoRA (Hu et al. 2021; Yu et al. 2022 for DP): low-rank adapters train, pretrained weights stay frozen.

Adapters of rank ``lora_rank`` on every Linear and Conv2d of the backbone (`dpviz.models.lora`), trained with
the head by DP-SGD; they merge into plain weights at the end, so checkpoints and ``model.pt`` load into
the unmodified backbone.
"""

from __future__ import annotations

from dpviz.strategies import register
from dpviz.strategies.base import Param, PhasePlan, Strategy


@register
class LowRankAdapters(Strategy):
    name, label, color = "lora", "low-rank adapters (LoRA)", "#56B4E9"
    lr_fields = ("lr_ft",)
    params = (Param(name="lora_rank", default=4, label="adapter rank r (lora)", kind="int", low=1, high=256, step=1,
                    help="rank of the low-rank update B·A added to every Linear / Conv2d of the backbone"),)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.fraction = None

    def plan(self, *, total_steps, steps_per_epoch, num_blocks):
        return [PhasePlan(name="lora", steps=total_steps, lr=self.cfg.lr_ft)]

    def enter_phase(self, loop, plan):
        from dpviz.models import lora

        lora.apply_lora(loop.model.backbone, self.cfg.lora_rank)
        lora.set_lora_trainable(loop.model)
        self.fraction = lora.trainable_fraction(loop.model)
        loop.event("lora", f"rank {self.cfg.lora_rank}: {self.fraction:.4f} of the backbone's parameter count trains")
        return loop.setup(module=loop.model)

    def leave_phase(self, loop, plan, setup):
        from dpviz.models import lora

        lora.merge(loop.model.backbone)

    def state_dict(self, model):
        from dpviz.models import lora

        return lora.merged_state_dict(model)

    def summary(self, loop):
        return {"lora_rank": self.cfg.lora_rank, "trainable_fraction": self.fraction}
