"""Private sparse fine-tuning (SPARTA, Makni et al. 2025) and its fixed-mask baselines.

Rows are the output neurons of Linear layers and the output filters of Conv2d
layers (the weight flattened to out × rest). A mask keeps a set of rows per
layer; training reparameterises W = W₀ + scatter(rows, ΔW) with only ΔW
trainable (`models.rowdelta.RowDelta`), so a masked step computes per-sample gradients,
norms and noise for the selected rows only ("row grouping"), and per-sample
gradients are clipped after masking by construction. Masked training needs
the book-keeping path (every built-in and supported external backbone).

Selections (``RunConfig.selection``):

* ``sparta`` — private: one selection epoch of ordinary DP-SGD releases
  g̃ = (Σ_i clip(g_i) + N(0, σ²C²I))/B; v = Σ_steps |g̃|; row score
  max(0, Σ_row v); per layer the top s fraction of rows. The noisy releases
  are the only private information the choice sees (`select_rows` is a
  function of v alone), and the accountant counts the epoch.
* ``magnitude`` — top-s rows by the L2 norm of the *public* pretrained row.
* ``random`` — s of the rows of each layer uniformly at random (the run's seed).
* ``bias`` (DP-BiTFiT) — head + every bias; ``norm`` — head + norm layers.

In row selections the masked phase also trains the head, biases, norm layers
and the ViT's class token/positions (few parameters), so with s = 1 it is full
fine-tuning exactly.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from dpviz.models.vit import ClsPos
from dpviz.models.rowdelta import RowDelta  # noqa: F401  (re-exported: the masked layer)



def row_layers(backbone: nn.Module) -> dict[str, nn.Module]:
    """Name → Conv2d (groups = 1) or Linear layer of the backbone, in module order."""
    return {n: m for n, m in backbone.named_modules()
            if isinstance(m, nn.Linear) or (isinstance(m, nn.Conv2d) and m.groups == 1)}


def folded_weight(m: RowDelta) -> torch.Tensor:
    """W₀ + scatter(rows, ΔW), detached."""
    return m.weight().detach()


def _set(root: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, leaf, module)


def apply_mask(backbone: nn.Module, mask: dict[str, list[int]]) -> list[RowDelta]:
    """Wrap every masked layer of ``backbone`` in a `RowDelta` (in place)."""
    layers = row_layers(backbone)
    out = []
    for name, rows in mask.items():
        if rows:
            wrapped = RowDelta(layers[name], torch.tensor(sorted(rows), dtype=torch.long))
            _set(backbone, name, wrapped)
            out.append(wrapped)
    return out


def fold(backbone: nn.Module) -> None:
    """Merge every `RowDelta` back into its base layer's weight and unwrap it (in place)."""
    for name, m in list(backbone.named_modules()):
        if isinstance(m, RowDelta):
            with torch.no_grad():
                m.base.weight.copy_(folded_weight(m))
            _set(backbone, name, m.base)


def folded_state_dict(model: nn.Module) -> dict:
    """The state dict the unwrapped model would have (checkpoints load into a plain model)."""
    sd = dict(model.state_dict())
    for name, m in model.named_modules():
        if isinstance(m, RowDelta):
            for k in [k for k in sd if k.startswith(name + ".")]:
                v = sd.pop(k)
                if k.startswith(name + ".base."):
                    sd[name + "." + k[len(name) + 6:]] = v
            sd[name + ".weight"] = folded_weight(m)
    return sd


def set_masked_trainable(model: nn.Module, *, rows: bool, norms: bool, biases: bool) -> None:
    """Head plus the deltas of the selected rows, and by the selection's kind (`strategies.sparse.trains`)
    norm layers and the ViT's class/position tokens (row selections), biases."""
    model.requires_grad_(False)
    model.head.requires_grad_(True)
    for m in model.backbone.modules():
        if isinstance(m, RowDelta):
            m.delta.requires_grad_(True)  # ΔW (k, …) of the selected rows
        elif isinstance(m, (nn.GroupNorm, nn.LayerNorm)) and norms:
            m.requires_grad_(True)
        elif isinstance(m, ClsPos) and rows:
            m.requires_grad_(True)
        if biases and not isinstance(m, (nn.GroupNorm, nn.LayerNorm)):
            b = getattr(m, "bias", None)
            if isinstance(b, nn.Parameter):
                b.requires_grad_(True)


def row_scores(v: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Row score max(0, Σ_row v) per layer from accumulated |released gradients| (out, …)."""
    return {n: t.reshape(t.shape[0], -1).sum(1).clamp(min=0) for n, t in v.items()}


def select_rows(scores: dict[str, torch.Tensor], sparsity: float) -> dict[str, list[int]]:
    """Per layer the ceil(s·rows) highest-scoring rows (ties to the lower index)."""
    out = {}
    for n, sc in scores.items():
        k = max(1, math.ceil(sparsity * len(sc) - 1e-9))
        order = torch.sort(sc, descending=True, stable=True).indices
        out[n] = sorted(order[:k].tolist())
    return out


def magnitude_mask(backbone: nn.Module, sparsity: float) -> dict[str, list[int]]:
    """Top-s rows by the norm of the public pretrained weights."""
    return select_rows({n: m.weight.detach().reshape(m.weight.shape[0], -1).norm(dim=1)
                        for n, m in row_layers(backbone).items()}, sparsity)


def choose_mask(backbone: nn.Module, selection: str, sparsity: float, *, scores=None, seed: int = 0
                ) -> dict[str, list[int]]:
    """Layer name → rows to train: from the selection epoch's ``scores`` (sparta), the public weights
    (magnitude), at random, or none (bias / norm train no weight rows)."""
    if selection == "sparta":
        return select_rows(scores, sparsity)
    if selection == "magnitude":  # the backbone still holds the public weights W₀ here
        return magnitude_mask(backbone, sparsity)
    if selection == "random":
        return random_mask(backbone, sparsity, seed)
    return {}


def random_mask(backbone: nn.Module, sparsity: float, seed: int) -> dict[str, list[int]]:
    g = torch.Generator().manual_seed(seed)
    return select_rows({n: torch.rand(m.weight.shape[0], generator=g) for n, m in row_layers(backbone).items()},
                       sparsity)


def trainable_fraction(model: nn.Module) -> float:
    """Share of the backbone's weights that train (masked rows count by their row)."""
    total = sum(p.numel() for n, p in model.backbone.named_parameters() if not n.endswith("delta"))
    train = sum(p.numel() for p in model.backbone.parameters() if p.requires_grad)
    return train / total
