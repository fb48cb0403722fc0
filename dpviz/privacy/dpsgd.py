"""One DP-SGD step: per-sample gradients, clipping, Gaussian noise.

The clipping and noise are done here rather than by Opacus's optimizer so that
a multi-phase run keeps one noise generator and one accounting history, and so
each step can report the clipped fraction and the mean per-sample norm.
Per-sample norms come from book-keeping (`bk`) or Opacus's `GradSampleModule`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dpviz.privacy import bk
from dpviz.privacy import clipping as clip  # module, not the `clipping` arguments below
from dpviz.privacy import precision as prec


@dataclass(kw_only=True)
class StepStats:
    """What one step reports (fields by keyword only). Norm statistics are None for non-private steps."""

    loss: float
    train_accuracy: float
    batch_size: int
    clip_fraction: float | None = None
    grad_norm: float | None = None
    clip_fraction_dp: float | None = None  # the noisy clipped count over q·n (``count_noise`` > 0): inside ε


def _trainable(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


class Stepper:
    """Per-sample clipping for the trainable parameters of ``module``.

    ``mode`` "bk" uses book-keeping (`bk.BookKeeper`: one backward, no
    per-sample gradient tensors); "hooks" uses Opacus's `GradSampleModule`,
    which handles any layer Opacus knows (slower, materialises (B, *shape)).
    ``precision`` (`dpviz.privacy.precision`): the forward and backward's arithmetic; book-keeping only
    (the norms and the clipped sum stay FP32). A lone head (LP on cached features) is FP32 whatever it is.
    """

    def __init__(self, module: nn.Module, mode: str = "auto", precision: str = "fp32"):
        if mode == "auto":
            mode = "bk" if bk.supports(module) else "hooks"
        if mode == "hooks" and precision != "fp32":
            from dpviz.errors import ConfigError
            raise ConfigError("precision", "fp32 here: mixed precision runs on book-keeping, and this model's "
                              f"per-sample gradients need Opacus's hooks ({'; '.join(bk.unsupported(module))})")
        if mode == "hooks" and any(isinstance(m, bk.RowDelta) for m in module.modules()):
            from dpviz.errors import ConfigError
            raise ConfigError("backbone", "a backbone whose trainable layers book-keeping supports "
                              "(Linear, Conv2d, GroupNorm, LayerNorm) for sparse fine-tuning")
        if mode == "bk" and type(module) is nn.Linear and module.bias is not None:
            mode = "head"  # a lone linear head (LP on cached features): closed form, no autograd
        self.mode, self.module, self.precision = mode, module, precision
        self.overflows = 0  # fp16: examples whose inf/NaN entries were set to 0, over all steps
        self.params = [p for p in module.parameters() if p.requires_grad]
        if mode == "head":
            self.forward = module
        elif mode == "bk":
            self.keeper = bk.BookKeeper(module, precision)
            self.forward = module
        else:
            from dpviz.runtime.imports import import_opacus

            GradSampleModule = import_opacus().GradSampleModule  # only here: the default path never needs it

            from dpviz.models.vit import register_with_opacus

            register_with_opacus()
            self.forward = GradSampleModule(module, batch_first=True, loss_reduction="sum")

    def clipped_sum(self, x: torch.Tensor, y: torch.Tensor, clip_norm: float, clipping: str = "abadi",
                    mask: torch.Tensor | None = None):
        """Set ``p.grad`` to Σ_i clip(g_i); return outputs, summed loss and per-sample norms.

        ``mask`` (B,) bool: the real rows of a padded batch (`dpviz.training.shapes`); the others have loss
        weight 0 (so a zero output gradient) and clip factor 0, and count in neither the loss nor the sum.
        """
        if self.mode == "head":
            return _head_clipped_sum(self.module, x, y, clip_norm, clipping, mask)
        with prec.autocast(self.precision, x.device.type):
            out = self.forward(x)
            loss_sum = _loss_sum(out, y, mask)  # autocast computes it in FP32
        if self.mode == "bk":
            scale = prec.loss_scale(self.precision)
            norms, _ = self.keeper.clipped_step(loss_sum * scale, clip_norm, clipping, batch_size=len(y),
                                                grad_scale=scale, mask=mask)
            self.overflows += self.keeper.overflowed
            return out, loss_sum, norms
        loss_sum.backward()
        B = len(y)
        gs = [p.grad_sample.reshape(B, -1) for p in self.params]  # each (B, numel)
        norms = torch.sqrt(sum(g.pow(2).sum(1) for g in gs))  # (B,)
        factor = clip.clip_factors(norms, clip_norm, clipping, mask)
        for p, g in zip(self.params, gs):
            p.grad = (factor @ g).reshape(p.shape)
            p.grad_sample = None
        return out, loss_sum, norms

    def close(self) -> nn.Module:
        """Remove hooks (between phases, whose trainable sets differ)."""
        if self.mode == "bk":
            self.keeper.close()
        elif self.mode == "hooks":
            self.forward._close()
        return self.module


def _loss_sum(out: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Σ_i CE(out_i, y_i) over the real rows (all of them without a ``mask``): padded rows weigh 0."""
    if mask is None:
        return F.cross_entropy(out, y, reduction="sum")
    return (F.cross_entropy(out, y, reduction="none") * mask).sum()


