"""BandMF beside DP-SGD: the banded noise (row t of M⁻¹Z from b − 1 vectors of memory), cyclic Poisson
sampling over b parts, its accounting as the equivalent DP-SGD schedule (checked with dp_accounting directly),
calibration within the budget over a grid, and b = 1 giving DP-SGD's run bit for bit."""

import math
import tempfile
from types import SimpleNamespace

import pytest
import torch

import dpviz
from dpviz import RunConfig
from dpviz.errors import ConfigError
from dpviz.privacy import accounting, bandmf
from dpviz.privacy.accounting import Phase
from dpviz.store import Store
from dpviz.training.loop import Loop

from dpviz.privacy.check import independent_epsilon  # dp_accounting's PLD, composed outside dpviz's accounting

DELTA = 1e-5


def test_bsr_coefficients_are_the_square_root_of_the_prefix_sums_cut_to_b_bands_at_unit_norm():
    assert bandmf.coefficients(1) == (1.0,)
    m = bandmf.coefficients(4)
    raw = [1, 1 / 2, 3 / 8, 5 / 16]  # binom(2k, k) / 4^k
    assert m == pytest.approx([r / math.sqrt(sum(x * x for x in raw)) for r in raw])
    assert sum(x * x for x in m) == pytest.approx(1.0)
    # the unbanded coefficients square to the prefix sums: (r * r)_t = 1 for every t
    r = [math.comb(2 * k, k) / 4**k for k in range(12)]
    assert all(sum(r[i] * r[t - i] for i in range(t + 1)) == pytest.approx(1.0) for t in range(12))


def test_momentum_bsr_coefficients_are_the_square_root_of_sgd_with_momentums_workload():
    """Unbanded, they square to a_t = Σ_{j≤t} β^j, the weight of a gradient t steps back in SGD with momentum β;
    banded, they are those cut to b at unit norm; β = 0 gives bandmf's."""
    beta, n = 0.9, 16
    c = bandmf._sqrt_series(n, beta)
    assert all(sum(c[i] * c[t - i] for i in range(t + 1)) == pytest.approx((1 - beta ** (t + 1)) / (1 - beta))
               for t in range(n))
    m = bandmf.coefficients(4, beta)
    assert m == pytest.approx([x / math.sqrt(sum(y * y for y in c[:4])) for x in c[:4]])
    assert bandmf.coefficients(4, 0.0) == bandmf.coefficients(4) and bandmf.coefficients(1, beta) == (1.0,)
    assert bandmf.momentum("bandmf-momentum") == 0.9 and bandmf.momentum("bandmf") == bandmf.momentum("dp-sgd") == 0


def test_under_sgd_with_momentum_the_fitted_coefficients_leave_less_noise_in_the_weights():
    """torch's SGD with dpviz's momentum, fed noise alone: the last iterate's variance is κ(T)·(DP-SGD's) for
    the momentum-fitted coefficients (`noise_factor(momentum=β)`), and below what bandmf's SGD coefficients
    leave in the same optimizer."""
    T, D, b, beta = 30, 40000, 4, bandmf.SGD_MOMENTUM

    def last_iterate_variance(noise) -> float:
        g = torch.Generator().manual_seed(5)
        w = torch.nn.Parameter(torch.zeros(D, dtype=torch.float64))
        opt = torch.optim.SGD([w], lr=1.0, momentum=beta)
        for _ in range(T):
            w.grad = noise([torch.randn(D, generator=g, dtype=torch.float64)])[0]
            opt.step()
        return float(w.detach().var())

    plain = last_iterate_variance(bandmf.BandedNoise(1))
    fitted = last_iterate_variance(bandmf.BandedNoise(b, beta)) / plain
    sgd_fit = last_iterate_variance(bandmf.BandedNoise(b)) / plain
    assert fitted == pytest.approx(bandmf.noise_factor(b, T, momentum=beta), rel=0.03)
    assert fitted < 0.9 * sgd_fit < 0.9  # the fitted ones cancel more of the noise, both less than DP-SGD
    assert bandmf.noise_factor(b, T, momentum=0.0) == bandmf.noise_factor(b, T)


@pytest.mark.parametrize("bands,beta", [(2, 0.0), (4, 0.0), (7, 0.0), (4, 0.9)])
def test_the_noise_is_m_inverse_z_from_b_minus_one_vectors_of_memory(bands, beta):
    g = torch.Generator().manual_seed(0)
    T, shapes = 15, [(3, 4), (5,)]
    noise = bandmf.BandedNoise(bands, beta)
    zs, ws = [], []
    for _ in range(T):
        z = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
        zs.append(torch.cat([t.reshape(-1) for t in z]))
        ws.append(torch.cat([t.reshape(-1) for t in noise(z)]))
        assert len(noise.memory) <= bands - 1
    m = bandmf.coefficients(bands, beta)
    M = torch.zeros(T, T, dtype=torch.float64)  # lower-triangular, b-banded, Toeplitz
    for t in range(T):
        for k in range(min(bands, t + 1)):
            M[t, t - k] = m[k]
    assert torch.allclose(M @ torch.stack(ws), torch.stack(zs), atol=1e-12)
    assert max(float(M[:, j].norm()) for j in range(T)) <= 1 + 1e-12  # sensitivity: columns of norm ≤ 1


