"""The theory lab: Ke et al. 2024's claims as properties of the simulation, the ε → noise map, the closed form,
the engine overlay, and the command line."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from dpviz.errors import ConfigError
from dpviz.theory import Setting, curves, langevin, overlay, utility
from dpviz.theory.readings import early_drops


def test_without_noise_an_aligned_head_makes_lp_fft_exactly_fft_after_a_delay():
    """LP has nothing to do when the head is already the best one: LP-FFT is FFT, started p·T later."""
    s = Setting(epsilon=math.inf, head="aligned", loss="squared", seeds=2, time=8.0, lp_share=0.25)
    c = curves(s)
    t = np.array(c.times)
    k = int(np.argmin(np.abs(t - s.lp_share * s.time)))
    assert t[k] == pytest.approx(2.0)
    for metric in ("loss", "alignment", "head_alignment"):
        delayed, fft = np.array(c.mean["lp-fft"][metric])[k:], np.array(c.mean["fft"][metric])[:len(t) - k]
        assert np.abs(delayed - fft).max() < 5e-3, metric
    assert np.ptp(c.mean["lp-fft"]["alignment"][:k + 1]) == 0  # the LP phase leaves the first layer alone


def test_with_a_random_head_and_noise_fft_distorts_the_features_more_early_than_lp_fft():
    """Theorems 3.3 and 3.4 on fixed seeds: the first layer's alignment falls more in FFT's first T/10 from a
    random head than in LP-FFT's first T/10 after its LP phase, and without noise FFT still falls while
    LP-FFT does not."""
    noisy = early_drops(curves(Setting(epsilon=1.0)))
    assert noisy["fft"] > noisy["lp-fft"] + 0.01, noisy
    clean = early_drops(curves(Setting(epsilon=math.inf)))
    assert clean["fft"] > 0.005 > clean["lp-fft"], clean


def test_the_epsilon_to_noise_map_is_monotone_and_is_its_formula():
    from opacus.accountants.analysis.rdp import get_privacy_spent

    kw = dict(delta=1e-5, clip_norm=1.0, n=128, time=20.0)
    eps = [0.1, 0.5, 1.0, 2.0, 8.0]
    scales = [langevin.noise_scale(epsilon=e, **kw) for e in eps]
    assert all(a > b > 0 for a, b in zip(scales, scales[1:])) and langevin.noise_scale(epsilon=math.inf, **kw) == 0
    for e, s in zip(eps, scales):
        assert langevin.spent(noise=s, **kw) == pytest.approx(e, rel=1e-6)  # the map inverts its formula
        rho = langevin.rdp_slope(beta=2 / s ** 2, clip_norm=1.0, n=128, time=20.0)
        assert s == pytest.approx(math.sqrt(20.0) / (128 * math.sqrt(2 * rho)))
        orders = np.array([1 + x / 10 for x in range(1, 100)] + list(range(12, 200)))
        opacus_eps, _ = get_privacy_spent(orders=orders, rdp=orders * rho, delta=1e-5)
        assert e * 0.9999 <= opacus_eps <= e * 1.01  # Opacus's conversion, on its own grid of orders


def test_lp_simulation_converges_to_the_closed_form_of_its_ornstein_uhlenbeck_process():
    s = Setting(loss="squared", epsilon=16.0, clip_norm=10.0, seeds=64, time=10.0)
    c = curves(s)
    sim, exact = np.array(c.mean["lp"]["loss"]), np.array(c.closed_form)
    assert sim[0] == pytest.approx(exact[0], rel=1e-5)
    assert sim[-1] == pytest.approx(exact[-1], rel=0.02) and np.abs(sim / exact - 1).max() < 0.1
    assert exact[-1] < 0.2 * exact[0]


def test_the_utility_curve_prefers_lp_at_small_epsilon():
    u = utility(Setting(seeds=4, time=10.0), epsilons=(0.25, 4.0), shares=(0.0, 0.5, 1.0))
    assert u.best_share["0.25"] > u.best_share["4.0"], u


def test_the_engine_overlay_trains_under_its_epsilon_close_to_its_diffusion():
    o = overlay(Setting(time=2.0, epsilon=2.0), strategy="lp", seeds=1)
    assert o["epsilon_spent"] <= 2.0 and len(o["engine"]) == len(o["diffusion"]) == len(o["times"])
    assert o["engine"][0] == pytest.approx(o["diffusion"][0], rel=1e-5)  # the same data and start
    assert o["engine"][-1] < 0.8 * o["engine"][0] and o["gap_relative"] < 0.1, o
    with pytest.raises(ConfigError, match="loss"):
        overlay(Setting(loss="squared"), strategy="fft")


@pytest.mark.subprocess
def test_the_command_line_gives_the_curves_and_rejects_bad_input(cli_env):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "dpviz", "theory", *args], env=cli_env, capture_output=True,
                              text=True, timeout=120)

    p = cli("--time", "2", "--seeds", "2", "--json")
    out = json.loads(p.stdout)["curves"]
    assert p.returncode == 0 and set(out["mean"]) == {"lp", "fft", "lp-fft"} and out["times"][-1] == 2.0
    for bad, field in ((("--width", "1"),), "width"), ((("--loss", "hinge"),), "loss"), \
            ((("--epsilon", "abc"),), "epsilon"):
        r = cli(*bad[0])
        assert r.returncode == 2 and field in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
