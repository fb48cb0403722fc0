"""Mixed precision (`dpviz.privacy.precision`): a bf16 or fp16 forward and backward, FP32 per-sample norms,
clipping and clipped sums; a clipped contribution never exceeds C; fp16 overflow zeroes entries, never a step.

Tolerances: bf16 keeps 8 bits of mantissa (relative error 2⁻⁸ ≈ 0.4 % per rounding), so norms are checked to
3 %. A clipped sum inherits the error of the low-precision backward that made its output gradients (6.7 % on
the first conv of `_Image` in bf16): it is checked against the error of the same model's plain bf16 gradient,
≤ 2 × that + 2 %, i.e. the DP path adds no error of its own. The bound ‖c_i g_i‖ ≤ C is checked to FP32
rounding (1e-5), since it is what the accountant assumes.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dpviz
from dpviz.config import RunConfig
from dpviz.errors import ConfigError
from dpviz.privacy import precision
from dpviz.privacy.dpsgd import Stepper


class _Image(nn.Module):
    """Conv2d, a depthwise (grouped) conv, GroupNorm, a frozen BatchNorm in eval mode and a Linear head."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.gn = nn.GroupNorm(2, 8)
        self.bn = nn.BatchNorm2d(8).eval().requires_grad_(False)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = F.relu(self.gn(self.dw(F.relu(self.conv(x)))))
        return self.head(self.bn(h).mean((2, 3)))


