"""Book-keeping DP-SGD (Bu et al., "Differentially private optimization on large
model at small cost", 2023): per-sample gradient norms and the clipped
gradient sum from one forward and one backward pass.

Forward hooks keep each trainable layer's input a and output y. One
``autograd.grad(loss, outputs)`` returns the per-sample output gradients g
without computing any weight gradient. From (a, g) each layer gives its
per-sample squared norm, either directly from the per-sample gradient
(B·d_in·d_out floats) or by the ghost-norm identity
‖g_iᵀa_i‖² = ⟨a_i a_iᵀ, g_i g_iᵀ⟩ (B·2T² floats), whichever materialises
less (measured: memory traffic, not flops, decides on a CPU); then the clipped sum Σ_i c_i g_iᵀ a_i is one ordinary weight-gradient
product with g scaled by the clip factors c.

Supported layers: Linear (any leading dims), Conv2d (groups = 1), GroupNorm,
LayerNorm and the ViT's `ClsPos`; `supports(model)` tells whether a model
only has those among its trainable layers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.graph import get_gradient_edge

from ..models.vit import ClsPos

class RowDelta(nn.Module):
    """A frozen Conv2d/Linear ``base`` whose selected output ``rows`` train through ``delta`` (k, …).

    The forward runs one layer with W₀ + scatter(rows, Δ) (the same cost as the dense layer); book-keeping
    then needs only the selected rows' output gradients (B, k, …) for per-sample norms and the clipped sum,
    so the per-sample work scales with k ("row grouping", seed 003). ``base.bias`` may train too.
    """

    def __init__(self, base: nn.Module, rows: torch.Tensor):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.conv = isinstance(base, nn.Conv2d)
        self.register_buffer("rows", rows.to(base.weight.device))
        self.delta = nn.Parameter(torch.zeros((len(rows), *base.weight.shape[1:]), device=base.weight.device,
                                              dtype=base.weight.dtype))

    def weight(self) -> torch.Tensor:
        return self.base.weight.index_add(0, self.rows, self.delta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.base
        if self.conv:
            return F.conv2d(x, self.weight(), b.bias, b.stride, b.padding, b.dilation, b.groups)
        return F.linear(x, self.weight(), b.bias)


SUPPORTED = (nn.Linear, nn.Conv2d, nn.GroupNorm, nn.LayerNorm, ClsPos, RowDelta)


def _trainable_layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if any(p.requires_grad for p in m.parameters(recurse=False))]


def supports(model: nn.Module) -> bool:
    """True when every layer with trainable parameters has a rule here."""
    return all(isinstance(m, SUPPORTED) and not (isinstance(m, nn.Conv2d) and m.groups != 1)
               for m in _trainable_layers(model))


def _unfold(layer: nn.Conv2d, a: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, L, C·kh·kw) patches, L output positions.

    A 1×1 convolution without padding needs no copy (its patches are the strided pixels). Otherwise the
    batch is folded into the channels, (1, B·C, H, W): the same patches in one im2col launch, where
    PyTorch's CUDA im2col launches one kernel per example.
    """
    B, C = a.shape[:2]
    if layer.kernel_size == (1, 1) and layer.padding == (0, 0):
        return a[:, :, ::layer.stride[0], ::layer.stride[1]].flatten(2).transpose(1, 2)
    p = F.unfold(a.reshape(1, B * C, *a.shape[2:]), layer.kernel_size, layer.dilation, layer.padding, layer.stride)
    return p.reshape(B, C * layer.kernel_size[0] * layer.kernel_size[1], -1).transpose(1, 2)


def _sq_rows(x: torch.Tensor) -> torch.Tensor:
    """Σ_j x_ij² of a (B, n) matrix as one batched product (one launch; pow + sum are two)."""
    return torch.bmm(x.unsqueeze(1), x.unsqueeze(2)).view(-1)


