"""The `pld` accountant: Google's dp_accounting PLD accountant composes a run's phases, its ε agrees with
dp_accounting driven directly here, calibrating by it never overshoots, a run and the CLI use it, and
dp_accounting is imported only when PLD is used."""

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from opacus.accountants import RDPAccountant

import dpviz
from conftest import ROOT
from dpviz.errors import ConfigError
from dpviz.privacy import accounting
from dpviz.privacy.accounting import Phase, calibrate_sigma, epsilon, epsilon_curve, spent_at, truncate
from dpviz.store import Store

Q = 256 / 1437
GRID = 1e-4  # the finest grid dpviz documents for PLD (`accounting.PLD_DISCRETISATION`), dp_accounting's default


def phase(name, steps, sigma, q=Q):
    return Phase(name=name, steps=steps, noise_multiplier=sigma, sample_rate=q, clip_norm=1.0)


def expected_grid(phases, delta) -> float:
    """The grid dpviz documents (`accounting.pld_grid`), computed here with Opacus's RDP accountant:
    1e-4 · 2^k for RDP's ε in [2^k, 2^(k+1)), 1e-4 below 2."""
    rdp = RDPAccountant()
    rdp.history = [(p.noise_multiplier, p.sample_rate, p.steps) for p in phases if p.steps > 0]
    e = rdp.get_epsilon(delta=delta)
    return GRID * 2 ** (math.floor(math.log2(e)) if e >= 1 else 0)


def reference(phases, delta, grid=None) -> float:
    """ε of ``phases`` by dp_accounting's PLD accountant, driven here without dpviz: each phase its own
    Poisson-sampled Gaussian composed ``steps`` times, phase after phase (no merging); on ``grid``, else on
    dp_accounting's default grid."""
    acc = PLDAccountant() if grid is None else PLDAccountant(value_discretization_interval=grid)
    acc.compose(dp_event.ComposedDpEvent([
        dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(p.sample_rate, dp_event.GaussianDpEvent(
            p.noise_multiplier)), p.steps) for p in phases if p.steps > 0]))
    return acc.get_epsilon(delta)


def test_the_grid_is_the_documented_one():
    """1e-4 while RDP's ε is below 2, doubled with each doubling of RDP's ε: ε / grid stays within 2×."""
    assert accounting.PLD_DISCRETISATION == GRID
    for ph, delta, grid in (([phase("fft", 120, 7.5)], 1e-5, GRID),  # RDP ε ≈ 1.1
                            ([phase("fft", 120, 1.42)], 1e-5, 8 * GRID),  # ≈ 8.7
                            ([phase("lp", 20, 0.5, q=1.0), phase("fft", 100, 1.0)], 1e-6, 64 * GRID)):  # ≈ 89
        assert accounting.pld_grid(phases=ph, delta=delta) == pytest.approx(grid)
        assert grid == pytest.approx(expected_grid(ph, delta))


