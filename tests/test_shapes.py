"""Fixed physical batch shapes: a padded (or split) step releases what the drawn batch would, and a run meets
the shapes it states."""

import copy
import math

import numpy as np
import pytest
import torch

from dpviz import models
from dpviz.privacy.dpsgd import Stepper, plain_step, private_step
from dpviz.training import loop, prepare, shapes
from test_dpsgd import model_for


def test_physical_sizes_cover_the_poisson_batch_and_grow_with_count():
    assert shapes.physical_sizes(1000, 0.064, 1) == (104,)
    four = shapes.physical_sizes(1000, 0.064, 4)
    assert len(four) == 4 and four[-1] == 104 and all(s % 8 == 0 for s in four)
    assert four[0] <= 40  # the lower tail of B ~ Binomial(1000, 0.064) pads to the smallest, not the top
    big = shapes.physical_sizes(60_000, 4096 / 60_000, 1)[0]
    assert 4096 < big < 4096 * 1.2  # the quantile 1 − 10⁻⁶: a few standard deviations above the mean
    assert shapes.physical_sizes(10, 0.01, 1) == (8,)


@pytest.mark.parametrize("n", [1, 7, 50, 1000, 4000, 60000])
@pytest.mark.parametrize("q", [0.0, 1e-4, 0.01, 0.064, 0.3, 0.99, 1.0])
def test_the_sizes_quantiles_are_scipy_stats_binomial_quantiles(n, q):
    """Taken from scipy.special's functions (a run imports no scipy.stats for them), equal to scipy.stats'."""
    from scipy.stats import binom

    assert shapes._binom_quantiles(n, q) == (int(binom.ppf(shapes.QUANTILE, n, q)),
                                             int(binom.ppf(1 - shapes.QUANTILE, n, q)))


def test_the_privacy_checks_chi2_band_is_scipy_stats_quantiles():
    from scipy.stats import chi2

    from dpviz.privacy import check

    for df in (1, 2, 5, 30, 199, 5000, 10 ** 6):
        lo, hi = check._chi2_band(df)
        assert lo == pytest.approx(chi2.ppf(check.ALPHA / 2, df), rel=1e-9)
        assert hi == pytest.approx(chi2.ppf(1 - check.ALPHA / 2, df), rel=1e-9)


def test_padder_keeps_every_sampled_row_once_and_splits_rather_than_drops():
    p = shapes.Padder((8, 16))
    for b in (0, 1, 7, 8, 9, 16, 17, 40):
        idx = torch.randperm(100)[:b]
        parts = p.split(idx)
        assert all(len(i) in (8, 16) and len(i) == len(m) for i, m in parts)
        real = torch.cat([i[m] for i, m in parts])
        assert sorted(real.tolist()) == sorted(idx.tolist())  # each sampled row exactly once, none dropped
    assert len(p.split(torch.arange(40))) == 3  # 16 + 16 + 8: split into the largest size and a remainder


def _update(model, parts, mode="bk", clipping="abadi", noise=1.3, C=0.5):
    """The privatized gradient of one step of ``parts`` (x, y, mask lists or tensors) with a fixed noise seed."""
    st = Stepper(model, mode)
    x, y, m = parts
    stats = private_step(st, x, y, mask=m, clip_norm=C, noise_multiplier=noise, expected_batch=9.0,
                         generator=torch.Generator().manual_seed(3), clipping=clipping)
    st.close()
    return [p.grad.clone() for p in st.params], stats


def _padded(x, y, padder):
    parts = padder.split(torch.arange(len(y)))
    return [x[i] for i, _ in parts], [y[i] for i, _ in parts], [m for _, m in parts]


