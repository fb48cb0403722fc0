"""The accountant seam guards the promise: a registered accountant is someone else's code whose ε picks σ and is
reported as the run's guarantee, so what it returns is checked before it is used.

Each broken accountant of the probe (ε NaN, −1, 0, a constant, a string, +∞, one that raises, half of PRV's) is
refused in one line naming it, before anything trains; a plugin may not replace a built-in accountant; the
built-ins pass every check; the check against dp_accounting's PLD runs once per answer, not per step of a search,
and only for an accountant that is not dpviz's own.
"""

import dataclasses
import math
import subprocess
import sys
import textwrap

import pytest

import dpviz
from dpviz.errors import ConfigError
from dpviz.privacy import accountants, accounting
from dpviz.privacy.accounting import Phase
from dpviz.store import Store

Q = 256 / 1437  # the default task's sampling rate
DP = Phase(name="fft", steps=120, noise_multiplier=0.0, sample_rate=Q, clip_norm=1.0)


def _prv(history, delta):
    return accountants.get("prv").epsilon(history, delta)


# The probe's broken accountants: name → (its ε function, as a plugin module would write it; words of the refusal).
BROKEN = {
    "eps-nan": ("lambda history, delta: float('nan')", "a number ≥ 0"),
    "eps-negative": ("lambda history, delta: -1.0", "a number ≥ 0"),
    "eps-zero": ("lambda history, delta: 0.0", "one step alone"),
    "eps-constant": ("lambda history, delta: 0.5", "one step alone"),
    "eps-string": ("lambda history, delta: '0.5'", "a number ≥ 0"),
    "eps-inf": ("lambda history, delta: float('inf')", "finite"),
    "eps-raises": ("lambda history, delta: 1 / 0", "ZeroDivisionError"),
    "eps-half-prv": ("lambda history, delta: 0.5 * accountants.get('prv').epsilon(history, delta)",
                     "dp_accounting's PLD"),
}


def _register(name: str) -> None:
    accountants.register(accountants.Accountant(name=name, label=name, color="#999999",
                                                epsilon=eval(BROKEN[name][0])))  # noqa: S307 - the table above


@pytest.fixture
def broken(request):
    """The accountant ``request.param`` registered for one test; the registry as it was afterwards."""
    _register(request.param)
    yield request.param
    accountants.REGISTRY.pop(request.param, None)


def one_line(e: BaseException, name: str, words: str) -> str:
    text = str(e)
    assert "\n" not in text and name in text and words in text, text
    return text


@pytest.mark.parametrize("broken", list(BROKEN), indirect=True)
def test_calibration_refuses_a_broken_accountant_in_one_line_naming_it(broken):
    with pytest.raises(accountants.Refused) as e:
        accounting.calibrate_sigma(target_epsilon=1.0, delta=1e-5, phases=[DP], accountant=broken)
    assert one_line(e.value, broken, BROKEN[broken][1]).startswith(f"accountant: {broken}: ε must be")


@pytest.mark.parametrize("broken", list(BROKEN), indirect=True)
def test_a_run_naming_a_broken_accountant_trains_nothing_and_stores_nothing(broken, fast_cfg, cache_dir):
    with pytest.raises(ConfigError) as e:
        dpviz.run(fast_cfg(accountant=broken, epsilon=1.0).fixed_rates(), cache_dir=cache_dir)
    one_line(e.value, broken, BROKEN[broken][1])
    assert Store(cache_dir).list_runs() == []  # no run, finished or otherwise: nothing trained


@pytest.mark.parametrize("name", ["prv", "rdp", "gdp", "pld"])
def test_a_built_in_accountant_may_not_be_replaced(name):
    held = accountants.REGISTRY[name]
    with pytest.raises(ConfigError, match=f"may not replace dpviz's built-in accountant; got '{name}'"):
        accountants.register(accountants.Accountant(name=name, label="mine", color="#999999", epsilon=_prv))
    assert accountants.REGISTRY[name] is held


def test_a_plugins_accountant_may_replace_another_plugins():
    try:
        accountants.register(accountants.Accountant(name="mine", label="a", color="#999999", epsilon=_prv))
        second = accountants.register(accountants.Accountant(name="mine", label="b", color="#999999", epsilon=_prv))
        assert accountants.get("mine") is second
    finally:
        accountants.REGISTRY.pop("mine", None)


def test_an_accountant_whose_epsilon_rises_with_sigma_is_refused():
    try:
        accountants.register(accountants.Accountant(name="eps-rises", label="rises", color="#999999",
                                                    epsilon=lambda history, delta: history[0][0]))
        with pytest.raises(accountants.Refused, match="eps-rises: ε must be non-increasing as σ grows"):
            accounting.calibrate_sigma(target_epsilon=1.0, delta=1e-5, phases=[DP], accountant="eps-rises")
    finally:
        accountants.REGISTRY.pop("eps-rises", None)


