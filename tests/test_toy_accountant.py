"""An accountant is one declaration: this file registers a toy one and dpviz picks it up everywhere.

The toy reports RDP's ε times 1.25 (a looser bound than RDP's, so still a bound). Nothing outside this file
names it: validation, calibration, a run, the run form, the Accountants page and the CLI find it in
`dpviz.privacy.accountants`.
"""

import json
import os
import subprocess
import sys

import pytest

import dpviz
from dpviz.privacy import accountants, accounting

try:  # the dashboard's test helpers (pytest puts tests/ on the path; a CLI child importing this file has none)
    from test_app import app_env, open_page  # noqa: F401
except ImportError:
    pass

TOY = "toy-rdp"
SLACK = 1.25


def _epsilon(history, delta):
    return SLACK * accounting.opacus_epsilon(history, delta, mechanism="rdp")


def _register():
    accountants.register(accountants.Accountant(name=TOY, label="toy: RDP × 1.25", color="#e377c2",
                                                epsilon=_epsilon, guess_by="rdp"))


if "test_toy_accountant" in os.environ.get("DPVIZ_PLUGINS", ""):
    _register()  # a CLI child that names this module as its plugin, as a user's module would be


@pytest.fixture
def toy():
    """The toy is registered for this file's tests only: the suite's other tests see the built-ins alone."""
    _register()
    yield TOY
    accountants.REGISTRY.pop(TOY, None)


def test_sigma_is_calibrated_by_the_toy_within_its_budget(toy):
    phase = accounting.Phase(name="dp", steps=120, noise_multiplier=0.0, sample_rate=256 / 1437, clip_norm=1.0)
    sigma = accounting.calibrate_sigma(target_epsilon=1.0, delta=1e-5, phases=[phase], accountant=toy)
    spent = accounting.epsilon(phases=accounting.with_sigma([phase], sigma), delta=1e-5, accountant=toy)
    rdp_sigma = accounting.calibrate_sigma(target_epsilon=1.0, delta=1e-5, phases=[phase], accountant="rdp")
    assert 0.99 <= spent <= 1.0 and sigma > rdp_sigma  # a looser bound needs more noise for the same ε


def test_a_run_naming_the_toy_spends_within_its_budget(toy, fast_cfg, cache_dir):
    s = dpviz.run(fast_cfg(accountant=toy, epsilon=1.0), cache_dir=cache_dir)
    assert s["accountant"] == toy and 0.98 <= s["epsilon_spent"] <= 1.0
    sigma = s["phases"][0]["noise_multiplier"]
    phases = [accounting.Phase(**{k: p[k] for k in ("name", "steps", "noise_multiplier", "sample_rate", "clip_norm")})
              for p in s["phases"]]
    assert SLACK * accounting.epsilon(phases=phases, delta=s["delta"], accountant="rdp") == pytest.approx(
        s["epsilon_spent"], rel=1e-9) and sigma > 0


@pytest.mark.slow
def test_the_toy_is_a_choice_of_the_run_form_and_of_the_accountants_page(toy, app_env):
    at = open_page("pages/runs.py")
    assert toy in at.selectbox(key="f_accountant").options
    at = open_page("pages/accountants.py")
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert TOY.upper() in {t["name"] for t in fig["data"]}  # σ by batch size, calibrated by the toy too


@pytest.mark.subprocess
def test_the_toy_is_a_choice_of_the_cli(toy, cli_env):
    env = dict(cli_env, DPVIZ_PLUGINS="tests.test_toy_accountant")
    out = subprocess.run([sys.executable, "-m", "dpviz", "accountants", "--epsilon", "2", "--delta", "1e-5",
                          "--epochs", "3", "--dataset-size", "1437", "--batch-sizes", "64", "--json"], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert toy in [r["accountant"] for r in json.loads(out)]
    bad = subprocess.run([sys.executable, "-m", "dpviz", "run", "--accountant", "nope", "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and toy in bad.stderr  # the one-line error lists it among the choices
