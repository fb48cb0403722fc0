"""Calibration never overshoots, and ε agrees with Opacus's own accountants."""

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest
from opacus.accountants import create_accountant
from opacus.accountants.utils import get_noise_multiplier

from dpviz.privacy.accounting import Phase, calibrate_sigma, epsilon, epsilon_curve, spent_at, truncate

Q = 256 / 1437
ROOT = Path(__file__).resolve().parents[1]


def phase(name: str, steps: int, *, sigma: float = 0.0, q: float = Q) -> Phase:
    return Phase(name=name, steps=steps, noise_multiplier=sigma, sample_rate=q, clip_norm=1.0)


def schedule(split):
    """Phases of the strategies: one phase, or LP then FFT."""
    return [phase(n, s) for n, s in split]


SCHEDULES = {"lp": [("lp", 60)], "fft": [("fft", 60)], "lp-fft": [("lp", 18), ("fft", 42)],
             "partial": [("partial", 60)]}


@pytest.mark.parametrize("accountant", ["prv", "rdp", "gdp"])
@pytest.mark.parametrize("strategy", list(SCHEDULES))
@pytest.mark.parametrize("target", [1.0, 8.0])
def test_calibrated_sigma_spends_at_most_target(accountant, strategy, target):
    ph = schedule(SCHEDULES[strategy])
    sigma = calibrate_sigma(target_epsilon=target, delta=1e-5, phases=ph, accountant=accountant)
    final = [dataclasses.replace(p, noise_multiplier=sigma) for p in ph]
    eps = epsilon(phases=final, delta=1e-5, accountant=accountant)
    assert eps <= target
    assert eps >= 0.98 * target  # not wastefully loose
    # The same number from Opacus's own accountant fed the reported phases.
    acc = create_accountant(mechanism=accountant)
    acc.history = [(p.noise_multiplier, p.sample_rate, p.steps) for p in final]
    if accountant == "gdp":  # Opacus's GDP reads only the last entry; phases share σ and q
        acc.history = [(sigma, Q, sum(p.steps for p in final))]
    assert acc.get_epsilon(delta=1e-5) == pytest.approx(eps, rel=1e-9)


def test_matches_opacus_get_noise_multiplier_for_one_phase():
    ours = calibrate_sigma(target_epsilon=2.0, delta=1e-5, phases=schedule([("fft", 100)]), accountant="rdp")
    theirs = get_noise_multiplier(target_epsilon=2.0, target_delta=1e-5, sample_rate=Q, steps=100,
                                  accountant="rdp", epsilon_tolerance=0.005)
    assert ours == pytest.approx(theirs, rel=0.02)


def test_more_steps_or_smaller_budget_need_more_noise():
    s1 = calibrate_sigma(target_epsilon=1.0, delta=1e-5, phases=schedule([("fft", 50)]), accountant="rdp")
    s2 = calibrate_sigma(target_epsilon=1.0, delta=1e-5, phases=schedule([("fft", 200)]), accountant="rdp")
    s3 = calibrate_sigma(target_epsilon=4.0, delta=1e-5, phases=schedule([("fft", 50)]), accountant="rdp")
    assert s2 > s1 > s3


@pytest.mark.parametrize("accountant", ["prv", "rdp"])
def test_epsilon_curve_is_monotone_upper_bound(accountant):
    ph = [phase("lp", 12, sigma=3.0), phase("fft", 28, sigma=3.0)]
    curve = epsilon_curve(phases=ph, delta=1e-5, accountant=accountant, points=8)
    vals = [curve[t] for t in sorted(curve)]
    assert vals == sorted(vals)
    assert 12 in curve and 40 in curve  # phase ends are exact points
    assert curve[40] == pytest.approx(epsilon(phases=ph, delta=1e-5, accountant=accountant))
    for t in (1, 7, 13, 33):
        assert spent_at(curve, t) >= epsilon(phases=truncate(ph, t), delta=1e-5, accountant=accountant) - 1e-9


def test_no_noise_is_infinite_and_no_steps_is_zero():
    assert math.isinf(epsilon(phases=[phase("fft", 5)], delta=1e-5))
    assert epsilon(phases=[], delta=1e-5) == 0.0
    assert calibrate_sigma(target_epsilon=math.inf, delta=1e-5, phases=schedule([("fft", 5)])) == 0.0


