"""Sparse fine-tuning: SPARTA's private row selection (Makni et al. 2025) and its fixed-mask baselines.

Schedule: the head alone for 20 % of the epochs; with ``selection = sparta`` one selection epoch of
ordinary DP-SGD whose noisy releases score the rows (no update; the accountant counts it); then
masked DP-SGD on the chosen rows (`dpviz.models.sparse` holds the masks and the row-grouped layers).
"""

from __future__ import annotations

from dpviz.strategies import register
from dpviz.strategies.base import Param, PhasePlan, Strategy

SELECTIONS = ("sparta", "magnitude", "random", "bias", "norm")
ROW_SELECTIONS = ("sparta", "magnitude", "random")
HEAD_FRACTION = 0.2  # share of epochs on the head first (10 of 50 in the reference runs)


def trains(selection: str) -> dict:
    """What trains besides the head under ``selection`` (`sparse.set_masked_trainable`'s switches)."""
    rows = selection in ROW_SELECTIONS
    return {"rows": rows, "norms": rows or selection == "norm", "biases": rows or selection == "bias"}


@register
class SparseFineTune(Strategy):
    name, label, color = "sparse", "sparse rows (SPARTA and baselines)", "#E69F00"
    lr_fields = ("lr_lp", "lr_ft")
    grad_sample_modes = ("auto", "bk")  # masked rows need book-keeping
    min_epochs = 3  # head epochs, a selection epoch, masked epochs
    params = (
        Param(name="selection", default="sparta", label="rows to train (sparse)", kind="choice",
              choices=SELECTIONS,
              help="sparta: private selection epoch; magnitude/random: fixed rows; bias / norm: head + biases / "
                   "norm layers"),
        Param(name="sparsity", default=0.2, label="sparsity s (share of each layer's rows, sparse)", low=0.01,
              high=1.0, step=0.01, valid=(0, 1), bounds="(]", means="the fraction of each layer's rows that train", help="the fraction of each layer's rows (output neurons / filters) that train"),
    )

    @classmethod
    def unread(cls, cfg) -> tuple[str, ...]:
        # bias and norm train fixed parameter groups: no share of rows to choose
        return super().unread(cfg) + (("sparsity",) if cfg.selection not in ROW_SELECTIONS else ())

    @classmethod
    def unread_because(cls, cfg, name: str) -> str:
        return f"selection {cfg.selection} (it trains the head and {cfg.selection} parameters, not a share of rows)"

    @classmethod
    def describe(cls, cfg, phases: str) -> str:
        return f"{phases} (s = {cfg.sparsity:g} of each layer's rows, {cfg.selection})"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.v = None  # selection epoch: Σ |released gradient| per row layer
        self.scores = None
        self.facts: dict = {}

    def plan(self, *, total_steps, steps_per_epoch, num_blocks):
        head = max(1, round(HEAD_FRACTION * self.cfg.epochs)) * steps_per_epoch
        select = steps_per_epoch if self.cfg.selection == "sparta" else 0
        phases = (PhasePlan(name="head", steps=head, lr=self.cfg.lr_lp, trainable="head"),
                  PhasePlan(name="select", steps=select, lr=0.0),
                  PhasePlan(name="sparse", steps=total_steps - head - select, lr=self.cfg.lr_ft))
        return [p for p in phases if p.steps > 0]

    def enter_phase(self, loop, plan):
        from dpviz.models import sparse

        if plan.name == "select":  # ordinary DP-SGD releases of every weight, never applied
            loop.set_trainable("all")
            if self.v is None:  # a resumed run keeps the sums it had (`resume_state`)
                self.v = {n: 0 for n in sparse.row_layers(loop.model.backbone)}
            else:
                self.v = {n: t.to(loop.dev) if hasattr(t, "to") else t for n, t in self.v.items()}
            return loop.setup(module=loop.model, update=False)
        if plan.name == "sparse":
            self._enter_mask(loop)
            return loop.setup(module=loop.model)
        return super().enter_phase(loop, plan)

    def after_step(self, loop, plan, setup):
        if plan.name == "select":
            from dpviz.models import sparse

            for name, m in sparse.row_layers(loop.model.backbone).items():
                self.v[name] = self.v[name] + m.weight.grad.abs()  # (out, …)

    def leave_phase(self, loop, plan, setup):
        from dpviz.models import sparse

        if plan.name == "select":  # only these noisy releases reach the row choice
            loop.model.zero_grad(set_to_none=True)
            self.scores = sparse.row_scores(self.v)
        elif plan.name == "sparse":
            sparse.fold(loop.model.backbone)  # W₀ + scatter(ΔW) back into plain layers

    def _enter_mask(self, loop) -> None:
        """Choose the rows, wrap the masked layers, store the mask."""
        from dpviz.models import sparse

        cfg, bb = self.cfg, loop.model.backbone
        mask = sparse.choose_mask(bb, cfg.selection, cfg.sparsity, scores=self.scores, seed=cfg.seed)
        rows_per_layer = {n: int(m.weight.shape[0]) for n, m in sparse.row_layers(bb).items()}  # before wrapping
        sparse.apply_mask(bb, mask)
        sparse.set_masked_trainable(loop.model, **trains(cfg.selection))
        self.facts = {"selection": cfg.selection, "sparsity": cfg.sparsity,
                      "trainable_fraction": sparse.trainable_fraction(loop.model),
                      "mask_layers": {n: len(rows) / rows_per_layer[n] for n, rows in mask.items()}}
        loop.save_mask({"step": loop.step, "selection": cfg.selection, "sparsity": cfg.sparsity,
                        "mask": mask, "rows_per_layer": rows_per_layer})
        loop.event("mask", f"{cfg.selection}: {self.facts['trainable_fraction']:.4f} of the backbone's weights train")

    def state_dict(self, model):
        from dpviz.models import sparse

        return sparse.folded_state_dict(model)

    def resume_state(self, loop):
        """The selection epoch's sums so far and the row scores: the mask is chosen again from them."""
        v = {n: t.detach().cpu() if hasattr(t, "detach") else t for n, t in (self.v or {}).items()}
        scores = {n: t.detach().cpu() for n, t in (self.scores or {}).items()}
        return {"v": v if self.v is not None else None, "scores": scores if self.scores is not None else None}

    def load_resume_state(self, state):
        self.v, self.scores = state["v"], state["scores"]

    def summary(self, loop):
        return self.facts