def _matrix_norm2(a: torch.Tensor, g: torch.Tensor):
    """Per-sample ‖g_iᵀ a_i‖_F² for a (B, T, din), g (B, T, dout), by the cheaper route.

    Returns:
        the (B,) squared norms, and the per-sample gradients (B, dout, din) when
        they were formed (the direct route), so the clipped sum reuses them.
    """
    T, din, dout = a.shape[1], a.shape[2], g.shape[2]
    if 2 * T * T < din * dout:  # memory traffic decides on CPU: B·2T² vs B·din·dout floats
        B = a.shape[0]  # ⟨a aᵀ, g gᵀ⟩ per sample
        return torch.bmm((a @ a.transpose(1, 2)).view(B, 1, -1), (g @ g.transpose(1, 2)).view(B, -1, 1)).view(-1), None
    ps = g.transpose(1, 2) @ a  # (B, dout, din)
    return _sq_rows(ps.flatten(1)), ps


GROUPED_MAX = 512  # out × in channels below which per-sample conv grads come from one grouped conv


def _conv_norm2(layer: nn.Conv2d, a: torch.Tensor, g: torch.Tensor):
    """Per-sample squared norms (B,) of a conv's weight gradient, and per-sample grads when formed.

    g: (B, k, H', W') output grads (k may be a subset of the layer's filters). Narrow layers get their
    per-sample grads (B, k, C·kh·kw) from one convolution with the batch as groups, which never forms the
    (B, L, C·kh·kw) patch matrix (measured: 2–4× faster there); wide ones use patches and `_matrix_norm2`.
    """
    B, C = a.shape[:2]
    k = g.shape[1]
    if k * C < GROUPED_MAX:
        ps = torch.nn.grad.conv2d_weight(a.reshape(1, B * C, *a.shape[2:]), (B * k, C, *layer.kernel_size),
                                         g.reshape(1, B * k, *g.shape[2:]), layer.stride, layer.padding,
                                         layer.dilation, groups=B).reshape(B, k, -1)
        return _sq_rows(ps.flatten(1)), ps
    return _matrix_norm2(_unfold(layer, a), g.flatten(2).transpose(1, 2))


def _normalized(layer, a: torch.Tensor) -> torch.Tensor:
    if isinstance(layer, nn.GroupNorm):
        return F.group_norm(a, layer.num_groups, eps=layer.eps)
    return F.layer_norm(a, layer.normalized_shape, eps=layer.eps)


def _per_sample_affine(layer, a, g, y=None):
    """Per-sample grads of a norm layer's (weight, bias): each (B, C).

    The normalised input x̂ is read back from the output y = w·x̂ + b when every
    |w| is safely away from 0 (no second normalisation pass), else recomputed. The hooks keep y on a
    CPU only: on a GPU the check would be a host sync, and recomputing is one kernel like reading back.
    """
    w = layer.weight
    if y is not None and bool((w.abs() > 1e-3).all()):
        shape = (1, -1) + (1,) * (a.dim() - 2) if isinstance(layer, nn.GroupNorm) else w.shape
        xh = (y.detach() - layer.bias.reshape(shape)) / w.reshape(shape)
    else:
        xh = _normalized(layer, a)
    if isinstance(layer, nn.GroupNorm):  # channels on dim 1
        dims = tuple(range(2, a.dim()))
        return (g * xh).sum(dims), g.sum(dims)
    dims = tuple(range(1, a.dim() - len(layer.normalized_shape)))  # () for (B, C) inputs: nothing to sum
    gw, gb = ((g * xh).sum(dims), g.sum(dims)) if dims else (g * xh, g)
    return gw.flatten(1), gb.flatten(1)