def test_gdp_composes_phases_instead_of_reading_the_last_one():
    two = [phase("lp", 30, sigma=2.0), phase("fft", 30, sigma=2.0)]
    one = [phase("all", 60, sigma=2.0)]
    assert epsilon(phases=two, delta=1e-5, accountant="gdp") == epsilon(phases=one, delta=1e-5, accountant="gdp")
    assert epsilon(phases=two, delta=1e-5, accountant="gdp") > epsilon(phases=two[1:], delta=1e-5, accountant="gdp")
    with pytest.raises(ValueError, match="gdp"):
        epsilon(phases=[two[0], phase("fft", 30, sigma=3.0)], delta=1e-5, accountant="gdp")


@pytest.mark.parametrize("accountant", ["rdp", "gdp", "prv"])
def test_sigma_by_batch_size_agrees_with_opacus_get_noise_multiplier(accountant):
    from dpviz.privacy.accounting import sigma_by_batch_size

    rows = sigma_by_batch_size(epsilon=2.0, delta=1e-5, epochs=5, dataset_size=1437, batch_sizes=[64, 256, 1024],
                               accountants=[accountant])
    for r in rows:
        ref = get_noise_multiplier(target_epsilon=2.0, target_delta=1e-5, sample_rate=r["sample_rate"],
                                   steps=r["steps"], accountant=accountant, epsilon_tolerance=0.005)
        assert r["noise_multiplier"] == pytest.approx(ref, rel=0.02)
        assert r["steps"] == 5 * round(1437 / r["batch_size"])
        spent = epsilon(phases=[phase("dp", r["steps"], sigma=r["noise_multiplier"], q=r["sample_rate"])],
                        delta=1e-5, accountant=accountant)
        assert spent <= 2.0 + 1e-9
    assert [r["noise_multiplier"] for r in rows] == sorted(r["noise_multiplier"] for r in rows)  # σ grows with B


def test_phase_takes_sigma_q_and_c_by_keyword_only():
    with pytest.raises(TypeError):
        Phase("fft", 10, 1.0, Q, 1.0)  # positional σ, q and C could be swapped silently
    p = Phase(name="fft", steps=10, noise_multiplier=1.0, sample_rate=Q, clip_norm=1.0)
    assert truncate([p], 4) == [dataclasses.replace(p, steps=4)]


@pytest.mark.parametrize("path", ["dpviz.analyses.hessian:Checkpoint", "dpviz.analyses.hessian:HessianResult",
                                  "dpviz.privacy.dpsgd:StepStats", "dpviz.training.prepare:Prepared"])
def test_dataclasses_carrying_sigma_q_c_or_b_are_keyword_only(path):
    import importlib

    module, name = path.split(":")
    cls = getattr(importlib.import_module(module), name)
    assert all(f.kw_only for f in dataclasses.fields(cls))
    with pytest.raises(TypeError):
        cls(*range(len(dataclasses.fields(cls))))