def test_one_band_is_the_fresh_draw_itself():
    z = [torch.randn(3)]
    assert bandmf.BandedNoise(1)(z) is z


def test_bandmf_is_accounted_as_dp_sgd_over_t_over_b_steps_at_rate_b_q():
    """The amplified BandMF theorem by hand: T steps at σ with b parts sampled at b·q are ⌈T/b⌉ DP-SGD steps at
    rate b·q. b = 1 is DP-SGD's own ε."""
    sigma, q, T = 1.2, 0.02, 100
    dp = Phase(name="fft", steps=T, noise_multiplier=sigma, sample_rate=q, clip_norm=1.0)
    assert accounting.epsilon(phases=[dp], delta=DELTA, accountant="pld") == pytest.approx(
        independent_epsilon([(sigma, q, T, 1)], DELTA), rel=2e-3)
    for b in (2, 4, 8):
        band = Phase(name="fft", steps=T, noise_multiplier=sigma, sample_rate=q, clip_norm=1.0, bands=b)
        ours = accounting.epsilon(phases=[band], delta=DELTA, accountant="pld")
        assert ours == pytest.approx(independent_epsilon([(sigma, b * q, math.ceil(T / b), 1)], DELTA), rel=2e-3)
        assert accounting.epsilon(phases=[band], delta=DELTA, accountant="rdp") >= ours  # RDP: looser, for comparison