@torch.no_grad()
def _head_clipped_sum(head: nn.Linear, f: torch.Tensor, y: torch.Tensor, clip_norm: float, clipping: str = "abadi",
                      mask: torch.Tensor | None = None):
    """Clipped gradient sum of cross-entropy for a linear head, in closed form.

    For logits z_i = W f_i + b the per-sample gradients are g_i = (p_i − e_{y_i}) [f_i, 1]ᵀ,
    so ‖g_i‖ = ‖p_i − e_{y_i}‖·√(‖f_i‖² + 1) and Σ c_i g_i is one (K, B)·(B, d) product.
    """
    out = f @ head.weight.T + head.bias  # (B, K)
    logp = out.log_softmax(1)
    err = logp.exp()
    err[torch.arange(len(y)), y] -= 1  # p − onehot, (B, K)
    norms = err.norm(dim=1) * torch.sqrt(f.pow(2).sum(1) + 1)  # (B,)
    c = clip.clip_factors(norms, clip_norm, clipping, mask)
    ce = err * c[:, None]
    head.weight.grad, head.bias.grad = ce.T @ f, ce.sum(0)
    nll = -logp[torch.arange(len(y)), y]
    return out, (nll if mask is None else nll * mask).sum(), norms


def _parts(x, y, mask) -> list[tuple]:
    """A step's physical batches [(x, y, mask or None)]: one, or those of a split batch given as lists."""
    if isinstance(y, (list, tuple)):
        return list(zip(x, y, mask if mask is not None else [None] * len(y)))
    return [(x, y, mask)]


def _batch_sums(out, y, mask, loss_sum, norms=None, clip_norm=None) -> list[torch.Tensor]:
    """One physical batch's sums over its real rows: loss, correct, [clipped, Σ norms,] count."""
    right = out.argmax(1) == y
    sums = [loss_sum.detach(), (right if mask is None else right & mask).sum()]
    if norms is not None:
        over = norms > clip_norm
        sums += [(over if mask is None else over & mask).sum(), (norms if mask is None else norms * mask).sum()]
    return sums + [torch.tensor(len(y), device=y.device) if mask is None else mask.sum()]


