"""Mixed precision for the DP step: what runs in low precision, and what never does.

``precision`` (a `RunConfig` field) picks the forward and backward's arithmetic:

    fp32   everything in FP32 (the default: the only choice measured everywhere so far).
    tf32   CUDA: matmuls and convolutions of the forward and backward in TF32; on a CPU the same as fp32.
    bf16   the forward and backward under ``torch.autocast`` in bfloat16 (CPU and CUDA).
    fp16   the same in float16, the loss scaled by `FP16_SCALE` so that small output gradients do not
           flush to zero.

Whatever the precision, the master weights stay FP32 (autocast casts copies), and everything that the
privacy guarantee rests on is FP32: book-keeping casts each layer's kept input and output gradient to
FP32 (and takes the loss scale back out) before the per-sample norms, so the norms, the clip factors,
the clipped sum and the noise are FP32, with TF32 switched off for them (`exact`). A clipped
contribution's norm is then at most C up to FP32 rounding, as in an FP32 run: the accountant does not
change with precision.

Overflow (fp16): every operation of the step is per example (BatchNorm may only be frozen), so an inf
or NaN produced by example i sits in example i's rows only. `clean` sets those entries to 0, so example
i contributes a clipped vector that depends on example i alone, with norm ≤ C like any other. The step
is never skipped: skipping because of one example's overflow would make the update's very existence
depend on private data (a leak the accountant does not count). The scale is fixed, not adjusted from
overflows it sees (that too would be a data-dependent choice); how many examples overflowed is counted
(`Stepper.overflows`) as a diagnostic, like the clipped fraction.
"""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
FP16_SCALE = 2.0 ** 10  # fixed loss scale of fp16: output gradients of a summed CE loss are O(1) per example
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def loss_scale(precision: str) -> float:
    """The factor the loss is multiplied by before the backward (1 but for fp16)."""
    return FP16_SCALE if precision == "fp16" else 1.0


@contextlib.contextmanager
def autocast(precision: str, device_type: str):
    """The forward (and so the backward it records) in ``precision`` on ``device_type``."""
    if precision in _DTYPES:
        with torch.autocast(device_type, dtype=_DTYPES[precision]):
            yield
    elif precision == "tf32" and device_type == "cuda":
        with _tf32(True):
            yield
    else:
        yield


@contextlib.contextmanager
def _tf32(on: bool):
    mm, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = mm, cudnn


def exact(precision: str):
    """FP32 arithmetic for the per-sample norms and the clipped sum: TF32 off while they run (a low-precision
    run only; an fp32 run keeps PyTorch's defaults, which its measured figures were taken under)."""
    return _tf32(False) if precision != "fp32" else contextlib.nullcontext()


def clean(t: torch.Tensor, scale: float = 1.0, bad: torch.Tensor | None = None) -> torch.Tensor:
    """``t`` (B, …) in FP32 with the loss scale divided out and non-finite entries set to 0.

    Args:
        bad: a (B,) bool tensor; the rows of ``t`` that held a non-finite entry are marked in it.

    Integer tensors (token ids) and FP32 tensors of an unscaled step are returned as they are.
    """
    if not t.is_floating_point() or (t.dtype == torch.float32 and scale == 1.0 and bad is None):
        return t
    t = t.float()
    if bad is not None:
        finite = torch.isfinite(t)
        bad |= ~finite.flatten(1).all(1)
        t = torch.where(finite, t, torch.zeros((), dtype=t.dtype, device=t.device))
    return t / scale if scale != 1.0 else t
