"""Each per-sample route of book-keeping (`bk`) against a one-example-at-a-time loop, on CPU.

The GPU takes the same functions: patches with the batch folded into the channels (`_unfold`), no kept
norm-layer outputs (x̂ recomputed), gradient edges instead of outputs; each is exercised here.
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpviz.privacy import bk
from dpviz.privacy.dpsgd import Stepper, gaussian_noise, private_step
from test_dpsgd import loop_clipped_sum, model_for


@pytest.fixture(params=[False, True], ids=["norms-after", "norms-in-backward"])
def early(request, monkeypatch):
    """Both ways norm layers are reduced: after the backward (a CPU's default) and in it (a GPU's)."""
    monkeypatch.setattr(bk.BookKeeper, "early_on_cpu", request.param)
    return request.param


def _check_against_loop(model, x, y):
    C = loop_clipped_sum(copy.deepcopy(model), x, y, 1.0)[1].median().item()  # some clipped, some not
    ref, ref_norms = loop_clipped_sum(copy.deepcopy(model), x, y, C)
    st = Stepper(model, "bk")
    _, _, norms = st.clipped_sum(x, y, C)
    st.close()
    assert torch.allclose(norms, ref_norms, rtol=1e-6)
    assert (norms > C * 1.001).any() and (norms < C * 0.999).any()  # real clipping, and some left unclipped
    for p, r in zip(st.params, ref):
        assert torch.allclose(p.grad, r, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("k,stride,pad,dil", [(3, 2, 1, 1), (3, 1, 1, 2), (1, 2, 0, 1), (4, 4, 0, 1), (1, 1, 1, 1)])
def test_unfold_gives_each_examples_patches(k, stride, pad, dil):
    conv = nn.Conv2d(3, 5, k, stride=stride, padding=pad, dilation=dil)
    a = torch.randn(4, 3, 9, 9)
    ref = torch.stack([F.unfold(a[i:i + 1], k, dil, pad, stride)[0].T for i in range(4)])
    assert torch.equal(bk._unfold(conv, a), ref)


@pytest.mark.parametrize("k,stride,pad,dil,hw", [((3, 3), 2, 1, 1, (8, 8)), ((3, 3), 1, 1, 1, (4, 4)),
                                                 ((3, 2), (1, 2), (2, 0), (2, 1), (9, 7)), ((5, 5), 3, 2, 1, (11, 10)),
                                                 ((2, 2), 1, 0, 1, (5, 6))])
def test_pixel_gram_gives_the_patches_ghost_norm(k, stride, pad, dil, hw):
    """The ghost norm from the pixels' Gram equals the one from im2col's patches, padding and dilation included."""
    torch.manual_seed(3)
    conv = nn.Conv2d(4, 6, k, stride=stride, padding=pad, dilation=dil).double()
    a = torch.randn(3, 4, *hw, dtype=torch.float64)
    g = torch.randn(3, 6, *conv(a).shape[2:], dtype=torch.float64)
    patches, grads = bk._unfold(conv, a), g.flatten(2).transpose(1, 2)  # (B, L, C·kh·kw), (B, L, k)
    ref = torch.einsum("blc,bmc,bld,bmd->b", patches, patches, grads, grads)
    assert torch.allclose(bk.rules.pixel_ghost_norm2(conv, a, g), ref, rtol=1e-10)


def test_the_cnns_wide_convolutions_take_the_pixel_gram_on_a_cpu():
    """The built-in CNN at its default batch: both convolutions past the first skip im2col on a CPU."""
    from dpviz.models.cnn import SmallCNN

    model, x = SmallCNN(1), torch.randn(256, 1, 16, 16)
    shapes, h = [], x
    for block in model.blocks:
        a, h = h, block(h)
        shapes.append((block[0], a, h))
    assert [bk.rules._pixel_gram_pays(c, a, g) for c, a, g in shapes] == [False, True, True]  # the first: per-sample gradients
    assert not bk.rules._pixel_gram_pays(shapes[1][0], shapes[1][1].to("meta"), shapes[1][2].to("meta"))


def _conv_net(c_in, width, k, stride, pad, inplace):
    return nn.Sequential(nn.Conv2d(c_in, width, k, stride=stride, padding=pad), nn.ReLU(inplace=inplace),
                         nn.Conv2d(width, width, 1, stride=2, bias=False), nn.GroupNorm(2, width),
                         nn.ReLU(), nn.Flatten(), nn.LazyLinear(3))


@pytest.mark.parametrize("c_in,width", [(2, 4), (8, 80)])  # grouped-conv route; patches (ghost and per-sample)
@pytest.mark.parametrize("inplace", [False, True])
def test_conv_routes_match_loop(c_in, width, inplace):
    torch.manual_seed(0)
    x, y = torch.randn(5, c_in, 6, 6, dtype=torch.float64), torch.randint(0, 3, (5,))
    model = _conv_net(c_in, width, 3, 1, 1, inplace).double()
    model(x)  # materialise the lazy head
    _check_against_loop(model, x * 3, y)


@pytest.mark.parametrize("tiny", [False, True])  # |w| > 1e-3: x̂ read back from y on CPU; else recomputed
@pytest.mark.parametrize("inplace", [False, True])  # an in-place op on the norm's output: recomputed too
def test_norm_layers_match_loop(tiny, inplace, early):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.ReLU(inplace=inplace), nn.Linear(8, 8),
                          nn.Unflatten(1, (2, 4)), nn.GroupNorm(1, 2), nn.ReLU(inplace=inplace), nn.Flatten(),
                          nn.Linear(8, 3)).double()
    with torch.no_grad():
        for m in (model[1], model[5]):
            m.weight.uniform_(0.5, 1.5)
            m.weight[0] = 1e-5 if tiny else m.weight[0]
            m.bias.normal_()
    x, y = torch.randn(6, 6, dtype=torch.float64) * 4, torch.randint(0, 3, (6,))
    _check_against_loop(model, x, y)


def test_affine_grads_read_back_equal_recomputed():
    """The CPU route (x̂ from the output) and the GPU route (x̂ recomputed) give the same per-sample grads."""
    for layer, a in ((nn.GroupNorm(2, 4), torch.randn(3, 4, 5, 5)), (nn.LayerNorm(6), torch.randn(3, 7, 6))):
        with torch.no_grad():
            layer.weight.uniform_(0.5, 2.0)
            layer.bias.normal_()
        y, g = layer(a), torch.randn_like(a)
        for read, recomputed in zip(bk._per_sample_affine(layer, a, g, y), bk._per_sample_affine(layer, a, g)):
            assert torch.allclose(read, recomputed, atol=1e-5)


def test_private_step_reports_and_noises_as_before():
    """One host read for the step's statistics, one launch for the noise sum: the same values as per-tensor."""
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3)).double()
    x, y = torch.randn(7, 5, dtype=torch.float64) * 3, torch.randint(0, 3, (7,))
    twin = copy.deepcopy(model)
    st = Stepper(model, "bk")
    stats = private_step(st, x, y, clip_norm=0.3, noise_multiplier=2.0, expected_batch=6.5,
                         generator=torch.Generator().manual_seed(5))
    ref_st = Stepper(twin, "bk")
    out, loss_sum, norms = ref_st.clipped_sum(x, y, 0.3)
    g = torch.Generator().manual_seed(5)
    for p, q in zip(st.params, ref_st.params):
        noisy = (q.grad + torch.randn(q.shape, generator=g) * 0.6) / 6.5  # the noise is drawn in float32
        assert torch.equal(p.grad, noisy)
    # sums over the batch, divided once by B (what a distributed step all-reduces): exact fractions
    assert stats.loss == pytest.approx(loss_sum.item() / 7, rel=1e-12) and stats.batch_size == 7
    assert stats.train_accuracy == int((out.argmax(1) == y).sum()) / 7
    assert stats.clip_fraction == int((norms > 0.3).sum()) / 7 and stats.grad_norm == pytest.approx(norms.mean().item(),
                                                                                                  rel=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA device (CI has none; the routes run on CPU above)")
def test_cuda_step_matches_loop():
    torch.manual_seed(3)
    x, y = torch.randn(5, 8, 6, 6, dtype=torch.float64), torch.randint(0, 3, (5,))
    model = _conv_net(8, 80, 3, 1, 1, False).double()
    model(x)
    ref, ref_norms = loop_clipped_sum(copy.deepcopy(model), x * 3, y, 0.5)
    st = Stepper(model.cuda(), "bk")
    _, _, norms = st.clipped_sum(x.cuda() * 3, y.cuda(), 0.5)
    assert torch.allclose(norms.cpu(), ref_norms, rtol=1e-6)
    for p, r in zip(st.params, ref):
        assert torch.allclose(p.grad.cpu(), r, rtol=1e-6, atol=1e-9)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (CI has none)")
def test_cuda_noise_is_the_same_draws_scaled():
    p = torch.zeros(1000, 7, device="cuda")
    a = gaussian_noise(p, 0.6, torch.Generator(device="cuda").manual_seed(4))
    b = torch.randn(p.shape, generator=torch.Generator(device="cuda").manual_seed(4), device="cuda") * 0.6
    assert torch.equal(a, b)


def test_norm_layer_gradient_that_never_arrives_is_an_error_not_a_zero(monkeypatch):
    """A norm layer reduced in the backward needs its output gradient: an input that requires grad (no
    trainable layer upstream asks for it) must fail loudly rather than count the layer as zero."""
    monkeypatch.setattr(bk.BookKeeper, "early_on_cpu", True)
    model = nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 3)).double()
    st = Stepper(model, "bk")
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="never arrived"):
        st.clipped_sum(x, torch.tensor([0, 1, 2]), 1.0)


@pytest.mark.parametrize("name", ["cnn", "vit"])
def test_builtin_backbones_match_loop_with_norms_in_backward(name, monkeypatch):
    """The GPU's way for the built-in backbones (GroupNorm after convs, LayerNorm in every block), on CPU."""
    monkeypatch.setattr(bk.BookKeeper, "early_on_cpu", True)
    m = model_for(name)
    x, y = torch.randn(5, 1, 16, 16, dtype=torch.float64), torch.randint(0, 10, (5,))
    _check_against_loop(m, x, y)