class BookKeeper:
    """Captures layer inputs and output gradient edges of ``model`` while active.

    The hooks keep each layer's input and the autograd edge of its output (`get_gradient_edge`), not the
    output itself: outputs that autograd does not save stay freeable, and an in-place op after a layer
    (ReLU(inplace=True)) cannot change which gradient is asked for. Norm layers also keep their output
    on a CPU, where reading x̂ back from it beats a second normalisation (`_per_sample_affine`).
    """

    def __init__(self, model: nn.Module):
        self.layers = _trainable_layers(model)
        self.cache: dict[nn.Module, tuple] = {}
        self.handles = [m.register_forward_hook(self._hook) for m in self.layers]

    def _hook(self, module, inputs, output):
        if torch.is_grad_enabled() and module.training and output.requires_grad:
            keep = None
            if isinstance(module, (nn.GroupNorm, nn.LayerNorm)) and not output.is_cuda:
                keep = (output, output._version)  # an in-place op after the layer would change y: then recompute
            self.cache[module] = (inputs[0].detach(), get_gradient_edge(output), output.shape, keep)

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.cache.clear()

    def clipped_step(self, loss_sum: torch.Tensor, clip_norm: float,
                     clipping: str = "abadi") -> tuple[torch.Tensor, torch.Tensor]:
        """Set ``p.grad`` = Σ_i min(1, C/‖g_i‖)·g_i for every trainable parameter.

        Returns:
            per-sample gradient norms (B,) and clip factors (B,).
        """
        layers = [m for m in self.layers if m in self.cache]
        cache, self.cache = self.cache, {}
        grads = list(torch.autograd.grad(loss_sum, [cache[m][1] for m in layers], allow_unused=True))
        n2s, prepared = [], []
        for i, m in enumerate(layers):
            a, _, shape, keep = cache.pop(m)
            y = keep[0] if keep is not None and keep[0]._version == keep[1] else None
            g = grads[i] if grads[i] is not None else a.new_zeros(shape)
            grads[i] = None  # each layer's g lives on only in what `_accumulate` needs
            n2, state = self._norm2(m, a, g, y)
            n2s += [n2] if torch.is_tensor(n2) else []
            prepared.append((m, state))
        norms = torch.stack(n2s).sum(0).sqrt()  # one sum over layers, not one add each
        factor = clip_factors(norms, clip_norm, clipping)
        for m, state in prepared:
            self._accumulate(m, state, factor)
        return norms, factor

    def _norm2(self, m, a, g, y=None):
        """Per-sample squared norm over the layer's trainable params, and what `_accumulate` needs."""
        if isinstance(m, nn.Linear):
            a3, g3 = a.reshape(a.shape[0], -1, a.shape[-1]), g.reshape(g.shape[0], -1, g.shape[-1])
            n2, ps = _matrix_norm2(a3, g3) if m.weight.requires_grad else (0, None)
            gb = g3.sum(1) if m.bias is not None and m.bias.requires_grad else None  # (B, out)
            return (n2 + _sq_rows(gb) if gb is not None else n2), (a3, g3, ps, gb)
        if isinstance(m, RowDelta):
            if m.conv:  # output grads of the selected rows only: (B, k, H', W') / (…, k)
                gr = g.index_select(1, m.rows)
            else:  # a 2-D gather is ≈ 4× faster than index_select on the last of 3 dims
                gr = g.reshape(-1, g.shape[-1]).index_select(1, m.rows).reshape(*g.shape[:-1], len(m.rows))
            if m.conv:
                n2, ps = _conv_norm2(m.base, a, gr)
            else:
                a3, g3 = a.reshape(a.shape[0], -1, a.shape[-1]), gr.reshape(gr.shape[0], -1, gr.shape[-1])
                n2, ps = _matrix_norm2(a3, g3)
            b, gb = m.base.bias, None
            if b is not None and b.requires_grad:
                gb = g.flatten(2).sum(2) if m.conv else g.reshape(g.shape[0], -1, g.shape[-1]).sum(1)  # (B, out)
                n2 = n2 + _sq_rows(gb)
            return n2, (a, gr, ps, gb)
        if isinstance(m, nn.Conv2d):
            n2, ps = _conv_norm2(m, a, g) if m.weight.requires_grad else (0, None)
            gb = g.flatten(2).sum(2) if m.bias is not None and m.bias.requires_grad else None  # (B, out)
            return (n2 + _sq_rows(gb) if gb is not None else n2), (a, g, ps, gb)
        if isinstance(m, ClsPos):
            gc, gp = g[:, :1], g
            return gc.pow(2).sum((1, 2)) * m.cls.requires_grad + gp.pow(2).sum((1, 2)) * m.pos.requires_grad, g
        gw, gb = _per_sample_affine(m, a, g, y)  # GroupNorm / LayerNorm
        parts = [t for t, p in ((gw, m.weight), (gb, m.bias)) if p.requires_grad]
        return _sq_rows(torch.cat(parts, 1) if len(parts) > 1 else parts[0]), (gw, gb)

    @staticmethod
    def _accumulate(m, state, c: torch.Tensor) -> None:
        if isinstance(m, nn.Linear):
            a3, g3, ps, gb = state
            cc = c[:, None, None]
            if ps is not None:  # per-sample grads at hand: Σ_i c_i G_i
                m.weight.grad = torch.einsum("b,boi->oi", c, ps)
            elif m.weight.requires_grad:  # one (out, B·T)·(B·T, in) GEMM; scale the narrower side
                gs, as_ = (g3 * cc, a3) if g3.shape[-1] <= a3.shape[-1] else (g3, a3 * cc)
                m.weight.grad = gs.reshape(-1, gs.shape[-1]).T @ as_.reshape(-1, as_.shape[-1])
            if gb is not None:  # per-sample bias grads (B, out), kept from the norm pass
                m.bias.grad = c @ gb
        elif isinstance(m, RowDelta):
            a, gr, ps, gb = state
            if ps is not None:
                m.delta.grad = torch.einsum("b,boi->oi", c, ps).reshape(m.delta.shape)
            elif m.conv:
                m.delta.grad = torch.nn.grad.conv2d_weight(a, m.delta.shape, gr * c[:, None, None, None],
                                                           m.base.stride, m.base.padding, m.base.dilation)
            else:
                g3 = gr.reshape(gr.shape[0], -1, gr.shape[-1]) * c[:, None, None]
                m.delta.grad = g3.reshape(-1, g3.shape[-1]).T @ a.reshape(-1, a.shape[-1])
            if gb is not None:  # per-sample bias grads (B, out), kept from the norm pass
                m.base.bias.grad = c @ gb
        elif isinstance(m, nn.Conv2d):
            a, g, ps, gb = state
            if ps is not None:
                m.weight.grad = torch.einsum("b,boi->oi", c, ps).reshape(m.weight.shape)
            elif m.weight.requires_grad:
                m.weight.grad = torch.nn.grad.conv2d_weight(a, m.weight.shape, g * c[:, None, None, None],
                                                            m.stride, m.padding, m.dilation)
            if gb is not None:
                m.bias.grad = c @ gb
        elif isinstance(m, ClsPos):
            gc = state * c[:, None, None]
            m.cls.grad, m.pos.grad = gc[:, :1].sum(0, keepdim=True), gc.sum(0, keepdim=True)
        else:
            gw, gb = state
            m.weight.grad = (c @ gw).reshape(m.weight.shape)
            m.bias.grad = (c @ gb).reshape(m.bias.shape)


AUTO_S_GAMMA = 0.01


def clip_factors(norms: torch.Tensor, clip_norm: float, clipping: str = "abadi") -> torch.Tensor:
    """Per-sample scale c_i (B,): Abadi min(1, C/‖g_i‖), or AUTO-S C/(‖g_i‖ + γ) with γ = 0.01.

    Both keep ‖c_i g_i‖ ≤ C, so the noise std σ·C gives the same guarantee; AUTO-S rescales every
    gradient (no threshold to tune: C only sets the step size, seed 004's automatic clipping).
    """
    if clipping == "auto-s":
        return clip_norm / (norms + AUTO_S_GAMMA)
    return (clip_norm / (norms + 1e-6)).clamp(max=1.0)