def private_step(stepper: Stepper, x: torch.Tensor, y: torch.Tensor, *, clip_norm: float,
                 noise_multiplier: float, expected_batch: float, generator: torch.Generator,
                 clipping: str = "abadi", canaries=None, reduce=None, mask=None, correlate=None,
                 count_noise: float = 0.0) -> StepStats:
    """Set ``p.grad`` to the noisy mean of clipped per-sample gradients.

    grad = (Σ_i g_i · c_i + N(0, σ²C² I)) / (q·n), with c_i = min(1, C/‖g_i‖) (Abadi) or
    C/(‖g_i‖ + γ) (AUTO-S) and ‖g_i‖ the norm over all trainable parameters; dividing by the
    expected batch size q·n (not the sampled one) keeps the sensitivity at C under Poisson sampling.
    ``mask``: (B,) bool, the real rows of a padded batch (`dpviz.training.shapes`): padded rows add exactly
    nothing to the sum and to the statistics. ``x``, ``y`` and ``mask`` may be lists: the physical batches of
    one sampled batch split in several, whose clipped sums add up before the one noise draw.
    ``canaries``: an audit's white-box canaries (`dpviz.audit.canaries.GradientCanaries`), added to the
    clipped sum before the noise and scored on what the step releases.
    ``reduce``: a distributed run's in-place sum over ranks (`dpviz.training.distributed.World.all_reduce`), applied
    to this rank's clipped sums before the noise, which every rank then draws alike: it enters once.
    ``correlate``: BandMF's noise memory (`dpviz.privacy.bandmf.BandedNoise`), turning this step's fresh draws
    into its row of M⁻¹Z; None is DP-SGD's independent noise.
    ``count_noise``: σ_b > 0 also releases the count of clipped examples plus N(0, σ_b²), over q·n, as
    ``clip_fraction_dp`` (one draw after the gradient's; `dpviz.privacy.accounting.Phase.count_noise` accounts the
    pair, and ``noise_multiplier`` is then the gradient's own σ_g).
    """
    params, stats, total = stepper.params, None, None
    for xc, yc, mc in _parts(x, y, mask):
        for p in params:
            p.grad = None
        if len(yc) == 0:
            continue
        out, loss_sum, norms = stepper.clipped_sum(xc, yc, clip_norm, clipping, mc)
        sums = _batch_sums(out, yc, mc, loss_sum, norms, clip_norm)
        stats = sums if stats is None else [a + b for a, b in zip(stats, sums)]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        total = grads if total is None else torch._foreach_add(total, grads)  # a split batch: sums add up
    for i, p in enumerate(params):
        p.grad = total[i] if total is not None else torch.zeros_like(p)
    if reduce is not None:
        reduce([p.grad for p in params])
    if canaries is not None:
        canaries.add(params, clip_norm=clip_norm, clipping=clipping)
    noisy_mean(params, [p.grad for p in params], draw_noise(params, noise_multiplier * clip_norm, generator, correlate),
               expected_batch)
    if canaries is not None:
        canaries.observe(params, scale=expected_batch, noise_std=noise_multiplier * clip_norm,
                         clip_norm=clip_norm, clipping=clipping)
    device = params[0].device if params else _device(x)
    return released_stats(stats, device, count_noise=count_noise, generator=generator,
                          expected_batch=expected_batch, reduce=reduce)


def draw_noise(params, std: float, generator: torch.Generator, correlate=None) -> list[torch.Tensor]:
    """One step's noise, one draw per parameter (`gaussian_noise`), through BandMF's memory where ``correlate``."""
    noise = [gaussian_noise(p, std, generator) for p in params]
    return correlate(noise) if correlate is not None else noise


def noisy_mean(params, sums: list[torch.Tensor], noise: list[torch.Tensor], expected_batch: float) -> list:
    """Set each ``p.grad`` to (its clipped sum + its noise) / q·n, and return those gradients."""
    grads = torch._foreach_add(sums, noise)  # one launch for all, not two per tensor
    torch._foreach_div_(grads, expected_batch)
    for p, gr in zip(params, grads):
        p.grad = gr
    return grads


def released_stats(stats, device, *, count_noise: float, generator: torch.Generator, expected_batch: float,
                   reduce=None) -> StepStats:
    """`_step_stats` of the step's sums, and the noisy clipped count where ``count_noise`` > 0: one draw after the
    gradient's, which every rank makes alike, over q·n."""
    draw = gaussian_noise(torch.empty((), device=device), count_noise, generator) if count_noise else None
    st = _step_stats(stats, device, reduce)
    if draw is not None:  # the exact count (every rank's, summed) plus the draw
        st.clip_fraction_dp = (round((st.clip_fraction or 0.0) * st.batch_size) + float(draw)) / expected_batch
    return st