@pytest.mark.parametrize("name,mode", [("cnn", "bk"), ("vit", "bk"), ("cnn", "hooks"), ("head", "head")])
@pytest.mark.parametrize("clipping", ["abadi", "auto-s"])
@pytest.mark.parametrize("sizes", [(16,), (4, 8)])  # padded once, or split into 8 + 4 (both padded)
def test_padded_step_releases_the_update_of_the_drawn_batch(name, mode, clipping, sizes):
    if name == "head":
        torch.manual_seed(0)
        model, x = torch.nn.Linear(12, 10).double(), torch.randn(11, 12, dtype=torch.float64) * 4
    else:
        model, x = model_for(name), torch.randn(11, 1, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 10, (11,))
    norms = Stepper(copy.deepcopy(model), mode).clipped_sum(x, y, 1e9)[2].sort().values
    C = (norms[5] + norms[6]).item() / 2  # between two rows' norms: some rows clipped, some not
    ref, ref_stats = _update(copy.deepcopy(model), (x, y, None), mode, clipping, C=C)
    got, stats = _update(copy.deepcopy(model), _padded(x, y, shapes.Padder(sizes)), mode, clipping, C=C)
    for r, g in zip(ref, got):
        assert torch.allclose(r, g, rtol=1e-9, atol=1e-12)
    assert stats.batch_size == ref_stats.batch_size == 11
    assert stats.loss == pytest.approx(ref_stats.loss) and stats.grad_norm == pytest.approx(ref_stats.grad_norm)
    assert stats.clip_fraction == ref_stats.clip_fraction and stats.train_accuracy == ref_stats.train_accuracy
    if clipping == "abadi" and mode != "head":
        assert 0 < stats.clip_fraction < 1  # clipping is active on some rows, not all


def test_padded_rows_count_nothing_even_without_noise():
    """σ = 0: the update is the clipped sum itself, so a padded row that leaked in would show at once."""
    model, x, y = model_for("cnn"), torch.randn(5, 1, 16, 16, dtype=torch.float64), torch.randint(0, 10, (5,))
    ref, _ = _update(copy.deepcopy(model), (x, y, None), noise=0.0)
    got, _ = _update(copy.deepcopy(model), _padded(x, y, shapes.Padder((16,))), noise=0.0)
    assert max((r - g).abs().max().item() for r, g in zip(ref, got)) < 1e-12


def test_padded_plain_step_is_the_mean_over_the_drawn_batch():
    model, x, y = model_for("cnn"), torch.randn(11, 1, 16, 16, dtype=torch.float64), torch.randint(0, 10, (11,))
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    ref = plain_step(a, x, y)
    px, py, pm = _padded(x, y, shapes.Padder((4, 8)))
    got = plain_step(b, px, py, mask=pm)
    assert got.batch_size == 11 and got.loss == pytest.approx(ref.loss)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-9, atol=1e-12)


def _shapes_of_a_run(cfg, cache_dir):
    """Train ``cfg`` unstored; the distinct batch sizes that reached the backbone, and the summary."""
    prep = prepare.prepare(cfg, cache_dir=cache_dir)
    seen = set()
    first = next(m for m in prep.model.backbone.modules() if isinstance(m, torch.nn.Conv2d))  # every input's
    first.register_forward_pre_hook(lambda m, args: seen.add(args[0].shape[0]))
    summary = loop.train(prep, store=None, run_id="shapes")
    return seen, summary


@pytest.mark.parametrize("strategy", ["fft", "lp-fft"])
def test_a_run_of_fixed_shapes_meets_the_stated_shapes_and_spends_the_same_epsilon(fast_cfg, cache_dir, strategy):
    kw = dict(strategy=strategy, batch_size=64, epochs=1, eval_subset=100, lr_lp=0.5, lr_ft=0.01)
    fixed, s_fixed = _shapes_of_a_run(fast_cfg(batch_shapes=1, **kw), cache_dir)
    drawn, s_drawn = _shapes_of_a_run(fast_cfg(batch_shapes=0, **kw), cache_dir)
    assert len(fixed) <= shapes.stated_shapes(1) < len(drawn)  # the drawn sizes reach the model as they are
    assert len(fixed) == 1  # the evaluation and feature passes run in chunks of the one training size
    assert s_fixed["epsilon_spent"] == s_drawn["epsilon_spent"] <= 1.0
    assert s_fixed["phases"] == s_drawn["phases"]
    # the same sampled batches and noise: the same run up to float rounding of other shapes' kernels
    assert s_fixed["test_accuracy"] == pytest.approx(s_drawn["test_accuracy"], abs=0.02)


