"""Curvature: Hutchinson vs exact Hessians, the closed form of a softmax head, per-sample covariance terms."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, hessian

from dpviz.privacy import curvature


def tiny(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    x, y = torch.randn(24, 5), torch.randint(0, 3, (24,))
    return model, x, y


def exact_hessian(model, x, y):
    """Full (P, P) Hessian of the mean cross-entropy by torch.func, parameters flattened in order."""
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    def loss(v):
        parts, i = {}, 0
        for n, s in zip(names, shapes):
            parts[n] = v[i:i + s.numel()].reshape(s)
            i += s.numel()
        return F.cross_entropy(functional_call(model, parts, (x,)), y)

    return hessian(loss)(flat), flat


def test_hutchinson_matches_exact_trace_within_its_standard_error():
    model, x, y = tiny()
    H, _ = exact_hessian(model, x, y)
    params = list(model.parameters())
    lc = curvature.LossCurvature(model, x, y, params)
    blocks = {"first": [0, 1], "last": [2, 3]}
    est, per_block = curvature.hutchinson(lc, blocks, rtol=0.0, max_probes=400, min_probes=400,
                                          generator=torch.Generator().manual_seed(1))
    exact = float(H.diagonal().sum())
    assert est.samples == 400 and est.stderr > 0
    assert abs(est.value - exact) <= 3 * est.stderr, (est, exact)
    n_first = sum(p.numel() for p in params[:2])
    exact_first = float(H.diagonal()[:n_first].sum())
    assert abs(per_block["first"].value - exact_first) <= 3 * per_block["first"].stderr + 1e-9


def test_hutchinson_stops_at_the_relative_tolerance():
    model, x, y = tiny(1)
    lc = curvature.LossCurvature(model, x, y, list(model.parameters()))
    est, _ = curvature.hutchinson(lc, {"all": [0, 1, 2, 3]}, rtol=0.05, max_probes=5000, min_probes=10,
                                  generator=torch.Generator().manual_seed(0))
    assert est.stderr <= 0.05 * abs(est.value) and 10 <= est.samples < 5000


def test_softmax_head_trace_matches_closed_form():
    """For z = W f + b, H_i = (diag p − p pᵀ) ⊗ [f; 1][f; 1]ᵀ, so tr H = mean (1 − ‖p‖²)(‖f‖² + 1)."""
    torch.manual_seed(0)
    head = nn.Linear(6, 4)
    f, y = torch.randn(50, 6), torch.randint(0, 4, (50,))
    p = (f @ head.weight.T + head.bias).softmax(1).detach()
    closed = float(((1 - p.pow(2).sum(1)) * (f.pow(2).sum(1) + 1)).mean())
    lc = curvature.LossCurvature(head, f, y, list(head.parameters()))
    est, _ = curvature.hutchinson(lc, {"head": [0, 1]}, rtol=0.0, max_probes=300, min_probes=300,
                                  generator=torch.Generator().manual_seed(2))
    assert abs(est.value - closed) <= 3 * est.stderr, (est, closed)


def test_gradient_terms_and_covariance_trace_are_exact_on_the_whole_batch():
    model, x, y = tiny(2)
    H, _ = exact_hessian(model, x, y)
    params = list(model.parameters())
    lc = curvature.LossCurvature(model, x, y, params)
    G = torch.cat([g.reshape(-1) for g in lc.G])
    gthg = float(sum((a * b).sum() for a, b in zip(lc.G, lc.hvp(lc.G))))
    assert math.isclose(gthg, float(G @ H @ G), rel_tol=1e-4)
    # tr(HΣ) with all n examples drawn: exactly (1/n) Σ_i (g_i − G)ᵀ H (g_i − G)
    est, norms = curvature.sigma_trace(lc, len(y), torch.Generator().manual_seed(0))
    gs = torch.stack([torch.cat([g.reshape(-1) for g in torch.autograd.grad(
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]), params)]) for i in range(len(y))])
    U = gs - G
    exact = float(torch.einsum("ip,pq,iq->i", U, H, U).mean())
    assert math.isclose(est.value, exact, rel_tol=1e-4)
    assert torch.allclose(norms.sort().values, gs.norm(dim=1).sort().values, rtol=1e-5)


def test_improvement_terms_follow_the_formula():
    t = curvature.improvement_terms(gtg=4.0, gthg=2.0, trace=10.0, tr_h_sigma=30.0, noise_multiplier=2.0,
                                    batch_size=10.0, clip_norm=1.0, clip_factor_mean=0.5)
    assert t["terms"] == pytest.approx({"curvature": 2.0, "sampling": 3.0, "decelerator": 4 * 10 / (100 * 0.25)})
    D = 2.0 + 3.0 + 1.6
    assert t["improvement_star"] == pytest.approx(16 / (2 * D)) and t["lr_star"] == pytest.approx(4 / (0.5 * D))
    assert t["dominant"] == "sampling"
    no_dp = curvature.improvement_terms(gtg=4.0, gthg=2.0, trace=10.0, tr_h_sigma=30.0, noise_multiplier=0.0,
                                        batch_size=10.0, clip_norm=1.0, clip_factor_mean=0.5)
    assert no_dp["terms"]["decelerator"] == 0 and no_dp["improvement_star"] > t["improvement_star"]
