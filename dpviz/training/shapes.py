"""Fixed physical batch shapes under Poisson sampling: padded rows, masked out exactly.

Poisson sampling draws a new batch size B ~ Binomial(n, q) at almost every step. On a GPU every new input
shape costs a convolution plan (cuDNN ≥ 9.10 builds one per shape, about 1.5 s for a depthwise layer), so a
run of new sizes is slower than a CPU. As jax_privacy does (its `pad_to_multiple_of` and
``is_padding_example``), a step's sampled batch is padded to one of a few physical sizes fixed for the
phase; the padded rows are copies of a real row whose loss weight is 0, so their output gradient, their
per-sample gradient and their clip factor are exactly 0 (`dpviz.privacy.dpsgd` masks the clip factors and
every statistic too). The sampling, the sensitivity C and the accountant are those of the unpadded step.

How the sizes are chosen (`physical_sizes`): the largest is the Binomial(n, q) quantile 1 − 10⁻⁶ rounded up
to a multiple of 8; the ``count`` sizes are spaced evenly below it, down to the 10⁻⁶ quantile. A batch pads
to the smallest size that holds it. A batch above the largest size (probability ≤ 10⁻⁶ a step) is split
into chunks of the largest size and a remainder, each padded, whose clipped sums add up: nothing is ever
dropped or truncated, so the Poisson accounting holds as it is.

Passes that only read the model (evaluation, features) run in chunks of the phase's largest size
(`pass_chunk`), the last one padded, so that they reuse the training step's convolution plans: a run of one
size meets one shape. Under `MIN_PASS_CHUNK` rows they use `PASS_CHUNK`, and a run meets at most ``count``
training shapes and one pass shape (`stated_shapes`).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

QUANTILE = 1e-6  # the tail left outside the sizes (split, never dropped, beyond the top)
ROUND_TO = 8  # physical sizes are multiples of 8 (tensor-core tiles)
PASS_CHUNK = 256  # rows per chunk of a read-only pass when the training sizes are too small to reuse
MIN_PASS_CHUNK = 32  # below this largest training size, passes use PASS_CHUNK (many tiny chunks are slow)
AUTO_COUNT = {"cuda": 1}  # batch_shapes -1: sizes per device (absent: the exact Poisson sizes)
"""On a GPU one size: every new shape costs a plan of seconds there, padding costs milliseconds. On a CPU
no plan is built and a padded row costs as much as a real one, so the drawn sizes run as they are
(`bench/bench_dp_step.py --shapes` measures both)."""


def shape_count(batch_shapes: int, device: str) -> int:
    """Physical sizes a phase uses: ``batch_shapes`` when ≥ 1, 0 (the exact drawn sizes) for 0, and per
    device (`AUTO_COUNT`) for -1."""
    if batch_shapes >= 0:
        return batch_shapes
    return AUTO_COUNT.get(torch.device(device).type, 0)


def _binom_quantiles(n: int, q: float) -> tuple[int, int]:
    """The Binomial(n, q) quantiles QUANTILE and 1 − QUANTILE (scipy.stats' ``binom.ppf``, from scipy.special's
    functions as scipy.stats computes it: a fraction of scipy.stats' import time)."""
    return _binom_ppf(QUANTILE, n, q), _binom_ppf(1 - QUANTILE, n, q)


def _binom_ppf(u: float, n: int, q: float) -> int:
    """The smallest k with P(Binomial(n, q) ≤ k) ≥ u."""
    from scipy.special import bdtr, bdtrik

    if q <= 0.0:
        return 0
    if q >= 1.0:
        return n
    k = math.ceil(float(bdtrik(u, n, q)))
    below = max(k - 1, 0)
    return below if bdtr(below, n, q) >= u else min(k, n)


def physical_sizes(n: int, q: float, count: int) -> tuple[int, ...]:
    """``count`` physical batch sizes for Poisson sampling of ``n`` records at rate ``q``, ascending.

    Example: n = 1000, q = 0.064 (B ≈ 64), count 1 → (104,); count 4 → (32, 56, 80, 104).
    """
    if count < 1:
        raise ValueError("count must be ≥ 1")
    lo, hi = _binom_quantiles(n, min(max(q, 0.0), 1.0))
    top = max(ROUND_TO, math.ceil(max(hi, 1) / ROUND_TO) * ROUND_TO)
    gap = math.ceil((top - lo) / count / ROUND_TO) * ROUND_TO if count > 1 else top
    return tuple(sorted({s for s in (top - i * gap for i in range(count)) if s > 0}))


class Padder:
    """Splits a step's sampled indices into padded physical batches of a phase's fixed sizes."""

    def __init__(self, sizes: tuple[int, ...]):
        self.sizes = tuple(sorted(sizes))

    def split(self, idx: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """[(indices (P,), mask (P,) bool)] for the sampled indices ``idx`` (b,): each P one of the sizes,
        the masks' True entries the b real rows, each exactly once. Padded rows repeat the chunk's first
        index (row 0 of the data for an empty batch): real rows, so their forward stays finite."""
        top, parts, start = self.sizes[-1], [], 0
        while len(idx) - start > top:  # beyond the largest size: whole chunks of it, then the remainder
            parts.append(idx[start:start + top])
            start += top
        parts.append(idx[start:])
        return [self._pad(p) for p in parts]

    def _pad(self, part: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        size = next(s for s in self.sizes if s >= len(part))
        fill = part[:1] if len(part) else torch.zeros(1, dtype=part.dtype, device=part.device)
        padded = torch.cat([part, fill.expand(size - len(part))])
        mask = torch.arange(size, device=part.device) < len(part)
        return padded, mask


def padder(n: int, q: float, count: int) -> Padder | None:
    """The phase's `Padder` (None: ``count`` 0, the exact drawn sizes)."""
    return Padder(physical_sizes(n, q, count)) if count >= 1 else None


def pass_chunk(n: int, q: float, count: int) -> int:
    """Rows per chunk of a read-only pass under ``count`` fixed sizes (0: the drawn sizes, passes unpadded): the
    largest physical size, whose forward plans the training steps have built, or `PASS_CHUNK` below
    `MIN_PASS_CHUNK`.

    Example: n = 1000, q = 0.064, count 1 → 104 (the one training size); q = 0.004 → 256.
    """
    if count < 1:
        return 0
    top = physical_sizes(n, q, count)[-1]
    return top if top >= MIN_PASS_CHUNK else PASS_CHUNK


def stated_shapes(count: int) -> int:
    """The most distinct batch sizes a run of fixed shapes feeds its model: ``count`` training sizes per
    phase's (n, q), plus the passes' one chunk size."""
    return count + 1


def chunked(fn: Callable, x: torch.Tensor, *, device, fixed: int, size: int = 512,
            on_chunk: Callable[[int, int], None] | None = None, order: torch.Tensor | None = None):
    """``fn`` over ``x`` in chunks moved to ``device``: of ``size`` rows, or with ``fixed`` > 0 of ``fixed`` rows
    (`pass_chunk`), the last one padded with copies of its first row and the padded outputs cut off. Returns
    the list of the chunks' outputs (each a tensor or a list of tensors, with the chunk's real rows only).
    ``on_chunk(done, total)`` is called after each chunk (rows done of all).

    ``order`` (a permutation of the rows, e.g. texts by length, so that each chunk is cut to a short longest
    text): the rows are passed in that order and the one returned output is back in the rows' own order.
    """
    if order is not None:
        parts = chunked(fn, x[order], device=device, fixed=fixed, size=size, on_chunk=on_chunk)
        back = torch.empty_like(order)
        back[order] = torch.arange(len(order), device=order.device)  # sorted position of each row

        def merged(pieces):  # the chunks' outputs, (n, ...) in the rows' own order
            return torch.cat(pieces)[back.to(pieces[0].device)]
        if isinstance(parts[0], (list, tuple)):
            return [[merged([p[i] for p in parts]) for i in range(len(parts[0]))]]
        return [merged(parts)]
    size = fixed or size
    out = []
    for i in range(0, len(x), size):
        xc = x[i:i + size]
        real = len(xc)
        if fixed and real < size:
            xc = torch.cat([xc, xc[:1].expand(size - real, *xc.shape[1:])])
        r = fn(xc.to(device))
        out.append([t[:real] for t in r] if isinstance(r, (list, tuple)) else r[:real])
        if on_chunk is not None:
            on_chunk(i + real, len(x))
    return out
