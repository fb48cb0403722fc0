"""DP-LoRA: adapters are ordinary layers for book-keeping, start as the pretrained model, merge exactly."""

import copy

import pytest
import torch

from dpviz.models import lora
from dpviz.privacy.dpsgd import Stepper
from test_dpsgd import loop_clipped_sum, model_for


def adapted(name, rank=2):
    """A double-precision classifier with adapters whose B is random (zero B would hide A's gradients)."""
    m = model_for(name)
    layers = lora.apply_lora(m.backbone, rank)
    lora.set_lora_trainable(m)
    torch.manual_seed(1)
    for a in layers:
        torch.nn.init.normal_(a.B.weight, std=0.1)
    return m, layers


@pytest.mark.parametrize("name", ["cnn", "vit"])
def test_per_sample_norms_match_a_one_example_loop(name):
    m, layers = adapted(name)
    assert any(isinstance(a.base, torch.nn.Conv2d) for a in layers)  # both backbones have convolutions
    x, y = torch.randn(6, 1, 16, 16, dtype=torch.float64), torch.randint(0, 10, (6,))
    ref, ref_norms = loop_clipped_sum(copy.deepcopy(m), x, y, C=0.5)
    st = Stepper(m, "bk")
    _, _, norms = st.clipped_sum(x, y, 0.5)
    assert torch.allclose(norms, ref_norms, rtol=1e-6) and (norms > 0.5).any()
    names = {id(p): n for n, p in m.named_parameters()}
    assert all(".A." in names[id(p)] or ".B." in names[id(p)] or names[id(p)].startswith("head.")
               for p in st.params)  # pretrained weights frozen
    for p, r in zip(st.params, ref):
        assert torch.allclose(p.grad, r, rtol=1e-6, atol=1e-9)
    st.close()


@pytest.mark.parametrize("name", ["cnn", "vit"])
def test_starts_as_the_pretrained_model_and_merges_exactly(name):
    plain = model_for(name).eval()
    m = copy.deepcopy(plain)
    layers = lora.apply_lora(m.backbone, 4)
    x = torch.randn(5, 1, 16, 16, dtype=torch.float64)
    assert torch.equal(m.eval()(x), plain(x))  # B = 0: no change before training
    for a in layers:
        torch.nn.init.normal_(a.B.weight, std=0.1)
    out = m(x)
    fresh = copy.deepcopy(plain)
    fresh.load_state_dict(lora.merged_state_dict(m))  # loads into the unmodified classifier
    assert torch.allclose(fresh(x), out, atol=1e-10) and not torch.allclose(out, plain(x))
    lora.merge(m.backbone)
    assert not any(isinstance(k, lora.LoRA) for k in m.modules())
    assert torch.allclose(m(x), out, atol=1e-10)


def test_trainable_fraction_counts_adapters_only():
    m, layers = adapted("cnn", rank=1)
    adapters = sum(a.A.weight.numel() + a.B.weight.numel() for a in layers)
    base = sum(p.numel() for p in model_for("cnn").backbone.parameters())
    assert lora.trainable_fraction(m) == pytest.approx(adapters / base) and 0 < adapters / base < 0.5
