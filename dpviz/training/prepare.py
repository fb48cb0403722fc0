"""Prepare one configuration for training: build the model, load the data, calibrate σ.

`prepare` does everything that can fail on bad input (dataset, backbone,
weights, δ ≤ 1/n, block counts, σ for the budget) before a run is stored;
`dpviz.training.loop.train` then runs the phases and writes metrics, features and weights.
The model helpers both share (the optimizer, evaluation, freezing) live here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from dpviz import catalog, data, errors, models, strategies
from dpviz.data import tokens
from dpviz.privacy import bandmf
from dpviz.runtime import memory
from dpviz.training import shapes
from dpviz.training.calibration import calibrated_phases, check_delta, check_public
from dpviz.config import AUTO, RunConfig
from dpviz.errors import ConfigError
from dpviz.models.pretrain import pretrained_backbone
from dpviz.catalog import Shape
from dpviz.privacy import accounting, dpsgd
from dpviz.privacy.accounting import Phase


Cancelled = errors.Cancelled  # defined without torch so that light modules can catch it


@dataclass(kw_only=True)
class Prepared:
    """A validated run, ready to train (fields by keyword only: it carries q)."""

    cfg: RunConfig
    bundle: data.Bundle
    model: models.Classifier
    plans: list[strategies.PhasePlan]
    phases: list[Phase]
    sample_rate: float
    device: str
    eps_curve: dict[int, float] = field(default_factory=dict)
    public: data.Bundle | None = None  # the continual strategy's public dataset
    canaries: Any = None  # an audit's canaries (`dpviz.audit.canaries`); None for a user's run

    @property
    def total_steps(self) -> int:
        return sum(p.steps for p in self.plans)


def resolve_device(name: str) -> str:
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", "cuda needs a GPU; none is visible (use auto or cpu)", name)
    return ("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name


def build_backbone(cfg: RunConfig, bundle: data.Bundle, cache_dir) -> nn.Module:
    if catalog.backbone(cfg.backbone).own:
        return pretrained_backbone(cfg.backbone, channels=bundle.channels, size=bundle.size, cache_dir=cache_dir)
    with models.cache_in(cache_dir):  # EfficientNet-Lite keeps its private-ready network in the run's store
        return models.build_backbone(cfg.backbone, channels=bundle.channels, size=bundle.size, weights=cfg.weights)


def prepare(cfg: RunConfig, *, cache_dir, with_curve: bool = True, ahead=None,
            canaries: Callable[[data.Bundle], Any] | None = None) -> Prepared:
    """Validate ``cfg`` against its data and backbone and calibrate σ for the whole schedule.

    ``ahead``: a `dpviz.training.ahead.Ahead` computing σ and the ε curve in parallel; used where it
    computed them for the schedule loaded here, else they are computed here.
    ``canaries``: an audit's canaries, made from the private bundle; included ones count in n (and so
    in q and T) exactly as real records do.
    """
    if cfg.auto:  # choosing rates is policy (`dpviz.autotune`, above the run core): `dpviz.run` resolves first
        raise ConfigError(cfg.auto[0], "a number here: resolve \"auto\" first (dpviz.run does; "
                          "RunConfig.fixed_rates() takes the fixed defaults)", AUTO)
    device = resolve_device(cfg.device)
    memory.keep_freed_memory()  # a process that trains keeps its steps' freed buffers (`dpviz.runtime.memory`)
    with tokens.cache_in(cache_dir):  # a text dataset's token ids are cached in this run's store
        bundle = data.load(cfg)
    audit = canaries(bundle) if canaries else None
    if audit is not None and not audit.virtual:
        bundle = audit.extend(bundle)  # input canaries: records of the training split
    n = bundle.n + (audit.virtual_records if audit is not None else 0)
    check_delta(cfg, n)
    backbone = build_backbone(cfg, bundle, cache_dir)
    blocks = models.count_blocks(backbone)
    sigma, curve = (ahead.take(n, blocks) if ahead else None) or (None, None)
    plans, phases, q = calibrated_phases(cfg, n, blocks, sigma=sigma)
    if audit is not None:
        audit.sample_rate = q
    torch.manual_seed(cfg.seed)  # the head's random initialisation
    model = models.Classifier(backbone, bundle.num_classes)
    public = load_public(cfg, bundle) if any(p.public for p in plans) else None
    prep = Prepared(cfg=cfg, bundle=bundle, model=model, plans=plans, phases=phases, sample_rate=q, device=device,
                    public=public, canaries=audit)
    if with_curve and cfg.private:
        prep.eps_curve = curve or accounting.epsilon_curve(phases=phases, delta=cfg.delta,
                                                           accountant=accounting.bound_by(cfg.accountant))
    return prep


def load_public(cfg: RunConfig, bundle: data.Bundle) -> data.Bundle:
    """The continual strategy's public data; it must fit the private task (modality, channels, classes).
    Public images are resized to the private side; public texts use the run's tokenizer and length."""
    check_public(cfg, Shape(bundle.n, bundle.channels, bundle.size, bundle.num_classes))
    public = catalog.dataset(cfg.public_dataset).load(cfg)
    if public.modality == "image" and public.size != bundle.size:
        side = (bundle.size, bundle.size)
        public.x_train = F.interpolate(public.x_train, size=side, mode="bilinear", align_corners=False)
        public.x_test = F.interpolate(public.x_test, size=side, mode="bilinear", align_corners=False)
    return public