# The default task's schedule for each built-in; full batches and a long schedule for the bounds dpviz calibrates
# by default: (accountant, q, steps, ε, δ).
SCHEDULES = [*((name, Q, 120, 1.0, 1e-5) for name in ("prv", "rdp", "gdp", "pld")),
             *((name, q, steps, eps, 1e-5) for name in ("prv", "rdp") for q, steps, eps in ((1.0, 50, 2.0),
                                                                                          (0.01, 2000, 0.5)))]


@pytest.mark.parametrize("name,q,steps,eps,delta", SCHEDULES)
def test_the_built_ins_pass_every_check(name, q, steps, eps, delta):
    """Calibration (monotone ε, the answer's checks) and the run's ε curve, as a run that names each does."""
    ph = [Phase(name="fft", steps=steps, noise_multiplier=0.0, sample_rate=q, clip_norm=1.0)]
    sigma = accounting.calibrate_sigma(target_epsilon=eps, delta=delta, phases=ph, accountant=name)
    calibrated = accounting.with_sigma(ph, sigma)
    curve = accounting.epsilon_curve(phases=calibrated, delta=delta, accountant=accounting.bound_by(name))
    assert curve[steps] > 0 and all(math.isfinite(e) for e in curve.values())
    assert curve[steps] <= eps or name == "gdp"  # GDP's σ is its approximation's; PRV's bound reads more
    history = [(sigma, q, steps)]
    spent = accounting.epsilon(phases=calibrated, delta=delta, accountant=name)
    # a copy is not the built-in: it is held to dp_accounting's PLD, as a plugin's accountant is
    accountants.check_answer(dataclasses.replace(accountants.get(name)), history, delta, spent)
    if name in ("prv", "rdp"):  # bounds: above dp_accounting's PLD of the same schedule
        assert spent >= accountants.pld_epsilon(history, delta)


@pytest.fixture
def pld_calls(monkeypatch):
    """The schedules dp_accounting's PLD is asked for, from now on."""
    calls, pld = [], accountants.pld_epsilon
    monkeypatch.setattr(accountants, "pld_epsilon", lambda h, d, **k: calls.append(h) or pld(h, d, **k))
    accountants._pld_of.cache_clear()
    return calls


def test_the_pld_check_runs_once_per_answer_not_per_search_step(pld_calls):
    ph = [Phase(name="fft", steps=60, noise_multiplier=0.0, sample_rate=Q, clip_norm=1.0)]
    try:
        accountants.register(accountants.Accountant(name="prv-again", label="PRV again", color="#999999",
                                                    epsilon=_prv))
        sigma = accounting.calibrate_sigma(target_epsilon=1.5, delta=1e-5, phases=ph, accountant="prv-again")
        accounting.epsilon_curve(phases=accounting.with_sigma(ph, sigma), delta=1e-5, accountant="prv-again")
    finally:
        accountants.REGISTRY.pop("prv-again", None)
    assert pld_calls == [[(sigma, Q, 60)]]  # the calibrated σ's schedule, once; the curve's end is the same one


def test_a_built_in_bound_is_not_held_to_pld_at_run_time(pld_calls):
    """The tests above hold it to PLD; at run time PLD would import dp_accounting into every preview."""
    sigma = accounting.calibrate_sigma(target_epsilon=1.5, delta=1e-5, phases=[DP], accountant="prv")
    accounting.epsilon_curve(phases=accounting.with_sigma([DP], sigma), delta=1e-5, accountant="prv")
    assert pld_calls == []


def test_one_step_delta_is_the_gaussian_mechanisms_at_q_1():
    """At q = 1 a step is the Gaussian mechanism: δ(ε) = Φ(1/2σ − εσ) − e^ε·Φ(−1/2σ − εσ) (Balle & Wang 2018)."""
    from statistics import NormalDist

    phi = NormalDist().cdf
    for sigma, eps in ((0.5, 1.0), (1.0, 0.3), (3.0, 0.1), (0.8, 4.0)):
        exact = phi(1 / (2 * sigma) - eps * sigma) - math.exp(eps) * phi(-1 / (2 * sigma) - eps * sigma)
        assert accountants.one_step_delta(sigma=sigma, q=1.0, epsilon=eps) == pytest.approx(exact, rel=1e-9)