@pytest.mark.parametrize("phases,delta", [
    ([phase("fft", 120, 7.5)], 1e-5),  # the default task's schedule
    ([phase("fft", 2000, 1.9, q=16 / 1437)], 1e-5),
    ([phase("lp", 36, 1.2), phase("fft", 84, 3.0)], 1e-5),  # two phases, different σ
    ([phase("pub", 50, 2.0, q=0.05), phase("dp", 70, 2.0, q=0.4)], 1e-6),  # two phases, different q
    ([phase("lp", 5, 0.8, q=1.0), phase("fft", 300, 4.0, q=0.01)], 1e-4),  # full batch, then a small q
], ids=["default", "2000-steps", "two-sigmas", "two-qs", "q1-then-small"])
def test_epsilon_is_dp_accountings(phases, delta):
    ours = epsilon(phases=phases, delta=delta, accountant="pld")
    assert 0 < ours < math.inf
    assert ours == pytest.approx(reference(phases, delta, expected_grid(phases, delta)), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("sigma", [7.5, 1.42])
def test_the_grid_errs_on_the_safe_side_and_little(sigma):
    """A finer grid's ε is no larger (both are upper bounds; the finer the tighter) and within 0.01 % (under
    0.001 % measured; a 10× coarser grid adds 0.015–0.04 %): on a 1e-4 grid (ε ≈ 1) and a 4e-4 grid (ε ≈ 5)."""
    ph = [phase("lp", 36, sigma), phase("fft", 84, sigma, q=0.05)]
    assert accounting.pld_grid(phases=ph, delta=1e-5) == pytest.approx(GRID if sigma > 2 else 4 * GRID)
    ours, finer = epsilon(phases=ph, delta=1e-5, accountant="pld"), reference(ph, 1e-5, grid=2e-5)
    assert finer <= ours <= finer * 1.0001


def test_phases_with_one_sigma_and_q_compose_like_one_phase():
    """dpviz merges consecutive phases of the same mechanism (T₁ + T₂ steps of it): the same ε as
    dp_accounting composing them one after the other."""
    two = [phase("lp", 36, 7.5), phase("fft", 84, 7.5)]
    assert epsilon(phases=two, delta=1e-5, accountant="pld") == pytest.approx(reference(two, 1e-5, GRID), rel=1e-6)


def test_no_noise_is_infinite_and_no_steps_is_zero():
    assert epsilon(phases=[phase("fft", 5, 0.0)], delta=1e-5, accountant="pld") == math.inf
    assert epsilon(phases=[phase("lp", 5, 2.0), phase("fft", 5, 0.0)], delta=1e-5, accountant="pld") == math.inf
    assert reference([phase("fft", 5, 0.0)], 1e-5) == math.inf  # dp_accounting agrees
    assert epsilon(phases=[], delta=1e-5, accountant="pld") == 0.0
    assert epsilon(phases=[phase("fft", 0, 1.0)], delta=1e-5, accountant="pld") == 0.0
    assert calibrate_sigma(target_epsilon=math.inf, delta=1e-5, phases=[phase("fft", 5, 0.0)],
                           accountant="pld") == 0.0


def test_pld_bounds_tighter_than_rdp_and_close_to_prv():
    """All three are upper bounds on the same mechanism's ε; PLD and PRV are both near-exact."""
    ph = [phase("lp", 36, 2.0), phase("fft", 84, 2.0)]
    pld, prv, rdp = (epsilon(phases=ph, delta=1e-5, accountant=a) for a in ("pld", "prv", "rdp"))
    assert pld < rdp and pld == pytest.approx(prv, rel=0.02)


def random_schedules(n=20, seed=0):
    """``n`` schedules of 1 to 3 phases with their own q and steps, a target ε and δ each."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 4))
        phases = [phase(f"p{i}", int(rng.integers(1, 1500)), 0.0, q=float(10 ** rng.uniform(-3, 0)))
                  for i in range(k)]
        out.append((phases, float(10 ** rng.uniform(-0.5, 0.8)), float(rng.choice([1e-4, 1e-5, 1e-6]))))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("i", range(20))
def test_calibrating_by_pld_never_exceeds_the_target(i):
    """Random schedules (seeded): σ calibrated by PLD spends at most the target by dp_accounting's own
    PLD accountant at its default grid, and is not wastefully loose (within calibrate_sigma's tolerance)."""
    phases, target, delta = random_schedules()[i]
    sigma = calibrate_sigma(target_epsilon=target, delta=delta, phases=phases, accountant="pld")
    spent = reference([dataclasses.replace(p, noise_multiplier=sigma) for p in phases], delta)
    assert spent <= target, (phases, target, delta, sigma, spent)
    assert spent >= 0.98 * target, (phases, target, delta, sigma, spent)


@pytest.mark.slow
def test_the_epsilon_curve_is_monotone_and_exact_at_phase_ends():
    ph = [phase("lp", 12, 3.0), phase("fft", 28, 3.0, q=0.3)]
    curve = epsilon_curve(phases=ph, delta=1e-5, accountant="pld", points=8)
    vals = [curve[t] for t in sorted(curve)]
    assert vals == sorted(vals) and 12 in curve and 40 in curve
    assert curve[12] == pytest.approx(reference(ph[:1], 1e-5, expected_grid(ph[:1], 1e-5)), rel=1e-12)
    assert curve[40] == pytest.approx(reference(ph, 1e-5, expected_grid(ph, 1e-5)), rel=1e-12)
    for t in (1, 7, 13, 33):
        assert spent_at(curve, t) >= reference(truncate(ph, t), 1e-5)


@pytest.mark.slow
def test_a_pld_run_spends_at_most_its_budget(fast_cfg, cache_dir):
    cfg = fast_cfg(accountant="pld", epsilon=1.0)
    s = dpviz.run(cfg, cache_dir=cache_dir)
    assert s["accountant"] == "pld" and "epsilon_spent_bound_by" not in s  # PLD bounds its own runs
    phases = [Phase(**p) for p in s["phases"]]
    assert [p.name for p in phases] == ["lp", "fft"] and phases[0].noise_multiplier > 0
    assert 0.98 <= s["epsilon_spent"] <= 1.0
    assert s["epsilon_spent"] == pytest.approx(reference(phases, cfg.delta, expected_grid(phases, cfg.delta)), rel=1e-6)
    recorded = [v for _, v in Store(cache_dir).metrics(s["run_id"], "epsilon")["epsilon"]]
    assert recorded == sorted(recorded) and recorded[-1] == pytest.approx(s["epsilon_spent"]) and max(recorded) <= 1.0
    assert cfg.hash() != cfg.replace(accountant="prv").hash()  # a PLD run is its own run in the store


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_table_and_the_cli_include_pld(cli_env):
    import pandas as pd

    from dpviz.figures.curvature import accountants_figure
    from dpviz.privacy import accountants

    ACCOUNTANTS, ACCOUNTANT_COLORS = accountants.names(), accountants.colors()

    rows = accounting.sigma_by_batch_size(epsilon=2.0, delta=1e-5, epochs=3, dataset_size=1437, batch_sizes=[64])
    assert [r["accountant"] for r in rows] == list(ACCOUNTANTS)  # every registered one, in its order
    assert ACCOUNTANTS[:4] == ("prv", "rdp", "gdp", "pld")
    assert set(ACCOUNTANT_COLORS) == set(ACCOUNTANTS) and len(set(ACCOUNTANT_COLORS.values())) == len(ACCOUNTANTS)
    fig = accountants_figure(pd.DataFrame(rows), 2.0, 1e-5, 3)  # the Accountants page's figure
    assert {t.name: t.line.color for t in fig.data if t.showlegend}["PLD"] == ACCOUNTANT_COLORS["pld"]
    r = subprocess.run([sys.executable, "-m", "dpviz", "accountants", "--epsilon", "2", "--delta", "1e-5",
                        "--epochs", "3", "--dataset-size", "1437", "--batch-sizes", "64", "512", "--json"],
                       env=cli_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    pld = [x for x in json.loads(r.stdout) if x["accountant"] == "pld"]
    assert [x["batch_size"] for x in pld] == [64, 512]
    for x in pld:
        spent = reference([phase("dp", x["steps"], x["noise_multiplier"], q=x["sample_rate"])], 1e-5)
        assert 0.98 * 2 <= spent <= 2
    text = subprocess.run([sys.executable, "-m", "dpviz", "accountants", "--epsilon", "2", "--delta", "1e-5",
                           "--epochs", "3", "--dataset-size", "1437", "--batch-sizes", "64", "--accountants", "pld"],
                          env=cli_env, capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and text.stdout.split()[0] == "pld", text.stderr


@pytest.mark.parametrize("args,field", [
    (["accountants", "--epsilon", "2", "--delta", "1e-5", "--epochs", "3", "--dataset-size", "1437",
      "--batch-sizes", "64", "--accountants", "pld", "moments"], "accountants"),
    (["run", "--accountant", "moments", "--quiet"], "accountant"),
], ids=["accountants", "run"])
@pytest.mark.subprocess
def test_an_unknown_accountant_is_one_line_exit_2(args, field, cli_env):
    r = subprocess.run([sys.executable, "-m", "dpviz", *args], env=cli_env, capture_output=True, text=True,
                       timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"dpviz: error: {field}"), r.stderr
    assert "of prv, rdp, gdp, pld;" in lines[0] and "Traceback" not in r.stderr  # pld among the choices named


def test_without_dp_accounting_pld_is_one_line_naming_the_package(monkeypatch):
    """Where dp_accounting is not installed, a PLD config and a PLD ε say which package to install;
    the other accountants and a run without DP are unaffected."""
    import importlib.util

    from dpviz.config import RunConfig

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "dp_accounting" else real(name, *a))
    with pytest.raises(ConfigError, match=r"^accountant: .*dp-accounting.*pip install"):
        RunConfig(accountant="pld")
    RunConfig(accountant="pld", epsilon=math.inf)
    RunConfig(accountant="prv")
    for name in [m for m in sys.modules if m == "dp_accounting" or m.startswith("dp_accounting.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # `import dp_accounting` raises ImportError
    with pytest.raises(ConfigError, match=r"^accountant: .*dp-accounting"):
        epsilon(phases=[phase("fft", 10, 2.0)], delta=1e-5, accountant="pld")
    assert epsilon(phases=[phase("fft", 10, 2.0)], delta=1e-5, accountant="prv") > 0


@pytest.mark.subprocess
def test_dp_accounting_is_imported_only_when_pld_is_used():
    """dpviz's accounting, config, CLI parser and the dashboard's first-page modules never import
    dp_accounting (≈ 0.9 s) until a PLD ε is asked for, and PLD brings no torch with it."""
    code = """
import sys
import dashboard.forms, dashboard.layout, dashboard.runs, dashboard.state
from dpviz.cli import build_parser
from dpviz.config import RunConfig
from dpviz.privacy import accounting as a
from dpviz.training import calibration
build_parser()
cfg = RunConfig(accountant="pld", epsilon=2.0)
calibration.preview(RunConfig(epsilon=2.0))
assert "dp_accounting" not in sys.modules, "dp_accounting imported before PLD is used"
p = calibration.preview(cfg)
assert "dp_accounting" in sys.modules and "torch" not in sys.modules
print(p["noise_multiplier"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout) > 0
