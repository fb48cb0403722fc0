"""Low-rank adapters (LoRA, Hu et al. 2021; DP-LoRA, Yu et al. 2022) for the backbone's layers.

Each Linear layer W (out × in) gets W + B·A with A (r × in) and B (out × r); each Conv2d (groups = 1)
gets a low-rank pair of convolutions: A a k×k convolution to r channels with the layer's stride and
padding, then B a 1×1 convolution back to the output channels, whose composition is the conv with
kernel ΔW[o, i] = Σ_j B[o, j]·A[j, i] — so merging is exact. A and B are ordinary `nn.Linear` /
`nn.Conv2d` modules, so book-keeping computes their per-sample norms like any other layer. B starts
at zero: the adapted model starts as the pretrained one. The pretrained weights stay frozen.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LoRA(nn.Module):
    """A frozen ``base`` Linear/Conv2d plus the low-rank update B(A(x)) of rank ``rank``."""

    def __init__(self, base: nn.Module, rank: int):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.rank = rank
        w = base.weight
        if isinstance(base, nn.Conv2d):
            self.A = nn.Conv2d(base.in_channels, rank, base.kernel_size, base.stride, base.padding, base.dilation,
                               bias=False)
            self.B = nn.Conv2d(rank, base.out_channels, 1, bias=False)
        else:
            self.A = nn.Linear(base.in_features, rank, bias=False)
            self.B = nn.Linear(rank, base.out_features, bias=False)
        self.to(device=w.device, dtype=w.dtype)
        nn.init.kaiming_uniform_(self.A.weight, a=math.sqrt(5))  # as loralib initialises A
        nn.init.zeros_(self.B.weight)  # ΔW = 0 at the start

    def delta_weight(self) -> torch.Tensor:
        """ΔW in the base weight's shape: B·A (out, in), or Σ_j B[o, j]·A[j, i, kh, kw] for a conv."""
        a, b = self.A.weight, self.B.weight
        if isinstance(self.base, nn.Conv2d):
            return torch.einsum("oj,jikl->oikl", b[:, :, 0, 0], a)
        return b @ a

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.B(self.A(x))


def adaptable_layers(backbone: nn.Module) -> dict[str, nn.Module]:
    """Name → Linear or Conv2d (groups = 1) layer of the backbone, in module order; a backbone that names
    ``lora_targets`` (a text encoder: the attention's query and value projections) adapts only those."""
    targets = getattr(backbone, "lora_targets", None)
    return {n: m for n, m in backbone.named_modules()
            if (isinstance(m, nn.Linear) or (isinstance(m, nn.Conv2d) and m.groups == 1))
            and (targets is None or n.rsplit(".", 1)[-1] in targets)}


def _set(root: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, leaf, module)


def apply_lora(backbone: nn.Module, rank: int) -> list[LoRA]:
    """Wrap every adaptable layer of ``backbone`` in a `LoRA` of rank ``rank`` (in place)."""
    out = []
    for name, layer in adaptable_layers(backbone).items():
        wrapped = LoRA(layer, rank)
        _set(backbone, name, wrapped)
        out.append(wrapped)
    return out


def set_lora_trainable(model: nn.Module) -> None:
    """The head and the adapters train; every pretrained weight stays frozen."""
    model.requires_grad_(False)
    model.head.requires_grad_(True)
    for m in model.backbone.modules():
        if isinstance(m, LoRA):
            m.A.requires_grad_(True)
            m.B.requires_grad_(True)


def merge(backbone: nn.Module) -> None:
    """W ← W + ΔW for every adapter, and unwrap it (in place): a plain backbone again."""
    for name, m in list(backbone.named_modules()):
        if isinstance(m, LoRA):
            with torch.no_grad():
                m.base.weight.add_(m.delta_weight())
            _set(backbone, name, m.base)


def merged_state_dict(model: nn.Module) -> dict:
    """The state dict the merged model would have (checkpoints load into the unmodified classifier)."""
    sd = {}
    adapters = {n: m for n, m in model.named_modules() if isinstance(m, LoRA)}
    for k, v in model.state_dict().items():
        owner = next((n for n in adapters if k.startswith(n + ".")), None)
        if owner is None:
            sd[k] = v
        elif k.startswith(owner + ".base."):
            sd[owner + "." + k[len(owner) + 6:]] = v
    for n, m in adapters.items():
        sd[n + ".weight"] = (m.base.weight + m.delta_weight()).detach()
    return sd


def trainable_fraction(model: nn.Module) -> float:
    """Adapter parameters as a share of the backbone's pretrained parameters."""
    adapters = {id(p): p.numel() for m in model.backbone.modules() if isinstance(m, LoRA)
                for p in (m.A.weight, m.B.weight)}
    base = sum(p.numel() for p in model.backbone.parameters() if id(p) not in adapters)
    return sum(adapters.values()) / base
