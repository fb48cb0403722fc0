"""Book-keeping DP-SGD (Bu et al., "Differentially private optimization on large
model at small cost", 2023): per-sample gradient norms and the clipped
gradient sum from one forward and one backward pass.

Forward hooks keep each trainable layer's input a and the autograd edge of its
output. One ``autograd.grad(loss, edges)`` returns the per-sample output
gradients g without computing any weight gradient (nor the first layer's input
gradient). From (a, g) each layer gives its per-sample squared norm, either
directly from the per-sample gradient (B·d_in·d_out floats) or by the
ghost-norm identity ‖g_iᵀa_i‖² = ⟨a_i a_iᵀ, g_i g_iᵀ⟩ (B·2T² floats), whichever
materialises less (memory traffic decides on a CPU; on a GPU the per-sample
route would also save the clipped-sum product, but holds its B·d_in·d_out
floats until the clip factors are known); then the clipped sum Σ_i c_i g_iᵀ a_i
is one ordinary weight-gradient product with g scaled by the clip factors c.
Small parameters (biases, norm affines) have explicit per-sample gradients,
normed and summed for all layers at once. On a GPU the step issues no host
sync (README, "DP step ÷ non-private step": where the time goes there).

Supported layers: Linear (any leading dims), Conv2d (groups = 1), GroupNorm,
LayerNorm and the ViT's `ClsPos`; `supports(model)` tells whether a model
only has those among its trainable layers.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.graph import get_gradient_edge

from ..models.vit import ClsPos

class RowDelta(nn.Module):
    """A frozen Conv2d/Linear ``base`` whose selected output ``rows`` train through ``delta`` (k, …).

    The forward runs one layer with W₀ + scatter(rows, Δ) (the same cost as the dense layer); book-keeping
    then needs only the selected rows' output gradients (B, k, …) for per-sample norms and the clipped sum,
    so the per-sample work scales with k ("row grouping", Makni et al. 2025). ``base.bias`` may train too.
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
        aa, gg = torch.bmm(a, a.transpose(1, 2)), torch.bmm(g, g.transpose(1, 2))
        return torch.bmm(aa.view(B, 1, -1), gg.view(B, -1, 1)).view(-1), None
    ps = torch.bmm(g.transpose(1, 2), a)  # (B, dout, din)
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


def _unchanged(keep):
    """The kept output y, unless an in-place op changed it since (then None: x̂ is recomputed)."""
    return keep[0] if keep is not None and keep[0]._version == keep[1] else None