@pytest.mark.subprocess
def test_accounting_runs_opacus_own_accountants_without_importing_the_rest_of_opacus():
    """In a fresh process: ε from dpviz (Opacus's accountant files, loaded without its package __init__)
    equals ε from ``opacus.accountants`` imported as usual afterwards, which still works in full."""
    code = """
import sys
from dpviz.privacy import accounting as a
ph = [a.Phase(name="fft", steps=60, noise_multiplier=1.1, sample_rate=0.05, clip_norm=1.0)]
ours = {m: a.epsilon(phases=ph, delta=1e-5, accountant=m) for m in ("prv", "rdp", "gdp")}
assert not [m for m in sys.modules if m == "opacus" or m.startswith("opacus.")], "opacus left in sys.modules"
from dpviz.privacy.opacus_accountants import create_accountant as ours_create
assert type(ours_create("prv")).__module__ == "opacus.accountants.prv"
from opacus import GradSampleModule, PrivacyEngine
from opacus.accountants import create_accountant
for m, e in ours.items():
    acc = create_accountant(mechanism=m)
    acc.history = [(1.1, 0.05, 60)]
    assert float(acc.get_epsilon(delta=1e-5)) == e, (m, e)
print("ok", ours["prv"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")


@pytest.mark.subprocess
def test_an_opacus_whose_accountant_files_cannot_be_loaded_alone_is_imported_as_usual():
    """Should a later Opacus's accountants import more than the loader provides, accounting still works,
    through ``import opacus.accountants`` (simulated: the files' folder cannot be found)."""
    code = """
import importlib.util, sys
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "opacus" else real(name, *a)
from dpviz.privacy import accounting as a
ph = [a.Phase(name="fft", steps=60, noise_multiplier=1.1, sample_rate=0.05, clip_norm=1.0)]
e = a.epsilon(phases=ph, delta=1e-5, accountant="prv")
assert "opacus.accountants.prv" in sys.modules and "opacus.privacy_engine" in sys.modules, "not the plain import"
print("ok", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")


@pytest.mark.subprocess  # the accounting child (`dpviz.training.ahead`)
def test_accounting_ahead_gives_the_parents_sigma_and_curve_only_for_its_schedule():
    """`dpviz.training.ahead` (σ and the ε curve in a second process while a command imports torch) must
    give exactly what the run would compute itself, and nothing for a schedule it did not compute."""
    from dpviz.training.calibration import calibrated_phases
    from dpviz.config import RunConfig
    from dpviz.training import ahead

    cfg = RunConfig(strategy="lp-fft", epsilon=3.0)
    first, second = ahead.start(cfg), ahead.start(cfg)
    _, phases, _ = calibrated_phases(cfg, 1437, 3)  # digits, cnn
    curve = epsilon_curve(phases=phases, delta=cfg.delta, accountant=cfg.accountant)
    assert first.take(1437, 3) == (phases[0].noise_multiplier, curve)
    assert second.take(1500, 3) is None  # the run loaded another n: it calibrates itself
    assert ahead.start(cfg.replace(epsilon=math.inf)) is None  # nothing to account
    assert ahead.start(cfg.replace(dataset="mnist", data_dir="/nowhere")) is None  # n known only by loading


@pytest.mark.subprocess
def test_the_preview_of_dpvizs_own_tasks_and_the_dashboards_modules_import_no_torch():
    """The dashboard's first page previews σ as the user edits: for dpviz's own datasets and backbones
    that must not cost torch's import (≈ 2 s of the first page)."""
    code = """
import sys
import dashboard.forms, dashboard.layout, dashboard.runs, dashboard.state
from dpviz.training import calibration
from dpviz.config import RunConfig
p = calibration.preview(RunConfig(strategy="partial", epsilon=2.0))
assert "torch" not in sys.modules, "torch imported"
print(p["noise_multiplier"], p["num_blocks"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    sigma, blocks = out.stdout.split()
    assert float(sigma) > 0 and blocks == "3"


def test_a_gdp_run_is_calibrated_by_a_valid_bound_and_reports_gdp_beside_it(tmp_path):
    """GDP is a CLT approximation: σ calibrated by it overspent by up to 9 % against an independent PLD
    accountant (Google's dp-accounting). A run that names GDP must stay within budget by PRV's bound and
    by that PLD accountant; GDP's own figure is reported beside, labelled."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    from dpviz.training import calibration
    from dpviz.config import RunConfig

    for cfg in (RunConfig(strategy="lp-fft", epsilon=2.0, accountant="gdp"),
                RunConfig(strategy="fft", epsilon=3.0, delta=1e-4, accountant="gdp", epochs=8)):
        prev = calibration.preview(cfg)
        q, T, s = prev["sample_rate"], prev["total_steps"], prev["noise_multiplier"]
        pld = pld_privacy_accountant.PLDAccountant()
        pld.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), T))
        assert pld.get_epsilon(cfg.delta) <= cfg.epsilon * 1.001, (cfg, pld.get_epsilon(cfg.delta))
        gdp = epsilon(phases=[Phase(name="x", steps=T, noise_multiplier=s, sample_rate=q, clip_norm=1.0)],
                      delta=cfg.delta, accountant="gdp")
        assert gdp < cfg.epsilon  # the approximation says less than the bound it no longer calibrates


