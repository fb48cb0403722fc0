"""Clipping is per sample and exact: book-keeping, Opacus hooks and a plain loop agree."""

import copy

import pytest
import torch
import torch.nn.functional as F

from dpviz.models import Classifier, build_backbone
from dpviz.privacy import bk, clipping
from dpviz.privacy.dpsgd import Stepper, private_step


def loop_clipped_sum(model, x, y, C):
    """Reference: one backward per example, clip, sum."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    norms = []
    for i in range(len(y)):
        g = torch.autograd.grad(F.cross_entropy(model(x[i:i + 1]), y[i:i + 1], reduction="sum"), params)
        n = torch.sqrt(sum(t.pow(2).sum() for t in g))
        norms.append(n)
        for acc, t in zip(total, g):
            acc += t * min(1.0, C / (n.item() + 1e-6))
    return total, torch.stack(norms)


def model_for(name, trainable="all"):
    torch.manual_seed(0)
    m = Classifier(build_backbone(name, channels=1, size=16), 10)
    if trainable == "last":
        m.requires_grad_(False)
        m.backbone.blocks[-1].requires_grad_(True)
        m.head.requires_grad_(True)
    return m.double()


@pytest.mark.parametrize("name", ["cnn", "vit"])
@pytest.mark.parametrize("mode", ["bk", "hooks"])
@pytest.mark.parametrize("trainable", ["all", "last"])
def test_clipped_sum_matches_per_example_loop(name, mode, trainable):
    m = model_for(name, trainable)
    x, y = torch.randn(6, 1, 16, 16, dtype=torch.float64), torch.randint(0, 10, (6,))
    ref, ref_norms = loop_clipped_sum(copy.deepcopy(m), x, y, C=0.5)
    st = Stepper(m, mode)
    _, _, norms = st.clipped_sum(x, y, 0.5)
    assert torch.allclose(norms, ref_norms, rtol=1e-6)
    assert (norms > 0.5).any()  # the test exercises real clipping
    for p, r in zip(st.params, ref):
        assert torch.allclose(p.grad, r, rtol=1e-6, atol=1e-9)
    st.close()


def test_bk_supports_builtins_and_rejects_unknown_layers():
    assert bk.supports(model_for("cnn")) and bk.supports(model_for("vit"))
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.PReLU())
    assert not bk.supports(m)
    assert Stepper(m, "auto").mode == "hooks"


def test_noise_has_std_sigma_c_over_expected_batch():
    head = torch.nn.Linear(4, 3)
    st = Stepper(head, "bk")
    g = torch.Generator().manual_seed(0)
    x, y = torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)  # an empty Poisson batch
    private_step(st, x, y, clip_norm=2.0, noise_multiplier=3.0, expected_batch=10.0, generator=g)
    assert head.weight.grad.shape == (3, 4)
    draws = []
    for _ in range(400):
        private_step(st, x, y, clip_norm=2.0, noise_multiplier=3.0, expected_batch=10.0, generator=g)
        draws.append(head.weight.grad.flatten())
    std = torch.cat(draws).std().item()
    assert std == pytest.approx(3.0 * 2.0 / 10.0, rel=0.05)


def test_closed_form_head_matches_per_example_loop():
    torch.manual_seed(0)
    head = torch.nn.Linear(12, 5).double()
    f, y = torch.randn(9, 12, dtype=torch.float64) * 3, torch.randint(0, 5, (9,))
    ref, ref_norms = loop_clipped_sum(copy.deepcopy(head), f, y, C=0.7)
    st = Stepper(head, "auto")
    assert st.mode == "head"
    out, loss, norms = st.clipped_sum(f, y, 0.7)
    assert torch.allclose(norms, ref_norms) and (norms > 0.7).any()
    assert torch.allclose(head.weight.grad, ref[0]) and torch.allclose(head.bias.grad, ref[1])
    assert loss.item() == pytest.approx(F.cross_entropy(head(f), y, reduction="sum").item())


@pytest.mark.parametrize("name,mode", [("cnn", "bk"), ("vit", "bk"), ("cnn", "hooks"), ("head", "head")])
def test_auto_s_keeps_every_contribution_below_R_and_sums_them(name, mode):
    """AUTO-S scales g_i by R/(‖g_i‖ + γ): each contribution's norm is R‖g_i‖/(‖g_i‖ + γ) < R."""
    torch.manual_seed(1)
    if name == "head":
        model, x = torch.nn.Linear(12, 5).double(), torch.randn(6, 12, dtype=torch.float64) * 3
    else:
        model, x = model_for(name), torch.randn(6, 1, 16, 16, dtype=torch.float64)
    y, R = torch.randint(0, 5 if name == "head" else 10, (6,)), 0.5
    st = Stepper(model, mode)
    singles = []
    for i in range(len(y)):  # one example at a time: p.grad is that example's clipped contribution
        _, _, norm = st.clipped_sum(x[i:i + 1], y[i:i + 1], R, "auto-s")
        g = [p.grad.clone() for p in st.params]
        contrib = torch.sqrt(sum(t.pow(2).sum() for t in g)).item()
        assert contrib < R and contrib == pytest.approx(R * norm.item() / (norm.item() + clipping.AUTO_S_GAMMA), rel=1e-6)
        singles.append(g)
    st.clipped_sum(x, y, R, "auto-s")
    for j, p in enumerate(st.params):
        assert torch.allclose(p.grad, sum(g[j] for g in singles), atol=1e-8)
    st.close()