class BookKeeper:
    """Captures layer inputs and output gradient edges of ``model`` while active.

    The hooks keep each layer's input and the autograd edge of its output (`get_gradient_edge`), not the
    output itself: outputs that autograd does not save stay freeable, and an in-place op after a layer
    (ReLU(inplace=True)) cannot change which gradient is asked for. A norm layer downstream of another
    trainable layer is reduced to its per-sample (B, 2C) gradients by a tensor hook as the backward passes
    it, so neither its input nor its output gradient outlives the backward (peak memory; on a GPU, see
    `early_on_cpu`). Norm layers also keep their output on a CPU, where reading x̂ back from it beats a
    second normalisation.
    """

    early_on_cpu = False  # on a CPU the early reduction made glibc return and re-fault memory every step
    # (measured on the built-in ViT: ≈ 5,600 page faults per step, none without it), and memory matters less

    def __init__(self, model: nn.Module):
        self.layers = _trainable_layers(model)
        self.cache: dict[nn.Module, tuple] = {}
        self.early: dict[nn.Module, list | None] = {}  # norm layers reduced in the backward (None: not yet)
        self.handles = [m.register_forward_hook(self._hook) for m in self.layers]

    def _hook(self, module, inputs, output):
        if not (torch.is_grad_enabled() and module.training and output.requires_grad):
            return
        a, keep = inputs[0].detach(), None
        if isinstance(module, (nn.GroupNorm, nn.LayerNorm)):
            if not output.is_cuda:  # y shares the version counter: an in-place op after the layer shows
                keep = (output.detach(), output._version)
            if inputs[0].requires_grad and (output.is_cuda or self.early_on_cpu):  # a trainable layer upstream:
                # the backward passes through here
                self.early[module] = None
                output.register_hook(partial(self._early_norm, module, a, keep))
                return
        self.cache[module] = (a, get_gradient_edge(output), output.shape, keep)

    def _early_norm(self, module, a, keep, g) -> None:
        self.early[module] = self._norm2(module, a, g, _unchanged(keep))[2]

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
        early, self.early = self.early, {}
        if None in early.values():
            raise RuntimeError("book-keeping: a norm layer's output gradient never arrived (an input that "
                               "requires grad, or a norm output that does not reach the loss)")
        n2s, prepared, blocks = [], [], [(p, v) for vecs in early.values() for p, v in vecs if p.requires_grad]
        for i, m in enumerate(layers):
            a, _, shape, keep = cache.pop(m)
            g = grads[i] if grads[i] is not None else a.new_zeros(shape)
            grads[i] = None  # each layer's g lives on only in what `_accumulate` needs
            n2, state, vecs = self._norm2(m, a, g, _unchanged(keep))
            n2s += [n2] if n2 is not None else []
            prepared += [(m, state)] if state is not None else []
            blocks += [(p, v) for p, v in vecs if p.requires_grad]
        vec = torch.cat([v for _, v in blocks], 1) if blocks else None  # (B, Σ n): every small parameter at once
        norms = torch.stack(n2s + ([_sq_rows(vec)] if blocks else [])).sum(0).sqrt()
        factor = clip_factors(norms, clip_norm, clipping)
        for m, state in prepared:
            self._accumulate(m, state, factor)
        if blocks:  # Σ_i c_i v_i for all of them in one product
            for (p, _), s in zip(blocks, (factor @ vec).split([v.shape[1] for _, v in blocks])):
                p.grad = s.view(p.shape)
        return norms, factor

    def _norm2(self, m, a, g, y=None):
        """Per-sample squared norm of the layer's weight matrix (or None), what `_accumulate` needs for it,
        and the per-sample gradients (B, n) of its small parameters (biases, norm affines, ClsPos) as
        (parameter, tensor) pairs: those are normed and summed for all layers at once."""
        if isinstance(m, nn.Linear):
            a3, g3 = a.reshape(a.shape[0], -1, a.shape[-1]), g.reshape(g.shape[0], -1, g.shape[-1])
            n2, ps = _matrix_norm2(a3, g3) if m.weight.requires_grad else (None, None)
            vecs = [(m.bias, g3.sum(1))] if m.bias is not None and m.bias.requires_grad else []
            return n2, (a3, g3, ps) if n2 is not None else None, vecs
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
            b, vecs = m.base.bias, []
            if b is not None and b.requires_grad:
                vecs = [(b, g.flatten(2).sum(2) if m.conv else g.reshape(g.shape[0], -1, g.shape[-1]).sum(1))]
            return n2, (a, gr, ps), vecs
        if isinstance(m, nn.Conv2d):
            n2, ps = _conv_norm2(m, a, g) if m.weight.requires_grad else (None, None)
            vecs = [(m.bias, g.flatten(2).sum(2))] if m.bias is not None and m.bias.requires_grad else []
            return n2, (a, g, ps) if n2 is not None else None, vecs
        if isinstance(m, ClsPos):
            return None, None, [(m.cls, g[:, 0]), (m.pos, g.flatten(1))]
        gw, gb = _per_sample_affine(m, a, g, y)  # GroupNorm / LayerNorm
        return None, None, [(m.weight, gw), (m.bias, gb)]

    @staticmethod
    def _accumulate(m, state, c: torch.Tensor) -> None:
        """Σ_i c_i ∂ℓ_i/∂W for the layer's weight matrix (biases and the like: in `clipped_step`)."""
        if isinstance(m, nn.Linear):
            a3, g3, ps = state
            if ps is not None:  # per-sample grads at hand: Σ_i c_i G_i
                m.weight.grad = torch.einsum("b,boi->oi", c, ps)
            else:  # one (out, B·T)·(B·T, in) GEMM; scale the narrower side
                cc = c.view(-1, 1, 1)
                gs, as_ = (g3 * cc, a3) if g3.shape[-1] <= a3.shape[-1] else (g3, a3 * cc)
                m.weight.grad = gs.reshape(-1, gs.shape[-1]).T @ as_.reshape(-1, as_.shape[-1])
        elif isinstance(m, RowDelta):
            a, gr, ps = state
            if ps is not None:
                m.delta.grad = torch.einsum("b,boi->oi", c, ps).reshape(m.delta.shape)
            elif m.conv:
                m.delta.grad = torch.nn.grad.conv2d_weight(a, m.delta.shape, gr * c.view(-1, 1, 1, 1),
                                                           m.base.stride, m.base.padding, m.base.dilation)
            else:
                g3 = gr.reshape(gr.shape[0], -1, gr.shape[-1]) * c.view(-1, 1, 1)
                m.delta.grad = g3.reshape(-1, g3.shape[-1]).T @ a.reshape(-1, a.shape[-1])
        else:  # Conv2d
            a, g, ps = state
            if ps is not None:
                m.weight.grad = torch.einsum("b,boi->oi", c, ps).reshape(m.weight.shape)
            else:
                m.weight.grad = torch.nn.grad.conv2d_weight(a, m.weight.shape, g * c.view(-1, 1, 1, 1),
                                                            m.stride, m.padding, m.dilation)


AUTO_S_GAMMA = 0.01


def clip_factors(norms: torch.Tensor, clip_norm: float, clipping: str = "abadi") -> torch.Tensor:
    """Per-sample scale c_i (B,): Abadi min(1, C/‖g_i‖), or AUTO-S C/(‖g_i‖ + γ) with γ = 0.01.

    Both keep ‖c_i g_i‖ ≤ C, so the noise std σ·C gives the same guarantee; AUTO-S rescales every
    gradient (no threshold to tune: C only sets the step size; automatic clipping as Bu et al. 2024 use it).
    """
    if clipping == "auto-s":
        return clip_norm / (norms + AUTO_S_GAMMA)
    return (clip_norm / (norms + 1e-6)).clamp(max=1.0)