def set_trainable(model: models.Classifier, trainable: str) -> None:
    """Freeze everything but what ``trainable`` names: "head", "last:k" (last k blocks + head) or "all"."""
    model.requires_grad_(trainable == "all")
    model.head.requires_grad_(True)
    if trainable.startswith("last:"):
        k = int(trainable.split(":")[1])
        for block in model.backbone.blocks[-k:]:
            block.requires_grad_(True)
        if hasattr(model.backbone, "norm"):  # a ViT's final norm sits after the last block
            model.backbone.norm.requires_grad_(True)
    for m in getattr(model.backbone, "always_frozen", ()):  # a text encoder's word-embedding table
        m.requires_grad_(False)


def make_optimizer(params, cfg: RunConfig, lr: float) -> torch.optim.Optimizer:
    """The optimizer ``cfg`` names, from ``torch.optim``: ``sgd`` (momentum 0.9), ``adam``, ``adamw`` (weight
    decay 0.01, torch's default). The DP part of a step (clipping, noise) happens before, in
    `dpviz.privacy.dpsgd`; an optimizer only post-processes the privatized gradient, so it does not touch the
    guarantee."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=bandmf.SGD_MOMENTUM)  # bandmf-momentum's noise fits it
    return (torch.optim.Adam if cfg.optimizer == "adam" else torch.optim.AdamW)(params, lr=lr)


def by_length(model: nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """For a text backbone's token ids ``x`` (N, T), right-padded: the rows ordered by length, so that a pass's
    chunks, each cut to its longest text (`dpviz.models.text`), are mostly short (tweets: 31 tokens on
    average of 48). None for other inputs."""
    pad = getattr(getattr(model, "backbone", None), "pad_id", None)
    if pad is None or x.dim() != 2 or x.is_floating_point():
        return None
    return torch.argsort((x != pad).sum(1), stable=True)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: str, *,
             fixed: int = 0, on_chunk=None) -> tuple[float, float]:
    """Test accuracy and mean cross-entropy, in chunks of 512 (``fixed`` > 0: of that many rows, the last one
    padded, so a GPU meets one shape, `shapes.pass_chunk`; ``on_chunk(done, total)`` after each)."""
    model.eval()
    out = torch.cat(shapes.chunked(model, x, device=device, fixed=fixed, size=512, on_chunk=on_chunk,
                                   order=by_length(model, x)))  # (M, K)
    model.train()
    yy = y.to(out.device)
    loss = F.cross_entropy(out, yy, reduction="sum").item()
    correct = (out.argmax(1) == yy).sum().item()
    return correct / len(y), loss / len(y)


@torch.no_grad()
def layer_features(model: models.Classifier, x: torch.Tensor, y: torch.Tensor, device: str, *,
                   fixed: int = 0, on_chunk=None) -> dict:
    """Per-layer features of the evaluation subset: layer_0 (input) … layer_L, labels (``fixed``, ``on_chunk``:
    as in `evaluate`)."""
    model.eval()
    chunks = shapes.chunked(model.backbone.layer_features, x, device=device, fixed=fixed, size=256, on_chunk=on_chunk,
                            order=by_length(model, x))
    model.train()
    out = {f"layer_{l}": torch.cat([c[l] for c in chunks]).float().cpu().numpy()
           for l in range(len(chunks[0]))}
    out["labels"] = y.numpy()
    return out


@torch.no_grad()
def backbone_features(model: models.Classifier, x: torch.Tensor, device: str, *, fixed: int = 0,
                      on_chunk=None) -> torch.Tensor:
    """Penultimate features (N, d), computed once for a frozen-backbone (LP) phase (``fixed``, ``on_chunk``: as
    in `evaluate`)."""
    model.eval()
    f = torch.cat(shapes.chunked(model.backbone.forward_features, x, device=device, fixed=fixed, size=512,
                                 on_chunk=on_chunk, order=by_length(model, x)))
    model.train()
    return f
