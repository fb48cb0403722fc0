"""Privacy audits: the bound math, and canaries in real (small) training runs."""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dpviz import strategies
from dpviz.audit import AuditSpec, audit, bounds
from dpviz.config import RunConfig
from dpviz.store import Store


def _jax_privacy_auditing():
    """jax_privacy's auditing.py, loaded by path (its package imports jax; this file needs dp_accounting)."""
    root = Path(importlib.util.find_spec("jax_privacy").submodule_search_locations[0])
    spec = importlib.util.spec_from_file_location("jax_privacy_auditing", root / "auditing.py")
    mod = sys.modules.setdefault("jax_privacy_auditing", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(mod)  # its dataclasses look their module up in sys.modules
    return mod


def test_p_value_is_the_binomial_tail_and_all_right_guesses_have_a_closed_form():
    for r, v, eps in ((20, 15, 0.7), (50, 50, 2.0), (7, 3, 0.1)):
        p = math.exp(eps) / (1 + math.exp(eps))
        brute = sum(math.comb(r, k) * p ** k * (1 - p) ** (r - k) for k in range(v, r + 1))
        assert bounds.p_value_one_run(m=100, guesses=r, correct=v, epsilon=eps, delta=0) == pytest.approx(brute)
    for r, alpha in ((10, 0.05), (200, 0.01)):  # δ = 0, all r right: p^r = α ⇒ ε = log(α^(1/r) / (1 − α^(1/r)))
        a = alpha ** (1 / r)
        got = bounds.epsilon_one_run(m=1000, guesses=r, correct=r, delta=0, significance=alpha)
        assert got == pytest.approx(math.log(a / (1 - a)), abs=1e-5)


@pytest.mark.parametrize("m,r,v", [(1000, 200, 180), (1000, 1000, 1000), (200, 50, 40), (1000, 600, 420),
                                   (100, 100, 60)])
def test_bounds_match_jax_privacys_auditing(m, r, v):
    ref = _jax_privacy_auditing()
    for delta, sig in ((1e-5, 0.05), (1e-3, 0.01)):
        ours = bounds.epsilon_one_run(m=m, guesses=r, correct=v, delta=delta, significance=sig)
        assert ours == pytest.approx(ref._epsilon_one_run(0, m, r, v, sig, delta), abs=1e-4)
        ours = bounds.epsilon_one_run_fdp(m=m, guesses=r, correct=v, delta=delta, significance=sig)
        assert ours == pytest.approx(ref._epsilon_one_run_fdp(0, m, r, v, sig, delta), abs=1e-4)
    rng = np.random.default_rng(0)
    scores, included = rng.normal(size=300), rng.random(300) < 0.5
    scores[included] += 1.0
    pairs = (scores[included][:, None] > scores[~included][None, :]).mean()  # P[in outscores out], no ties
    assert bounds.auc(scores, included) == pytest.approx(pairs)
    # jax_privacy's AUROC also allows randomising between thresholds (the ROC's convex hull): never less
    assert ref.CanaryScoreAuditor(scores[included], scores[~included]).attack_auroc() >= pairs


def test_the_stated_confidence_covers_both_bounds_together():
    """ε_lb is the larger of two bounds at the best k of the grid: one Bonferroni correction over both bounds and
    every k, so each test runs at (1 − confidence)/(2·|grid|); each bound alone at 1 − confidence would claim more."""
    m, conf = 400, 0.95
    rng = np.random.default_rng(1)
    included = rng.random(m) < 0.5
    scores = rng.normal(size=m) + 1.5 * included

    def best_at(sig):
        out = 0.0
        for k in bounds.grid(m):
            r, v = bounds.guess_counts(scores, included, k)
            out = max(out, bounds.epsilon_one_run(m=m, guesses=r, correct=v, delta=1e-5, significance=sig),
                      bounds.epsilon_one_run_fdp(m=m, guesses=r, correct=v, delta=1e-5, significance=sig))
        return out

    each = (1 - conf) / (2 * len(bounds.grid(m)))
    got = bounds.best_bounds(scores, included, delta=1e-5, confidence=conf)
    assert max(got["epsilon_lb"], got["epsilon_lb_fdp"]) == pytest.approx(best_at(each), abs=1e-5)
    assert best_at(each) < best_at(2 * each)  # each bound alone at the stated confidence: a larger ε_lb
    full = [f(m=m, guesses=m, correct=m, delta=1e-5, significance=each)
            for f in (bounds.epsilon_one_run, bounds.epsilon_one_run_fdp)]
    assert bounds.ceiling(m=m, delta=1e-5, confidence=conf) == pytest.approx(max(full), abs=1e-5)
    fam = bounds.family(m, conf)
    assert fam["bound_significance"] == pytest.approx(0.025) and fam["test_significance"] == pytest.approx(each)
    assert "both bounds together" in fam["confidence_covers"] and "Gaussian trade-off" in fam["fdp_assumption"]


def _eps_lb(r: dict) -> float:
    return max(r["epsilon_lb"], r["epsilon_lb_fdp"])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return Store(tmp_path_factory.mktemp("audit-store"))


def test_the_ideal_attacks_eps_lb_is_a_spread_not_one_draw():
    """One run's ε_lb is random for the exact mechanism too: single draws differ by more than the measured
    audits' typical distance from the median, so the page judges a measured ε_lb against the spread."""
    from dpviz.audit import bounds
    from dpviz.audit.canaries import inclusion_bits

    inc, kw = inclusion_bits(1000, 0), dict(steps=100, sample_rate=0.06, noise_multiplier=3.0)
    one = [max(b["epsilon_lb"], b["epsilon_lb_fdp"]) for b in
           (bounds.best_bounds(bounds.ideal_scores(inc, seed=s, **kw), inc, delta=1e-5, confidence=0.95)
            for s in range(6))]
    assert max(one) - min(one) > 0.1, one  # a single draw is no limit for another run's
    spread = bounds.ideal_spread(inc, seed=0, delta=1e-5, confidence=0.95, **kw)
    assert spread["draws"] == 20 and spread["low"] < spread["median"] < spread["high"], spread
    assert spread["high"] - spread["low"] > 0.1 and spread["median"] < 0.3


def test_without_noise_white_box_canaries_reach_the_ceiling_and_audits_are_not_runs(store):
    cfg = RunConfig(epsilon=math.inf)
    r = audit(cfg, AuditSpec(canaries=200), store=store)
    assert _eps_lb(r) >= 0.9 * r["ceiling"], r  # nothing hides them
    assert r["bound_significance"] == pytest.approx(0.025) and "Gaussian trade-off" in r["fdp_assumption"]
    from dpviz.audit import readings
    from dpviz.figures import audit as audit_figures

    fig = audit_figures.bounds_figure(r)  # the figure and its export's caption say both
    title = fig.layout.title.text.replace("<br>", " ")  # wrapped to fit a column
    assert "both bounds together" in title and any("Gaussian" in y for y in fig.data[0].y)
    assert "both bounds together" in readings.caption(r) and "Gaussian trade-off" in readings.caption(r)
    assert r["n_train"] == 1437 + r["included"]  # canaries count in n (and so in q) like real records
    assert r["sample_rate"] == pytest.approx(cfg.batch_size / r["n_train"])
    again = audit(cfg, AuditSpec(canaries=200), store=store)
    assert again["cached"] and again["epsilon_lb"] == r["epsilon_lb"]
    assert store.list_runs() == [] and store.audits(r["config_hash"])[0]["audit_key"] == r["audit_key"]


@pytest.mark.parametrize("broken", ["noise x 0.1", "clipping skipped"])
def test_a_white_box_audit_catches_a_broken_mechanism(broken, monkeypatch, store):
    """Break the mechanism while the accountant still believes the calibrated σ: ε_lb must exceed ε."""
    from dpviz.privacy import clipping, dpsgd

    if broken == "noise x 0.1":
        real = dpsgd.gaussian_noise
        monkeypatch.setattr(dpsgd, "gaussian_noise", lambda p, std, gen: real(p, 0.1 * std, gen))
    else:
        monkeypatch.setattr(clipping, "clip_factors", lambda norms, c, clipping="abadi", mask=None: norms.new_ones(norms.shape))
    cfg = RunConfig(strategy="fft", epsilon=1.0, epochs=10, seed=3)
    r = audit(cfg, AuditSpec(canaries=500), store=store, force=True)
    assert r["epsilon_spent"] <= 1.0 and _eps_lb(r) > 1.0, r


@pytest.mark.parametrize("beta", [0.0, 0.9], ids=["bandmf", "bandmf-momentum"])
def test_bandmf_canaries_take_part_by_their_part_and_are_scored_on_the_decorrelated_releases(beta):
    """A synthetic BandMF release (b = 3, 11 steps: the last blocks cut short) scored step by step equals the
    score written with the dense T×T matrix M: y = M·x, then each canary's blocks of b steps from its part's
    steps, each the likelihood ratio of one participation at rate b·q; and each step adds only canaries of
    that step's part, at about rate b·q."""
    from dpviz.audit.canaries import GradientCanaries, inclusion_bits
    from dpviz.privacy import bandmf

    m, D, T, b, q, sigma = 40, 50, 11, 3, 0.2, 0.7
    inc = inclusion_bits(m, 3)
    can = GradientCanaries(inc, seed=3)
    can.sample_rate = q
    can.enter_phase(b, beta)
    p, noise, g = torch.nn.Parameter(torch.zeros(D)), bandmf.BandedNoise(b, beta), torch.Generator().manual_seed(1)
    _, U = can._directions([p])  # (m, D): every coordinate (D ≤ MAX_COORDS)
    X, took = [], []
    for t in range(T):
        p.grad = torch.zeros(D)
        can.add([p], clip_norm=1.0)
        a = torch.linalg.lstsq(U.T, p.grad.double().unsqueeze(1)).solution.squeeze(1)  # (m,) each canary's part
        took.append(a.round(decimals=6) != 0)
        assert torch.allclose(a[took[-1]], torch.ones(int(took[-1].sum()), dtype=torch.float64))  # clipped to C
        p.grad = (p.grad + noise([sigma * torch.randn(D, generator=g)])[0]) / 8.0
        X.append(U @ p.grad.double() * 8.0)
        can.observe([p], scale=8.0, noise_std=sigma, clip_norm=1.0)
    took = torch.stack(took)  # (T, m)
    parts = can._part  # each canary's part, assigned as the run assigns its records (equal split by default)
    assert sorted(torch.bincount(parts, minlength=b).tolist()) == [m // b, m // b, m // b + 1]
    assert all(bool((parts[took[t]] == t % b).all()) for t in range(T)) and not took[:, ~torch.from_numpy(inc)].any()
    assert 0.5 < took.sum().item() / (inc.sum() * T / b * b * q) < 1.6  # participations at rate b·q per own step

    coef = torch.tensor(bandmf.coefficients(b, beta), dtype=torch.float64)
    M = sum(torch.diag(torch.full((T - j,), float(coef[j]), dtype=torch.float64), -j) for j in range(b))
    Y = M @ torch.stack(X)  # (T, m): the releases decorrelated
    a = float(can._contribution(1.0, "abadi")[0])  # C, as the clip factors compute it
    want = torch.zeros(m, dtype=torch.float64)
    for c in range(m):
        for s in range(int(parts[c]), T, b):
            k = min(b, T - s)
            dot, norm2 = (coef[:k] * Y[s:s + k, c]).sum(), (coef[:k] ** 2).sum()
            want[c] += torch.logaddexp(torch.tensor(math.log1p(-b * q), dtype=torch.float64),
                                       math.log(b * q) + (a * dot - a * a * norm2 / 2) / sigma ** 2)
    assert np.allclose(can.final_scores(), want.numpy(), rtol=1e-9, atol=1e-9)


BANDMF = ([("fft", 1.0, 2, "bandmf"), ("fft", 4.0, 4, "bandmf"), ("fft", 4.0, 4, "bandmf-momentum")]
          + [(s, 4.0, 2, "bandmf") for s in strategies.names()])


@pytest.mark.parametrize("strategy,eps,bands,mechanism", BANDMF,
                         ids=[f"{s}-{e:g}-b{b}" + "-momentum" * (m != "bandmf") for s, e, b, m in BANDMF])
def test_a_bandmf_run_stays_above_its_white_box_audit(strategy, eps, bands, mechanism, store):
    cls = strategies.get(strategy)
    cfg = RunConfig(strategy=strategy, epsilon=eps, epochs=max(3, cls.min_epochs), seed=1, mechanism=mechanism,
                    bands=bands)
    r = audit(cfg, AuditSpec(canaries=300, confidence=0.99, seed=7), store=store)
    assert r["epsilon_spent"] <= eps and _eps_lb(r) <= eps, r
    assert r["config"]["mechanism"] == mechanism and r["ideal"]["spread"]["high"] <= r["ceiling"]


def test_a_white_box_audit_catches_too_little_correlated_noise(monkeypatch, store):
    """BandMF's noise at a tenth of σC while the accountant believes the calibrated σ: ε_lb exceeds ε."""
    from dpviz.privacy import dpsgd

    real = dpsgd.gaussian_noise
    monkeypatch.setattr(dpsgd, "gaussian_noise", lambda p, std, gen: real(p, 0.1 * std, gen))
    cfg = RunConfig(strategy="fft", epsilon=1.0, epochs=10, seed=3, mechanism="bandmf", bands=2)
    r = audit(cfg, AuditSpec(canaries=500), store=store, force=True)
    assert r["epsilon_spent"] <= 1.0 and _eps_lb(r) > 1.0, r


def _ignores_parts(self, n, q, k=None):
    """A broken sampler: under BandMF every record at rate b·q at every step, whatever its part (b times the
    participations the accountant counts); DP-SGD's Poisson sampling as it is."""
    u = torch.rand(n, generator=self.gen_sample)
    return (u.to(self.dev) < (q if k is None else self.bands * q)).nonzero().squeeze(1)


@pytest.mark.slow  # a full audit / a two-trial search: the rest tier
def test_white_box_canaries_follow_the_runs_sampler_and_catch_one_that_ignores_bandmfs_parts(monkeypatch, store):
    """The canaries are sampled by the run's own `Loop._sample`, so a sampler that ignores BandMF's parts
    (while the accountant counts ⌈T/b⌉ participations at rate b·q) samples them wrongly too, and the audit,
    scoring under the claimed mechanism, shows ε_lb above ε; with the sampler intact it stays below."""
    from dpviz.training import loop

    cfg = RunConfig(strategy="fft", epsilon=1.0, epochs=10, seed=3, mechanism="bandmf", bands=16,
                    batch_size=64).fixed_rates()
    honest = audit(cfg, AuditSpec(canaries=500), store=store, force=True)
    assert honest["epsilon_spent"] <= 1.0 and _eps_lb(honest) <= 1.0, honest
    monkeypatch.setattr(loop.Loop, "_sample", _ignores_parts)
    r = audit(cfg, AuditSpec(canaries=500), store=store, force=True)
    assert r["epsilon_spent"] <= 1.0 and r["epsilon_lb"] > 1.0 and r["epsilon_lb_fdp"] > 1.0, r


def test_black_box_canaries_are_records_of_the_training_set_sampled_by_the_runs_sampler(monkeypatch, store):
    """Input canaries join the training split: the run's `Loop._sample` draws them among its n records and
    BandMF's parts cover them, like every record."""
    from dpviz.training import loop

    real, seen = loop.Loop._sample, []

    def recording(self, n, q, k=None):
        idx = real(self, n, q, k)
        seen.append((n, len(self.parts), idx.cpu()))
        return idx

    monkeypatch.setattr(loop.Loop, "_sample", recording)
    cfg = RunConfig(strategy="fft", epsilon=4.0, epochs=2, seed=3, mechanism="bandmf", bands=2).fixed_rates()
    r = audit(cfg, AuditSpec(canaries=100, threat="black-box"), store=store, force=True)
    n = 1437 + r["included"]
    assert r["n_train"] == n and {(a, b) for a, b, _ in seen} == {(n, n)}, r["n_train"]
    canaries = torch.cat([idx for *_, idx in seen])
    canaries = canaries[canaries >= 1437]  # the included canaries sit after the data's records
    assert len(canaries.unique()) > 0.5 * r["included"]


CASES = [(s, eps, {}) for s in strategies.names() for eps in (1.0, 4.0)] + [
    ("fft", 4.0, {"grad_sample_mode": "hooks"}), ("fft", 4.0, {"clipping": "auto-s"})]


@pytest.mark.parametrize("strategy,eps,extra", CASES, ids=[f"{s}-{e:g}-{'-'.join(x.values()) or 'bk'}"
                                                          for s, e, x in CASES])
def test_every_strategy_and_per_sample_path_stays_above_its_audit(strategy, eps, extra, store):
    cls = strategies.get(strategy)
    cfg = RunConfig(strategy=strategy, epsilon=eps, epochs=max(3, cls.min_epochs), seed=1, **extra)
    r = audit(cfg, AuditSpec(canaries=300, confidence=0.99, seed=7), store=store)
    assert r["epsilon_spent"] <= eps and _eps_lb(r) <= eps, r
    spread = r["ideal"]["spread"]  # the ideal attack over 20 simulated runs of the exact mechanism
    assert spread["draws"] == 20 and spread["low"] <= spread["median"] <= spread["high"] <= r["ceiling"]
    if (strategy, eps) == ("fft", 4.0) and not extra:  # the black-box threat on the same run
        b = audit(cfg, AuditSpec(canaries=300, confidence=0.99, seed=7, threat="black-box"), store=store)
        assert b["threat"] == "black-box" and _eps_lb(b) <= eps and b["n_train"] == 1437 + b["included"]


def test_a_sweep_resumes_from_the_store_draws_the_diagonal_and_fills_the_run_table(cache_dir):
    import threading

    from dpviz import figures, results, runner
    from dpviz import audit as dpviz_audit
    from dpviz.audit import sweep

    store, base, spec = Store(cache_dir), RunConfig(strategy="lp", epochs=3), AuditSpec(canaries=100)
    axes = dict(strategies=["lp"], epsilons=[math.inf, 1.0], threats=["white-box"])
    stop = threading.Event()
    stop.set()
    assert sweep.sweep(base, spec, store=store, cancel=stop, **axes) == []  # cancelled before its first audit
    seen = []
    rows = sweep.sweep(base, spec, store=store, progress=lambda *a: seen.append(a), **axes)
    assert [r["epsilon"] for r in rows] == [1.0, None] and seen[-1][:2] == (2, 2)
    assert rows[1]["epsilon_lb"] > rows[0]["epsilon_lb"]  # no noise: the canaries show
    assert sweep.stored(base, spec, store=store, **axes) == rows  # answered without training
    fig = figures.audit.sweep_figure(rows)
    names = [t.name for t in fig.data]
    assert "ε_lb = ε (accountant's bound)" in names and any(n.startswith("ceiling") for n in names)
    assert fig.layout.xaxis.type == "log" and "∞" in fig.layout.xaxis.ticktext
    report = store.audits()[-1]  # the ε = 1 audit (oldest first from the end)
    roc = figures.audit.roc_figure(report, *dpviz_audit.roc(report))
    assert roc.layout.xaxis.type == roc.layout.yaxis.type == "log" and min(roc.data[0].x) > 0
    run = runner.run(base.replace(epsilon=1.0), store=store)
    table = results.final_table(store, [run["run_id"]])
    assert table.loc[0, "audit_epsilon_lb"] == rows[0]["epsilon_lb"] and table.loc[0, "audit_canaries"] == 100
    with pytest.raises(Exception, match="threats"):
        sweep.plan(base, strategies=["lp"], epsilons=[1.0], threats=["grey-box"])


@pytest.mark.subprocess
def test_the_command_line_audits_sweeps_and_rejects_bad_input_with_exit_2(cli_env):
    import json
    import subprocess
    import sys

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "dpviz", "audit", "--strategy", "lp", "--epochs", "3",
                               "--canaries", "100", "--quiet", *args], env=cli_env, capture_output=True, text=True,
                              timeout=300)

    one = cli("--json")
    r = json.loads(one.stdout)
    assert one.returncode == 0 and r["audit"] and _eps_lb(r) <= r["epsilon_spent"] <= 1.0
    swept = cli("--sweep", "--sweep-epsilons", "1", "--sweep-threats", "white-box", "--json")
    rows = json.loads(swept.stdout)
    assert [x["audit_key"] for x in rows] == [r["audit_key"]]  # the same audit, answered from the store
    for bad, field in ((("--canaries", "5"), "canaries"), (("--sweep", "--sweep-threats", "grey-box"), "threats"),
                       (("--sweep", "--sweep-epsilons", "-1"), "epsilon")):
        p = cli(*bad)
        assert p.returncode == 2 and field in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_an_audits_time_is_estimated_from_what_this_store_measured(tmp_path):
    from dpviz.audit import time_estimate

    st, cfg = Store(tmp_path), RunConfig(strategy="fft", epochs=2)
    assert time_estimate(st, cfg).startswith("No audit or run of this strategy")
    r = audit(cfg, AuditSpec(canaries=100), store=st)
    text = time_estimate(st, cfg)
    assert text.startswith("Stored audits of fft on digits (cnn) took ") and "median of 1" in text, text
    assert time_estimate(st, cfg.replace(strategy="lp")).startswith("No audit"), r["wall_time_s"]