@pytest.mark.slow
@pytest.mark.parametrize("target", [1.0, 4.0])
@pytest.mark.parametrize("steps", [24, 60])
@pytest.mark.parametrize("bands", [1, 2, 4, 8])
def test_calibrated_sigma_keeps_bandmf_within_its_budget(target, steps, bands):
    phases = [Phase(name="lp", steps=steps // 3, noise_multiplier=0.0, sample_rate=0.05, clip_norm=1.0, bands=bands),
              Phase(name="fft", steps=steps - steps // 3, noise_multiplier=0.0, sample_rate=0.05, clip_norm=1.0,
                    bands=bands)]
    sigma = accounting.calibrate_sigma(target_epsilon=target, delta=DELTA, phases=phases, accountant="pld")
    calibrated = accounting.with_sigma(phases, sigma)
    assert accounting.epsilon(phases=calibrated, delta=DELTA, accountant="pld") <= target
    history = [(sigma, min(1, bands * 0.05), math.ceil(p.steps / bands), 1) for p in phases]
    assert independent_epsilon(history, DELTA) <= target * 1.002
    assert accounting.epsilon(phases=accounting.with_sigma(phases, 0.97 * sigma), delta=DELTA, accountant="pld") > target


def test_cyclic_poisson_sampling_draws_step_t_from_part_t_mod_b_at_rate_b_q():
    """The loop's own sampler: every record sits in one fixed part, is drawn only at steps of its part (so its
    participations are b apart, as the theorem needs), and the batch keeps its expected size q·n."""
    n, b, q, steps = 2000, 4, 0.05, 400
    parts = bandmf.parts(n, b, seed=3)
    assert sorted(torch.bincount(parts).tolist()) == [n // b] * b
    loop = SimpleNamespace(cancel=None, gen_sample=torch.Generator().manual_seed(1), bands=b, parts=parts,
                           dev=torch.device("cpu"))
    last, sizes = {}, []
    for k in range(steps):
        idx = Loop._sample(loop, n, q, k)
        assert bool((parts[idx] == k % b).all())
        for i in idx.tolist():
            assert i not in last or k - last[i] >= b
            last[i] = k
        sizes.append(len(idx))
    assert sum(sizes) / steps == pytest.approx(q * n, rel=0.03)


BASE = dict(strategy="lp-fft", epochs=2, batch_size=256, eval_every=6, lr_lp=0.5, lr_ft=0.01, epsilon=2.0,
            keep_weights="final")


def _run(**kw):
    with tempfile.TemporaryDirectory() as d:
        s = dpviz.run(RunConfig(**{**BASE, **kw}), cache_dir=d)
        return s, Store(d).load_model(s["run_id"])["state_dict"]


@pytest.mark.slow
def test_one_band_trains_dp_sgds_run_bit_for_bit_and_four_bands_stay_within_the_budget():
    dp, w_dp = _run()
    one, w_one = _run(mechanism="bandmf", bands=1)
    assert all(torch.equal(w_dp[k], w_one[k]) for k in w_dp)
    assert one["test_accuracy"] == dp["test_accuracy"] and one["epsilon_spent"] == dp["epsilon_spent"]
    four, _ = _run(mechanism="bandmf", bands=4)
    assert four["epsilon_spent"] <= 2.0 and [p["bands"] for p in four["phases"]] == [4, 4]
    history = [(p["noise_multiplier"], p["sample_rate"], p["steps"], 4) for p in four["phases"]]
    assert independent_epsilon(history, DELTA) <= 2.0 * 1.01


def test_bands_are_refused_where_they_mean_nothing_or_cannot_be_sampled():
    with pytest.raises(ConfigError, match="bands: 1 with mechanism dp-sgd"):
        RunConfig(bands=4)
    with pytest.raises(ConfigError, match="bands"):
        dpviz.runner.preview(RunConfig(mechanism="bandmf", bands=64, batch_size=256))  # 64 · q > 1
    with pytest.raises(ConfigError, match="mechanism: one of dp-sgd, bandmf, bandmf-momentum"):
        RunConfig(mechanism="dp-ftrl")
    with pytest.raises(ConfigError, match="mechanism: bandmf-momentum only with optimizer sgd"):
        RunConfig(mechanism="bandmf-momentum", bands=2, optimizer="adam")


def test_a_momentum_fitted_run_is_its_own_mechanism_within_the_same_budget():
    """bandmf-momentum spends what bandmf spends (the same σ, sampling and accounting), under its own key and
    label, and its noise is not bandmf's: the weights differ."""
    sgd, w_sgd = _run(mechanism="bandmf", bands=4)
    mom, w_mom = _run(mechanism="bandmf-momentum", bands=4)
    assert mom["epsilon_spent"] == sgd["epsilon_spent"] <= 2.0 and mom["run_id"] != sgd["run_id"]
    assert [p["noise_multiplier"] for p in mom["phases"]] == [p["noise_multiplier"] for p in sgd["phases"]]
    assert any(not torch.equal(w_sgd[k], w_mom[k]) for k in w_sgd)
    from dpviz import results

    assert results.config_label(RunConfig(mechanism="bandmf-momentum", bands=4).to_dict()).startswith(
        "lp-fft ε=1 BandMF-momentum b=4")


@pytest.mark.parametrize("bands", [1, 2, 4, 8])
def test_the_noise_factor_is_the_running_sums_noise_per_step_relative_to_dp_sgd(bands):
    """κ(T) = ‖1ᵀM⁻¹‖²/T, written with the dense T×T matrix M; its long-run value; and BandedNoise's own
    running sums, whose variance over draws is κ(T)·T."""
    T = 40
    m = bandmf.coefficients(bands)
    M = sum(torch.diag(torch.full((T - j,), m[j], dtype=torch.float64), -j) for j in range(bands))
    rows = torch.linalg.solve_triangular(M.T, torch.ones(T, 1, dtype=torch.float64), upper=True)  # M⁻ᵀ1
    assert bandmf.noise_factor(bands, T) == pytest.approx(float(rows.pow(2).sum()) / T, rel=1e-9)
    assert bandmf.noise_factor(bands) == pytest.approx(bandmf.noise_factor(bands, 20000), rel=2e-3)
    assert (bandmf.noise_factor(bands) < 1) == (bands > 1)
    noise, g = bandmf.BandedNoise(bands), torch.Generator().manual_seed(bands)
    total = torch.zeros(20000, dtype=torch.float64)
    for _ in range(T):
        total += noise([torch.randn(20000, generator=g, dtype=torch.float64)])[0]
    assert float(total.var()) / T == pytest.approx(bandmf.noise_factor(bands, T), rel=0.05)


def test_a_bandmf_runs_curvature_scales_its_decelerator_by_the_noise_factor(tmp_path):
    from dpviz.analyses.service import model_checkpoint
    from dpviz.privacy import curvature

    store = Store(tmp_path)
    s = dpviz.run(RunConfig(strategy="fft", epsilon=8.0, epochs=1, mechanism="bandmf", bands=4,
                            checkpoint_every=4), store=store)
    ck = model_checkpoint(store, s["run_id"], store.weight_steps(s["run_id"])[0], batch=32)
    assert ck.noise_factor == bandmf.noise_factor(4) and ck.noise_multiplier == s["phases"][0]["noise_multiplier"]
    kw = dict(gtg=1.0, gthg=2.0, trace=3.0, tr_h_sigma=4.0, noise_multiplier=2.0, batch_size=8.0, clip_norm=1.0,
              clip_factor_mean=0.5)
    plain = curvature.improvement_terms(**kw)["terms"]["decelerator"]
    assert plain == pytest.approx(4 * 3 / (64 * 0.25))
    assert curvature.improvement_terms(**kw, noise_factor=0.3)["terms"]["decelerator"] == pytest.approx(0.3 * plain)


def test_continuals_public_decelerator_carries_the_noise_factor_of_a_bandmf_run():
    """The automatic switch's decelerator on public data is κ times DP-SGD's at the same σ (same probes)."""
    from dpviz.privacy.curvature import DeceleratorMonitor

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32,))
    kw = dict(noise_multiplier=2.0, batch_size=16.0, clip_norm=1.0, clipping="abadi", threshold=0.5, seed=1)
    plain = DeceleratorMonitor(x, y, **kw).measure(model)
    banded = DeceleratorMonitor(x, y, **kw, noise_factor=bandmf.noise_factor(4)).measure(model)
    assert plain != 0 and banded == pytest.approx(bandmf.noise_factor(4) * plain, rel=1e-9)
