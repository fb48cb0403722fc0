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
The per-layer rules live in `bk_rules`.

Supported trainable layers: Linear (any leading dims), Conv2d (any groups: depthwise
convs by one convolution with the batch folded into the groups; timm's `Conv2dSame`,
whose input is padded as its forward pads it), Embedding (a ghost norm with a one-hot
a; ``padding_idx`` rows get no gradient; no ``max_norm`` nor ``scale_grad_by_freq``),
GroupNorm, LayerNorm, the ViT's `ClsPos` and `RowDelta` (over any Conv2d or Linear).
`supports(model)` tells whether a model only has those among its trainable layers
(`unsupported(model)` says why not).

Batch statistics mix the examples: a BatchNorm (timm's `BatchNormAct2d` is one) may only
be frozen, in eval mode with running statistics; one that trains, or uses batch
statistics while any other layer trains, makes `supports` False, and a keeper raises
in its forward rather than clip gradients that are not per-sample.

Every trainable layer's input must carry the batch on dim 0. A layer whose input is
broadcast over the batch (batch size 1 in a batch of B) has only the batch's summed
gradient, so `BookKeeper.clipped_step` raises for it. HF's BERT-family embeddings do
this with their default ``position_ids`` of shape (1, T): the model must be called
with ``position_ids`` expanded to (B, T) when the position table trains.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.autograd.graph import get_gradient_edge

from dpviz.models.rowdelta import RowDelta
from dpviz.models.vit import ClsPos
from dpviz.privacy import bk_rules as rules
from dpviz.privacy import clipping as clip  # module, not the `clipping` argument below
from dpviz.privacy import precision as prec

_unfold, _per_sample_affine = rules.unfold, rules.per_sample_affine  # the names they had here
SUPPORTED = (nn.Linear, nn.Conv2d, nn.Embedding, nn.GroupNorm, nn.LayerNorm, ClsPos, RowDelta)
LOW_GRAMS = {"cuda"}
"""Devices on which a bf16 run's Linear and Conv2d Grams take bf16 inputs with FP32 products and sums (cuBLAS's
``out_dtype``), instead of FP32 copies of the inputs multiplied without TF32: the same accuracy, on the bf16
tensor cores. A CPU has no such product, so it keeps the copies."""
_BN = nn.modules.batchnorm._BatchNorm  # BatchNorm1d/2d/3d, SyncBatchNorm, timm's BatchNormAct2d


def _trainable_layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if any(p.requires_grad for p in m.parameters(recurse=False))]


def _batch_stats(m: nn.Module) -> bool:
    """Whether a BatchNorm normalises by the batch's statistics (training mode, or no running ones)."""
    return m.training or m.running_mean is None


def _why_not(m: nn.Module, trains: bool, others_train: bool) -> str | None:
    """Why book-keeping cannot clip ``m``'s share of the per-sample gradients (None: it can)."""
    if isinstance(m, _BN):
        if trains:
            return "a BatchNorm with trainable parameters (batch statistics mix the examples): freeze it"
        if others_train and _batch_stats(m):
            return "a BatchNorm using batch statistics mixes the examples: put it in eval mode (running statistics)"
        return None
    if not trains:
        return None
    if not isinstance(m, SUPPORTED):
        return "no book-keeping rule for this layer type"
    if isinstance(m, nn.Conv2d):
        if type(m).forward is not nn.Conv2d.forward and not rules.is_tf_same(m):
            return "a Conv2d subclass with its own forward"
        if isinstance(m.padding, str) or m.padding_mode != "zeros":
            return "only numeric zero padding"
    if isinstance(m, nn.Embedding) and (m.max_norm is not None or m.scale_grad_by_freq):
        return "max_norm (renormalises the table in the forward) or scale_grad_by_freq (batch counts)"
    return None


def unsupported(model: nn.Module, modes: bool = True) -> list[str]:
    """One line per layer of ``model`` that book-keeping cannot clip per sample (empty: it can).

    Args:
        modes: also check the layers' current modes (a BatchNorm in training mode).
    """
    trains = {id(m) for m in _trainable_layers(model)}
    return [f"{name or '<root>'} ({type(m).__name__}): {why}" for name, m in model.named_modules()
            if (why := _why_not(m, id(m) in trains, modes and bool(trains)))]