def test_one_step_delta_is_dp_accountings_for_one_sampled_step():
    from dp_accounting.pld import privacy_loss_distribution as pld

    for sigma, q, eps in ((1.0, 0.1, 0.5), (2.0, Q, 0.2), (0.7, 0.01, 1.0), (5.0, 0.5, 0.05)):
        theirs = pld.from_gaussian_mechanism(sigma, sampling_prob=q).get_delta_for_epsilon(eps)
        assert accountants.one_step_delta(sigma=sigma, q=q, epsilon=eps) == pytest.approx(theirs, rel=1e-9)


# --- the command line: one line, exit 2, nothing stored ----------------------------------------------------


def dpviz_with(tmp_path, cli_env, plugin_body: str, *argv):
    (tmp_path / "seam_plugin.py").write_text(textwrap.dedent(plugin_body))
    env = dict(cli_env, DPVIZ_PLUGINS="seam_plugin", PYTHONPATH=f"{cli_env['PYTHONPATH']}:{tmp_path}")
    return subprocess.run([sys.executable, "-m", "dpviz", *argv], env=env, capture_output=True, text=True,
                          timeout=180)


@pytest.mark.parametrize("name", ["eps-nan", "eps-inf", "eps-raises", "eps-half-prv"])  # each kind of check once
@pytest.mark.subprocess
def test_the_cli_refuses_a_broken_accountant_in_one_line(name, tmp_path, cli_env, cache_dir):
    """Its accounting child (`dpviz.training.ahead`) imports the plugin too and fails; the command says why."""
    out = dpviz_with(tmp_path, cli_env, f"""
        from dpviz.privacy import accountants
        accountants.register(accountants.Accountant(name={name!r}, label="broken", color="#999999",
                                                    epsilon={BROKEN[name][0]}))
    """, "run", "--accountant", name, "--epsilon", "1", "--epochs", "2", "--lr-lp", "0.5", "--lr-ft", "0.05",
                     "--quiet")
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(err) == 1, out.stderr
    assert err[0].startswith(f"dpviz: error: accountant: {name}: ")
    assert BROKEN[name][1] in err[0] and "Traceback" not in out.stderr
    assert Store(cache_dir).list_runs() == []


@pytest.mark.parametrize("name", ["prv", "rdp"])
@pytest.mark.subprocess
def test_a_plugin_replacing_a_built_in_accountant_is_one_line_and_nothing_runs(name, tmp_path, cli_env, cache_dir):
    out = dpviz_with(tmp_path, cli_env, f"""
        from dpviz.privacy import accountants
        prv = accountants.REGISTRY["prv"]
        accountants.register(accountants.Accountant(name={name!r}, label="mine", color="#999999",
                                                    epsilon=lambda history, delta: 0.5 * prv.epsilon(history, delta)))
    """, "run", "--epsilon", "1", "--epochs", "2", "--lr-lp", "0.5", "--lr-ft", "0.05", "--quiet")
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(err) == 1 and "DPVIZ_PLUGINS" in err[0], out.stderr
    assert "seam_plugin" in err[0] and f"got '{name}'" in err[0] and "built-in accountant" in err[0]
    assert Store(cache_dir).list_runs() == []


def test_a_schedule_calibrated_before_takes_its_sigma_with_one_call_and_an_accountant_broken_since_is_refused(
        monkeypatch, fast_cfg):
    """A process calibrates a schedule once: the same schedule again (a study's next seed, the device worker's
    next job) costs one accountant call, not a search; a plugin whose ε was broken in place since is read
    afresh and refused, as it would be on a first calibration."""
    from dpviz.training import calibration

    share = [1.0]  # what the plugin reports of PRV's ε: all of it, until it breaks
    accountants.register(accountants.Accountant(name="prv-copy", label="prv copy", color="#999999",
                                                epsilon=lambda history, delta: share[0] * _prv(history, delta)))
    try:
        calls = []
        real = accounting.epsilon
        monkeypatch.setattr(accounting, "epsilon", lambda **kw: calls.append(1) or real(**kw))
        cfg = fast_cfg(accountant="prv-copy", epsilon=1.0)
        first = calibration.calibrate(cfg, [DP])
        searched, calls[:] = len(calls), []
        assert calibration.calibrate(cfg, [DP]) == first and len(calls) == 1 < searched
        assert calibration.calibrate(cfg.replace(epsilon=2.0), [DP]) < first  # another budget: searched
        share[0] = 0.5  # broken in place: half of PRV's ε, below what PLD gives
        with pytest.raises(accountants.Refused) as e:
            calibration.calibrate(cfg, [DP])
        one_line(e.value, "prv-copy", "dp_accounting's PLD")
    finally:
        accountants.REGISTRY.pop("prv-copy", None)