class _Text(nn.Module):
    """Embedding, LayerNorm, a token-wise Linear and a Linear head over mean-pooled tokens."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.ln = nn.LayerNorm(16)
        self.mlp = nn.Linear(16, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, ids):
        return self.head(torch.tanh(self.mlp(self.ln(self.emb(ids)))).mean(1))


def _image_batch(B=12):
    g = torch.Generator().manual_seed(1)
    return torch.randn(B, 3, 8, 8, generator=g), torch.randint(0, 4, (B,), generator=g)


def _text_batch(B=12):
    g = torch.Generator().manual_seed(2)
    return torch.randint(0, 50, (B, 10), generator=g), torch.randint(0, 3, (B,), generator=g)


def _plain(model, x, y, prec):
    """The non-private summed gradient in ``prec`` (the yardstick of low precision's own error)."""
    model.zero_grad(set_to_none=True)
    with precision.autocast(prec, "cpu"):
        loss = F.cross_entropy(model(x), y, reduction="sum")
    (loss * precision.loss_scale(prec)).backward()
    return {n: p.grad.float() / precision.loss_scale(prec) for n, p in model.named_parameters() if p.requires_grad}


def _rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def _clipped(model, x, y, prec, C):
    model.zero_grad(set_to_none=True)
    stepper = Stepper(model, "bk", prec)
    _, _, norms = stepper.clipped_sum(x, y, C)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    stepper.close()
    return norms, grads, stepper


@pytest.mark.parametrize("make,batch", [(_Image, _image_batch), (_Text, _text_batch)], ids=["image", "text"])
@pytest.mark.parametrize("prec", ["bf16", "fp16"])
def test_low_precision_norms_and_clipped_sums_stay_near_fp32_on_every_layer_type(make, batch, prec):
    torch.manual_seed(0)
    model, (x, y) = make(), batch()
    C = _clipped(model, x, y, "fp32", C=1.0)[0].median().item()  # some examples clipped, some not
    ref_norms, ref, _ = _clipped(model, x, y, "fp32", C=C)
    norms, got, _ = _clipped(model, x, y, prec, C=C)
    assert norms.dtype == torch.float32 and all(g.dtype == torch.float32 for g in got.values())
    assert torch.allclose(norms, ref_norms, rtol=3e-2)
    assert (norms > C).any() and (norms < C).any()
    plain32, plain_low = _plain(model, x, y, "fp32"), _plain(model, x, y, prec)
    for name, g in ref.items():  # every parameter: conv, grouped conv, norms' affines, embedding, linear
        assert _rel(got[name], g) <= 2 * _rel(plain_low[name], plain32[name]) + 2e-2, name


@pytest.mark.parametrize("prec", ["bf16", "fp16"])
def test_a_clipped_contribution_never_exceeds_c_in_low_precision(prec):
    """One example per step and a tiny C: every example is clipped, and what it adds has norm ≤ C."""
    torch.manual_seed(0)
    model, (x, y) = _Image(), _image_batch(8)
    C = 1e-3
    for i in range(8):
        norms, grads, _ = _clipped(model, x[i:i + 1], y[i:i + 1], prec, C)
        total = torch.sqrt(sum(g.pow(2).sum() for g in grads.values()))
        assert norms[0] > C and total <= C * (1 + 1e-5)


def test_fp16_overflow_zeroes_the_examples_entries_and_keeps_the_step_and_the_bound():
    """An example whose activations overflow float16 (inputs × 10⁶) adds a finite vector of norm ≤ C;
    the other examples' contributions are those of the batch without it; the overflow is counted."""
    torch.manual_seed(0)
    model, (x, y) = _Image(), _image_batch(8)
    C = 0.5
    bad = x.clone()
    bad[3] *= 1e6
    _, without, _ = _clipped(model, torch.cat([x[:3], x[4:]]), torch.cat([y[:3], y[4:]]), "fp16", C)
    _, with_bad, stepper = _clipped(model, bad, y, "fp16", C)
    assert stepper.overflows == 1 and all(torch.isfinite(g).all() for g in with_bad.values())
    diff = torch.sqrt(sum((with_bad[n] - without[n]).pow(2).sum() for n in without))
    assert diff <= C * (1 + 1e-3)  # the overflowed example's contribution: bounded like any other
    assert precision.loss_scale("fp16") == precision.FP16_SCALE and precision.loss_scale("bf16") == 1.0


def test_precision_is_a_hashed_field_that_needs_book_keeping_and_leaves_epsilon_alone(cache_dir):
    base = RunConfig(strategy="fft", epochs=2, epsilon=1.0, lr_lp=0.5, lr_ft=0.05, checkpoint_every=-1)
    assert "precision" not in base.to_json(hashed_only=True)  # fp32: the keys of earlier runs
    assert base.replace(precision="bf16").hash() != base.hash()
    with pytest.raises(ConfigError, match="precision"):
        base.replace(precision="fp8")
    with pytest.raises(ConfigError, match="precision: fp32 with grad_sample_mode hooks"):
        base.replace(precision="bf16", grad_sample_mode="hooks")
    a = dpviz.run(base, cache_dir=cache_dir)
    b = dpviz.run(base.replace(precision="bf16"), cache_dir=cache_dir)
    assert b["epsilon_spent"] == a["epsilon_spent"] <= 1.0  # the accountant does not see precision
    assert b["config"]["precision"] == "bf16" and b["test_accuracy"] is not None


@pytest.mark.parametrize("make,batch", [(_Image, _image_batch), (_Text, _text_batch)], ids=["image", "text"])
def test_bf16_grams_of_bf16_inputs_are_the_fp32_path(make, batch, monkeypatch):
    """With the bf16 inputs kept into the Linear and Conv2d Grams (`bk.LOW_GRAMS`, CUDA's route, run here on the
    CPU's FP32 copies), the norms, the clipped sums and the bound are those of the FP32 copies made up front."""
    from dpviz.privacy import bk

    torch.manual_seed(0)
    model, (x, y) = make(), batch()
    C = _clipped(model, x, y, "fp32", C=1.0)[0].median().item()
    ref_norms, ref, _ = _clipped(model, x, y, "bf16", C=C)
    monkeypatch.setattr(bk, "LOW_GRAMS", {"cpu", "cuda"})
    norms, got, _ = _clipped(model, x, y, "bf16", C=C)
    assert norms.dtype == torch.float32 and torch.allclose(norms, ref_norms, rtol=1e-6)
    for name, g in ref.items():
        assert got[name].dtype == torch.float32 and torch.allclose(got[name], g, rtol=1e-5, atol=1e-7), name
    for i in range(4):  # one example, a tiny C: clipped, and at most C
        n1, g1, _ = _clipped(model, x[i:i + 1], y[i:i + 1], "bf16", 1e-3)
        assert n1[0] > 1e-3 and torch.sqrt(sum(t.pow(2).sum() for t in g1.values())) <= 1e-3 * (1 + 1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (CI has none: bench/gpu_call.sh runs it)")
def test_a_bf16_gram_on_cuda_is_the_fp32_product_of_its_inputs():
    from dpviz.privacy import bk_rules

    torch.manual_seed(0)
    a, b = torch.randn(8, 197, 384, device="cuda").bfloat16(), torch.randn(8, 384, 197, device="cuda").bfloat16()
    with precision.exact("bf16"):
        ref = torch.bmm(a.float(), b.float())
    got = bk_rules.gram(a, b)
    assert got.dtype == torch.float32 and torch.allclose(got, ref, rtol=1e-5, atol=1e-4)
