"""Fine-tuning strategies as schedules of phases, registered by name.

A strategy only says which parameters train for how many steps at which
learning rate; the engine runs every phase with the same DP-SGD step and one
privacy accountant, so a new strategy is a few lines here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .errors import ConfigError


@dataclass(frozen=True)
class PhasePlan:
    """One phase of a strategy.

    Attributes:
        name: phase name as reported (lp, fft, partial).
        steps: number of steps.
        trainable: "head" (backbone frozen; trains on cached features),
            "last:k" (last k blocks + head) or "all".
        lr: learning rate of the phase.
        public: trains without DP on the public dataset (continual); not counted by the accountant.
    """

    name: str
    steps: int
    trainable: str
    lr: float
    public: bool = False


STRATEGIES: dict[str, Callable] = {}


def register(name: str):
    def deco(fn):
        STRATEGIES[name] = fn
        return fn
    return deco


@register("lp")
def linear_probe(cfg, total: int, num_blocks: int) -> list[PhasePlan]:
    return [PhasePlan("lp", total, "head", cfg.lr_lp)]


@register("fft")
def full_fine_tune(cfg, total: int, num_blocks: int) -> list[PhasePlan]:
    return [PhasePlan("fft", total, "all", cfg.lr_ft)]


@register("lp-fft")
def lp_then_fft(cfg, total: int, num_blocks: int) -> list[PhasePlan]:
    """LP for round(p·T) steps, then FFT; with one σ each phase spends its share of steps."""
    k = round(cfg.lp_fraction * total)
    return [p for p in (PhasePlan("lp", k, "head", cfg.lr_lp),
                        PhasePlan("fft", total - k, "all", cfg.lr_ft)) if p.steps > 0]


@register("partial")
def partial_fine_tune(cfg, total: int, num_blocks: int) -> list[PhasePlan]:
    """Train the last k blocks and the head; stem and earlier blocks stay frozen."""
    if cfg.tune_blocks > num_blocks:
        raise ConfigError("tune_blocks", f"must be in [1, {num_blocks}] for backbone {cfg.backbone}",
                          cfg.tune_blocks)
    return [PhasePlan("partial", total, f"last:{cfg.tune_blocks}", cfg.lr_ft)]


@register("continual")
def public_then_private(cfg, total: int, num_blocks: int) -> list[PhasePlan]:
    """Non-private training on public data, then DP-SGD on the private data (seed 004).

    The public phase runs ``switch_step`` steps, or with ``switch_step = -1`` at most ``total`` steps and
    stops early once the decelerator measured on public data has fallen (the trainer decides). The
    private phase always has the full ``total`` steps, so the privacy budget is that of plain DP-FFT.
    """
    public = cfg.switch_step if cfg.switch_step >= 0 else total
    return [p for p in (PhasePlan("public", public, "all", cfg.lr_ft, public=True),
                        PhasePlan("dp", total, "all", cfg.lr_ft)) if p.steps > 0]


@register("sparse")
def sparse_fine_tune(cfg, total: int, num_blocks: int) -> list[PhasePlan]:
    """SPARTA's schedule (seed 003): head only for 20 % of the epochs, one selection epoch (sparta only;
    an ordinary DP-SGD epoch whose noisy gradients score the rows, no update), then masked DP-SGD."""
    from .sparse import HEAD_FRACTION

    per_epoch = total // cfg.epochs
    head = max(1, round(HEAD_FRACTION * cfg.epochs)) * per_epoch
    select = per_epoch if cfg.selection == "sparta" else 0
    return [p for p in (PhasePlan("head", head, "head", cfg.lr_lp), PhasePlan("select", select, "select", 0.0),
                        PhasePlan("sparse", total - head - select, "mask", cfg.lr_ft)) if p.steps > 0]


def plan(cfg, *, total_steps: int, num_blocks: int) -> list[PhasePlan]:
    """The phases of ``cfg.strategy`` for a run of ``total_steps`` steps."""
    if cfg.strategy not in STRATEGIES:
        raise ConfigError("strategy", f"one of {', '.join(STRATEGIES)}", cfg.strategy)
    return STRATEGIES[cfg.strategy](cfg, total_steps, num_blocks)