@pytest.mark.parametrize("bad,field", [({"epsilon": math.inf}, "epsilon"), ({"epochs": 0}, "epochs"),
                                       ({"batch_sizes": [64, 5000]}, "batch_sizes"), ({"delta": 0.01}, "delta"),
                                       ({"accountants": ["moments"]}, "accountants")])
def test_sigma_table_arguments_are_refused_naming_the_field(bad, field):
    from dpviz.errors import ConfigError
    from dpviz.privacy.accounting import check_sigma_table_args, sigma_by_batch_size

    good = dict(epsilon=2.0, delta=1e-5, epochs=3, dataset_size=1437, batch_sizes=[64], accountants=["rdp"])
    for f in (check_sigma_table_args, sigma_by_batch_size):
        with pytest.raises(ConfigError, match=f"^{field}: "):
            f(**(good | bad))
    with pytest.raises(ConfigError, match="^epsilon: RDP"):  # no accountant reaches ε: a ConfigError too
        sigma_by_batch_size(**(good | {"epsilon": 0.01}))


def test_the_configs_accountants_are_the_ones_accounting_composes():
    """`RunConfig.accountant`'s choices and the accountants the pure math composes are one registry."""
    from dpviz.config import RunConfig
    from dpviz.errors import ConfigError
    from dpviz.privacy import accountants, accounting

    assert accountants.names()[:4] == ("prv", "rdp", "gdp", "pld")
    for name in accountants.names():
        assert RunConfig(accountant=name).accountant == name
        assert accounting.bound_by(name) in accountants.names()
    assert accounting.bound_by("gdp") == "prv"  # an approximation: calibrated and reported by PRV's bound
    with pytest.raises(ConfigError, match="accountant: one of prv, rdp, gdp, pld"):
        RunConfig(accountant="nope")


@pytest.mark.subprocess
def test_a_default_run_never_imports_opacus_itself_and_the_hooks_path_still_does(tmp_path):
    """The default run (book-keeping, dpviz's accountants) loads none of Opacus's package: its privacy engine,
    grad samplers and optimizers cost ≈ 2 s of every run's start. Two threads starting runs at once import
    safely, and the hooks path still gets Opacus in full."""
    code = """
import sys, threading
import dpviz
cfgs = [dpviz.RunConfig(epochs=1, seed=s, lr_lp=0.5, lr_ft=0.01) for s in (0, 1)]
out = []
ts = [threading.Thread(target=lambda c=c: out.append(dpviz.run(c))) for c in cfgs]
[t.start() for t in ts]; [t.join() for t in ts]
assert len(out) == 2 and all(s["epsilon_spent"] <= 1.0 for s in out), out
left = sorted(m for m in sys.modules if m == "opacus" or m.startswith("opacus."))
assert not left, left
dpviz.run(dpviz.RunConfig(epochs=1, grad_sample_mode="hooks", strategy="fft", lr_ft=0.01))
assert "opacus.privacy_engine" in sys.modules
print("ok")
"""
    env = {**__import__("os").environ, "DPVIZ_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_a_noisy_count_beside_the_gradient_is_one_gaussian_mechanism_of_the_calibrated_sigma():
    """σ_b of the clipped count and σ_g of the gradient: a record moves the pair by at most (C, 1), so in units of
    each noise the pair is a Gaussian mechanism of multiplier (σ_g⁻² + σ_b⁻²)^(−1/2): that is the phase's σ."""
    from dpviz.privacy.accounting import Phase, grad_sigma

    p = Phase(name="fft", steps=10, noise_multiplier=2.0, sample_rate=0.1, clip_norm=1.0, count_noise=10.0)
    assert (p.grad_noise_multiplier ** -2 + 10.0 ** -2) ** -0.5 == pytest.approx(2.0)
    assert p.grad_noise_multiplier > 2.0
    assert Phase.from_dict(p.to_dict()) == p
    assert "count_noise" not in Phase(name="fft", steps=1, noise_multiplier=2.0, sample_rate=0.1, clip_norm=1).to_dict()
    assert grad_sigma(sigma=2.0, count_noise=0.0) == 2.0
    with pytest.raises(ValueError, match="clip_fraction_noise: more than σ = 2"):
        grad_sigma(sigma=2.0, count_noise=2.0)