def _device(x) -> torch.device:
    return (x[0] if isinstance(x, (list, tuple)) else x).device


def _step_stats(stats: list[torch.Tensor] | None, device, reduce=None) -> StepStats:
    """StepStats from the step's sums (loss, correct, clipped, Σ norms, count; None for an empty batch): one
    host sync, read once the whole step is queued; ``reduce`` sums them over a distributed run's ranks first."""
    if stats is None and reduce is None:
        return StepStats(loss=0.0, train_accuracy=0.0, batch_size=0)
    sums = (torch.stack([t.to(torch.float64) for t in stats]) if stats is not None
            else torch.zeros(5, dtype=torch.float64, device=device))
    if reduce is not None:
        reduce([sums])
    loss_sum, correct, clipped, norm_sum, B = sums.tolist()
    B = int(B)
    if B == 0:
        return StepStats(loss=0.0, train_accuracy=0.0, batch_size=0)
    return StepStats(loss=loss_sum / B, train_accuracy=correct / B, batch_size=B, clip_fraction=clipped / B,
                     grad_norm=norm_sum / B)


def gaussian_noise(p: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
    """N(0, std² I) shaped like ``p``: the mechanism's noise (an audit test breaks it here on purpose).

    On a GPU one kernel draws and scales (the same float32 draws, one launch fewer per tensor).
    """
    if p.is_cuda:
        return torch.empty(p.shape, device=p.device).normal_(0.0, std, generator=generator)
    return torch.randn(p.shape, generator=generator, device=p.device) * std


def plain_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor, precision: str = "fp32", *,
               batch: int | None = None, reduce=None, mask=None) -> StepStats:
    """Non-private baseline: ordinary mean gradient over the sampled batch (in ``precision``; fp16 scales
    the loss, and a step whose gradient overflowed is skipped, as AMP's scaler does: no privacy to keep).

    A distributed run passes its global ``batch`` size (this rank holds a shard of it) and ``reduce``,
    which sums the ranks' gradients of (Σ_shard loss) / batch: the mean over the global batch.
    ``mask``, and ``x``, ``y`` as lists: padded and split physical batches, as in `private_step`.
    """
    params = _trainable(module)
    parts = _parts(x, y, mask)
    n = batch if batch is not None else sum(len(yc) if mc is None else int(mc.sum()) for _, yc, mc in parts)
    for p in params:
        p.grad = None
    stats = None
    for xc, yc, mc in parts:
        if len(yc) == 0 or n == 0:
            continue
        with prec.autocast(precision, xc.device.type):
            out = module(xc)
            loss_sum = _loss_sum(out, yc, mc)
        (loss_sum * (prec.loss_scale(precision) / n)).backward()  # the parts' gradients accumulate
        sums = _batch_sums(out, yc, mc, loss_sum)[:2]
        stats = sums if stats is None else [a + b for a, b in zip(stats, sums)]
    if n == 0:
        for p in params:
            p.grad = torch.zeros_like(p)
        return StepStats(loss=0.0, train_accuracy=0.0, batch_size=0)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    if reduce is not None:
        reduce(grads)
    scale = prec.loss_scale(precision)
    if scale != 1.0:
        torch._foreach_div_(grads, scale)
        if not all(torch.isfinite(g).all() for g in grads):
            for p in params:  # no gradient: the optimizer leaves every parameter (and its momentum) alone
                p.grad = None
    sums = (torch.stack([t.to(torch.float64) for t in stats]) if stats is not None
            else torch.zeros(2, dtype=torch.float64, device=grads[0].device if grads else _device(x)))
    if reduce is not None:
        reduce([sums])
    loss_sum, correct = sums.tolist()
    return StepStats(loss=loss_sum / n, train_accuracy=correct / n, batch_size=n)