def test_passes_reuse_the_largest_training_size_unless_it_is_tiny():
    assert shapes.pass_chunk(1000, 0.064, 1) == shapes.physical_sizes(1000, 0.064, 1)[-1] == 104
    assert shapes.pass_chunk(1000, 0.064, 4) == 104  # the largest of the 4
    assert shapes.pass_chunk(1000, 0.004, 1) == shapes.PASS_CHUNK  # a largest size of 16 rows: 256-row chunks
    assert shapes.pass_chunk(1000, 0.064, 0) == 0  # drawn sizes: passes unpadded


def test_batch_shapes_is_not_hashed_and_auto_is_per_device(fast_cfg):
    assert fast_cfg(batch_shapes=1).hash() == fast_cfg().hash() == fast_cfg(batch_shapes=0).hash()
    assert shapes.shape_count(-1, "cpu") == 0 and shapes.shape_count(-1, "cuda") == 1
    assert shapes.shape_count(3, "cpu") == 3
    from dpviz.errors import ConfigError
    with pytest.raises(ConfigError, match="batch_shapes"):
        fast_cfg(batch_shapes=99)


def test_passes_in_fixed_chunks_give_the_same_features():
    model = models.Classifier(models.build_backbone("cnn", channels=1, size=16), 10)
    x, y = torch.randn(300, 1, 16, 16), torch.randint(0, 10, (300,))
    seen = set()
    first = next(m for m in model.backbone.modules() if isinstance(m, torch.nn.Conv2d))
    first.register_forward_pre_hook(lambda m, args: seen.add(args[0].shape[0]))
    a = prepare.backbone_features(model, x, "cpu", fixed=shapes.PASS_CHUNK)
    assert seen == {shapes.PASS_CHUNK}
    b = prepare.backbone_features(model, x, "cpu")
    assert torch.allclose(a, b, atol=1e-5)
    assert prepare.evaluate(model, x, y, "cpu", fixed=104) == pytest.approx(prepare.evaluate(model, x, y, "cpu"))
    feats = prepare.layer_features(model, x, y, "cpu", fixed=104)
    assert all(f.shape[0] == 300 for k, f in feats.items() if k.startswith("layer_"))
    assert not math.isnan(feats["layer_1"].sum())


class _CutToLongest(torch.nn.Module):
    """A text backbone's contract (`dpviz.models.text`): ids right-padded with pad_id, each chunk cut to its
    longest text; records each chunk's cost."""

    pad_id = 0

    def __init__(self):
        super().__init__()
        self.cuts = []

    def forward_features(self, ids):
        longest = int((ids != self.pad_id).sum(1).max())
        self.cuts.append(longest * len(ids))  # the chunk's cost: rows × its cut length
        return ids[:, :longest].float().sum(1, keepdim=True)  # (B, 1): each row's own value

    def layer_features(self, ids):
        f = self.forward_features(ids)
        return [f, 2 * f]


@pytest.mark.parametrize("fixed", [0, 104])
def test_a_text_pass_runs_its_rows_by_length_and_returns_them_in_their_own_order(fixed):
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 49, (1000,), generator=g)
    ids = torch.randint(1, 100, (1000, 48), generator=g) * (torch.arange(48) < lengths[:, None])  # right-padded
    model = torch.nn.Module()
    model.backbone = _CutToLongest()
    want = ids.float().sum(1, keepdim=True)
    assert torch.equal(prepare.backbone_features(model, ids, "cpu", fixed=fixed), want)
    sorted_cost = sum(model.backbone.cuts)
    feats = prepare.layer_features(model, ids, torch.zeros(1000), "cpu", fixed=fixed)
    assert np.array_equal(feats["layer_1"], 2 * want.numpy())
    model.backbone.cuts.clear()
    shapes.chunked(model.backbone.forward_features, ids, device="cpu", fixed=fixed)  # in the rows' own order
    # chunks of rows in their own order are each cut near 48 tokens
    assert sorted_cost <= (0.65 if fixed else 0.8) * sum(model.backbone.cuts)
