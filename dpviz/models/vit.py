"""A small ViT with a CLS token, written so per-sample gradients stay cheap.

Attention uses plain ``nn.Linear`` projections (Opacus has fast per-sample
gradient rules for Linear and LayerNorm); the CLS token and position
embedding live in `ClsPos`, a module with its own grad sampler, instead of raw
parameters that would push Opacus onto its slow functorch fallback.
"""

from __future__ import annotations

import torch
from torch import nn


GRID = 4  # the image is cut into GRID × GRID patches whatever its size


class ClsPos(nn.Module):
    """Prepend a learned CLS token and add learned position embeddings."""

    def __init__(self, tokens: int, dim: int):
        super().__init__()
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, T+1, D)
        return torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.pos


def _clspos_grad_sample(layer: ClsPos, activations, backprops: torch.Tensor):
    # backprops: (B, T+1, D), the gradient w.r.t. the output.
    return {layer.cls: backprops[:, :1, :].unsqueeze(1), layer.pos: backprops.unsqueeze(1)}


def register_with_opacus() -> None:
    """Teach Opacus's hooks the per-sample gradient of `ClsPos` (idempotent). Called by whatever is
    about to use Opacus's grad samplers, not at import: importing Opacus costs ≈ 1 s that the
    default (book-keeping) path never needs."""
    from dpviz.runtime.imports import import_opacus

    import_opacus()  # under the accountants' lock: never beside their placeholder import
    from opacus.grad_sample import GradSampleModule, register_grad_sampler

    if ClsPos not in GradSampleModule.GRAD_SAMPLERS:
        register_grad_sampler(ClsPos)(_clspos_grad_sample)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).reshape(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # (B, h, T, D/h)
        return self.proj(a.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int = 2):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp * dim), nn.GELU(), nn.Linear(mlp * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class ClsTokenFeatures:
    """Features of a token model with ``_tokens``, ``blocks`` and a final ``norm``."""

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        t = self._tokens(x)
        for b in self.blocks:
            t = b(t)
        return self.norm(t)[:, 0]

    def layer_features(self, x: torch.Tensor) -> list[torch.Tensor]:
        out, t = [x.flatten(1)], self._tokens(x)
        for i, b in enumerate(self.blocks):
            t = b(t)
            last = i == len(self.blocks) - 1
            out.append((self.norm(t) if last else t)[:, 0])  # CLS token, (B, D)
        return out


class SmallViT(ClsTokenFeatures, nn.Module):
    """Patch embedding, `depth` pre-norm blocks, final LayerNorm; features = CLS token."""

    def __init__(self, channels: int = 1, size: int = 16, dim: int = 64, depth: int = 4, heads: int = 4):
        super().__init__()
        p = max(1, size // GRID)
        self.patch = nn.Conv2d(channels, dim, p, stride=p)
        tokens = (size // p) ** 2
        self.clspos = ClsPos(tokens, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.feature_dim = dim

    def _tokens(self, x: torch.Tensor) -> torch.Tensor:
        return self.clspos(self.patch(x).flatten(2).transpose(1, 2))  # (B, T+1, D)



def build_vit(*, channels: int, size: int, weights=None) -> SmallViT:
    return SmallViT(channels, size)