def supports(model: nn.Module) -> bool:
    """True when every layer with trainable parameters has a rule here and no BatchNorm mixes the batch."""
    return not unsupported(model)


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
    second normalisation. Every BatchNorm gets a pre-hook that raises when it would use batch statistics.

    Raises:
        ValueError: ``model`` has a trainable layer without a rule here (`unsupported` lists them).
    """

    early_on_cpu = False  # on a CPU the early reduction made glibc return and re-fault memory every step
    # (measured on the built-in ViT: ≈ 5,600 page faults per step, none without it), and memory matters less

    def __init__(self, model: nn.Module, precision: str = "fp32"):
        self.precision = precision  # of the forward and backward; the per-sample math is FP32 (`precision`)
        self.overflowed = 0  # fp16: examples of the last step with an inf or NaN set to 0 (`precision.clean`)
        self._scale, self._bad = 1.0, None
        self.layers = _trainable_layers(model)
        bad = unsupported(model, modes=False)  # modes can change: BatchNorms are checked as they run
        if bad:
            raise ValueError(f"book-keeping cannot clip per sample: {'; '.join(bad)}")
        self.cache: dict[nn.Module, tuple] = {}
        self.early: dict[nn.Module, list | None] = {}  # norm layers reduced in the backward (None: not yet)
        self.handles = [m.register_forward_hook(self._hook) for m in self.layers]
        self.handles += [m.register_forward_pre_hook(self._bn_guard) for m in model.modules()
                         if isinstance(m, _BN) and self.layers]

    @staticmethod
    def _bn_guard(module, inputs):
        if torch.is_grad_enabled() and _batch_stats(module):
            raise RuntimeError(f"book-keeping: {module} normalises by batch statistics, which mix the examples "
                               "(their gradients would not be per-sample): keep every BatchNorm in eval mode, "
                               "with running statistics, while layers train privately")

    def _hook(self, module, inputs, output):
        if not (torch.is_grad_enabled() and module.training and output.requires_grad):
            return
        a, keep = inputs[0].detach(), None
        if rules.is_tf_same(module):  # the input its convolution sees: (B, C, H + pads, W + pads)
            a = rules.tf_same_pad(module, a)
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
        with prec.exact(self.precision):
            self.early[module] = self._norm2(*self._fp32(module, a, g, _unchanged(keep)))[2]

    def _fp32(self, m, a, g, y):
        """(m, a, g, y) with a, g and y in FP32, the loss scale out of g, non-finite entries 0 (fp16). A bf16 run's
        Linear and Conv2d layers keep a and g in bf16 where `LOW_GRAMS` names the device: their Grams multiply
        bf16 exactly and sum in FP32 (`bk_rules.gram`), the accuracy of FP32 on the upcast inputs."""
        if self.precision == "fp32":
            return m, a, g, y
        if self.precision == "bf16" and a.device.type in LOW_GRAMS and type(m) in (nn.Linear, nn.Conv2d):
            return m, a, g, y
        return (m, prec.clean(a, 1.0, self._bad), prec.clean(g, self._scale, self._bad),
                None if y is None else prec.clean(y, 1.0, self._bad))

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.cache.clear()

    def clipped_step(self, loss_sum: torch.Tensor, clip_norm: float, clipping: str = "abadi",
                     batch_size: int | None = None, grad_scale: float = 1.0,
                     mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Set ``p.grad`` = Σ_i min(1, C/‖g_i‖)·g_i for every trainable parameter.

        Args:
            batch_size: B (default: the largest dim 0 among the kept inputs); every kept input must have it.
            grad_scale: the factor ``loss_sum`` was multiplied by (fp16's loss scale), divided out of every
                output gradient before the norms.
            mask: (B,) bool, a padded batch's real rows (`dpviz.training.shapes`): a padded row's clip factor is 0.

        Returns:
            per-sample gradient norms (B,) and clip factors (B,).

        Raises:
            RuntimeError: a layer's input was broadcast over the batch (dim 0 of size 1 in a batch of B > 1),
                so the layer has no per-sample gradients (see the module docstring: BERT's position_ids).
        """
        layers = [m for m in self.layers if m in self.cache]
        cache, self.cache = self.cache, {}
        B = batch_size if batch_size is not None else max((cache[m][0].shape[0] for m in layers), default=None)
        for m in layers:
            if cache[m][0].shape[0] != B:
                self.early.clear()
                raise RuntimeError(
                    f"book-keeping: the input of {m} has {cache[m][0].shape[0]} rows on dim 0 in a batch of {B}: "
                    "a layer whose input is broadcast over the batch has only the summed gradient, no per-sample "
                    "ones" + (" (HF BERT-family models pass position_ids of shape (1, T): call the model with "
                              "position_ids expanded to (B, T))" if isinstance(m, nn.Embedding) else ""))
        self._scale = grad_scale
        self._bad = torch.zeros(B, dtype=torch.bool, device=loss_sum.device) if self.precision == "fp16" else None
        grads = list(torch.autograd.grad(loss_sum, [cache[m][1] for m in layers], allow_unused=True))
        # Below, nothing may record autograd history: a norm layer's per-sample vectors are computed from
        # its trainable affine, and a p.grad with a graph would reach the parameter's own AccumulateGrad,
        # a cycle through C++ that Python's gc cannot see (each run's model and activations leaked).
        with torch.no_grad(), prec.exact(self.precision):
            early, self.early = self.early, {}
            if None in early.values():
                raise RuntimeError("book-keeping: a norm layer's output gradient never arrived (an input that "
                                   "requires grad, or a norm output that does not reach the loss)")
            n2s, prepared, blocks = [], [], [(p, v) for vecs in early.values() for p, v in vecs if p.requires_grad]
            for i, m in enumerate(layers):
                a, _, shape, keep = cache.pop(m)
                g = grads[i] if grads[i] is not None else a.new_zeros(shape)
                grads[i] = None  # each layer's g lives on only in what `_accumulate` needs
                n2, state, vecs = self._norm2(*self._fp32(m, a, g, _unchanged(keep)))
                n2s += [n2] if n2 is not None else []
                prepared += [(m, state)] if state is not None else []
                blocks += [(p, v) for p, v in vecs if p.requires_grad]
            if B is not None and any(v.shape[0] != B for _, v in blocks):
                raise RuntimeError(f"book-keeping: a norm layer's input is not a batch of {B} (broadcast over it?)")
            vec = torch.cat([v for _, v in blocks], 1) if blocks else None  # (B, Σ n): every small parameter at once
            norms = torch.stack(n2s + ([rules.sq_rows(vec)] if blocks else [])).sum(0).sqrt()
            self.overflowed = int(self._bad.sum()) if self._bad is not None else 0  # fp16 only: one sync
            factor = clip.clip_factors(norms, clip_norm, clipping, mask)
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
            n2, ps = rules.matrix_norm2(a3, g3) if m.weight.requires_grad else (None, None)
            vecs = [(m.bias, rules.wide(g3).sum(1))] if m.bias is not None and m.bias.requires_grad else []
            return n2, (a3, g3, ps) if n2 is not None else None, vecs
        if isinstance(m, RowDelta):
            if m.conv:  # output grads of the selected rows only: (B, k, H', W') / (…, k)
                gr = g.index_select(1, m.rows)
            else:  # a 2-D gather is ≈ 4× faster than index_select on the last of 3 dims
                gr = g.reshape(-1, g.shape[-1]).index_select(1, m.rows).reshape(*g.shape[:-1], len(m.rows))
            if m.conv:
                n2, ps = rules.conv_norm2(m.base, a, gr, m.rows)
            else:
                a3, g3 = a.reshape(a.shape[0], -1, a.shape[-1]), gr.reshape(gr.shape[0], -1, gr.shape[-1])
                n2, ps = rules.matrix_norm2(a3, g3)
            b, vecs = m.base.bias, []
            if b is not None and b.requires_grad:
                vecs = [(b, g.flatten(2).sum(2) if m.conv else g.reshape(g.shape[0], -1, g.shape[-1]).sum(1))]
            return n2, (a, gr, ps), vecs
        if isinstance(m, nn.Conv2d):
            n2, ps = rules.conv_norm2(m, a, g) if m.weight.requires_grad else (None, None)
            vecs = [(m.bias, rules.wide(g).flatten(2).sum(2))] if m.bias is not None and m.bias.requires_grad else []
            return n2, (a, g, ps) if n2 is not None else None, vecs
        if isinstance(m, nn.Embedding):  # a: the ids (B, *)
            return *rules.embedding_norm2(m, a, g), []
        if isinstance(m, ClsPos):
            return None, None, [(m.cls, g[:, 0]), (m.pos, g.flatten(1))]
        gw, gb = rules.per_sample_affine(m, a, g, y)  # GroupNorm / LayerNorm
        return None, None, [(m.weight, gw), (m.bias, gb)]

    @staticmethod
    def _accumulate(m, state, c: torch.Tensor) -> None:
        """Σ_i c_i ∂ℓ_i/∂W for the layer's weight matrix (biases and the like: in `clipped_step`)."""
        if isinstance(m, nn.Linear):
            a3, g3, ps = state
            if ps is not None:  # per-sample grads at hand: Σ_i c_i G_i
                m.weight.grad = torch.einsum("b,boi->oi", c, ps)
            else:  # one (out, B·T)·(B·T, in) GEMM in FP32; scale the narrower side
                cc = c.view(-1, 1, 1)
                gs, as_ = (g3 * cc, a3) if g3.shape[-1] <= a3.shape[-1] else (g3, a3 * cc)
                m.weight.grad = rules.wide(gs.reshape(-1, gs.shape[-1])).T @ rules.wide(as_.reshape(-1, as_.shape[-1]))
        elif isinstance(m, nn.Embedding):
            m.weight.grad = rules.embedding_sum(m, state, c)
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
        else:  # Conv2d (groups > 1: per-sample grads always formed)
            a, g, ps = state
            if ps is not None:
                m.weight.grad = torch.einsum("b,boi->oi", c, ps).reshape(m.weight.shape)
            else:
                m.weight.grad = torch.nn.grad.conv2d_weight(rules.wide(a), m.weight.shape, g * c.view(-1, 1, 1, 1),
                                                            m.stride, m.padding, m.dilation)
