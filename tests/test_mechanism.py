"""Every private run carries its privacy check (`dpviz.privacy.check`), and the check catches each way of breaking
the mechanism, in the product: `python -m dpviz verify RUN_ID` reports it.

For every strategy, every per-sample path (book-keeping, its ghost norms on a ViT's token sequences, Opacus's
hooks, the closed-form head, the fixed-shape padded batches), every precision, BandMF's correlated noise and a
run over two processes, the run's own check must pass: each removed example's contribution equals its own
gradient clipped at C (and some reach C: the cases clip at 0.05), the noise multiplier measured from the released
noise is σ, the sampling is the accounted one, and ε recomputed by dp_accounting's PLD stays within the budget.

The second half breaks the product on purpose, on the real path, and sees the run's own check fail and `verify`
exit 1 naming what failed: a step clipping at 1.1·C, a shared clip factor at 1.1·C, noise at 0.9·σC, an update
divided by the drawn batch, an accountant reading 20 % low, a sampler that ignores BandMF's parts, a fixed-size
batch in place of Poisson sampling, BandMF's coefficients not normalised, a split batch drawing noise per chunk,
and BandMF's noise memory carried across a phase switch between phases that train the same parameters.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dpviz
from dpviz import RunConfig, strategies
from dpviz.cli.main import main
from dpviz.privacy import bandmf, dpsgd
from dpviz.strategies import PhasePlan, Strategy
from dpviz.training import loop as training_loop
from dpviz.training import shapes

from conftest import ROOT

pytestmark = pytest.mark.slow  # each case trains a short run and replays its checked steps

BASE = dict(epochs=2, batch_size=256, eval_every=6, lr_lp=0.5, lr_ft=0.01, clip_norm=0.05, epsilon=2.0,
            delta=1e-5, checkpoint_every=-1, keep_weights="none")
CASES = {  # id: the config's own fields
    # every strategy, book-keeping in FP32 (LP's head: the closed form)
    "lp": dict(strategy="lp"),
    "fft": dict(strategy="fft"),
    "lp-fft": dict(strategy="lp-fft"),
    "partial": dict(strategy="partial", tune_blocks=1),
    "continual": dict(strategy="continual", switch_step=3),
    "sparse": dict(strategy="sparse", epochs=3),
    "lora": dict(strategy="lora"),
    # every per-sample path, on full fine-tuning
    "ghost": dict(strategy="fft", backbone="vit"),  # token sequences: book-keeping's ghost norms
    "hooks": dict(strategy="fft", grad_sample_mode="hooks"),
    "padded": dict(strategy="fft", batch_shapes=2),  # fixed physical sizes: rows masked
    # every precision
    "tf32": dict(strategy="fft", precision="tf32"),
    "bf16": dict(strategy="fft", precision="bf16"),
    "fp16": dict(strategy="fft", precision="fp16"),
    # correlated noise: BandMF's noise memory, cyclic sampling over independent or equal parts
    "bandmf-1": dict(strategy="fft", mechanism="bandmf", bands=1),
    "bandmf-4": dict(strategy="fft", mechanism="bandmf", bands=4),
    "bandmf-equal": dict(strategy="fft", mechanism="bandmf", bands=4, parts="equal"),
    "bandmf-lp-fft": dict(strategy="lp-fft", mechanism="bandmf", bands=2),
    # secure randomness: the check runs while it trains, as it must
    "secure": dict(strategy="fft", randomness="secure"),
}


def checked(summary: dict) -> dict:
    chk = summary["privacy_check"]
    return {c["name"]: c for c in chk["checks"]} | {"_": chk}


@pytest.mark.parametrize("case", list(CASES))
def test_every_run_carries_a_passing_check_of_its_mechanism(case, cache_dir):
    cfg = RunConfig(**{**BASE, **CASES[case]})
    s = dpviz.run(cfg, cache_dir=cache_dir)
    got = checked(s)
    failed = [f"{n}: {c['detail']}" for n, c in got.items() if n != "_" and not c["passed"]]
    assert not failed, failed
    assert got["_"]["verdict"] == "passed" and got["_"]["checked_steps"] == 3
    assert {"sensitivity", "noise", "participation", "rate", "batch sizes", "epsilon"} <= set(got)
    contributions = [c for st in got["_"]["steps"] for c in st["contributions"]]
    assert len(contributions) == 6 and max(contributions) > 0.9  # clipping active at C = 0.05
    assert got["_"]["epsilon_recomputed"] == pytest.approx(s["epsilon_spent"], rel=0.01)
    assert got["_"]["line"].endswith(cfg.randomness)
    if cfg.bands > 1:
        assert all(st["strategy_norm"] for st in got["_"]["steps"])


# --- the product's check fails on each breakage, and `verify` says so -------------------------------------
FFT = dict(BASE, strategy="fft")


def verify_fails(cfg: dict, cache_dir, capsys, *names: str) -> str:
    """Train ``cfg`` (broken by the caller), then `python -m dpviz verify RUN_ID`: exit 1, naming ``names``."""
    s = dpviz.run(RunConfig(**cfg), cache_dir=cache_dir)
    capsys.readouterr()
    assert main(["--cache-dir", str(cache_dir), "verify", s["run_id"]]) == 1
    out = capsys.readouterr().out
    assert "privacy check FAILED" in out.splitlines()[0]
    for name in names:
        assert f"FAIL {name}:" in out, out
    return out


def test_a_step_clipping_at_more_than_the_accounted_c_fails(cache_dir, capsys, monkeypatch):
    clipped_sum = dpsgd.Stepper.clipped_sum
    monkeypatch.setattr(dpsgd.Stepper, "clipped_sum",
                        lambda self, x, y, clip_norm, *a, **k: clipped_sum(self, x, y, 1.1 * clip_norm, *a, **k))
    out = verify_fails(FFT, cache_dir, capsys, "sensitivity")
    assert "> C" in out


def test_a_shared_clip_factor_above_c_fails(cache_dir, capsys, monkeypatch):
    from dpviz.privacy import clipping

    factors = clipping.clip_factors
    monkeypatch.setattr(clipping, "clip_factors", lambda norms, clip_norm, *a, **k: factors(norms, 1.1 * clip_norm, *a, **k))
    verify_fails(FFT, cache_dir, capsys, "sensitivity")


def test_an_accountant_that_understates_epsilon_fails(cache_dir, capsys, monkeypatch):
    """The accountant's ε reads 20 % low: σ is calibrated low, every step is the mechanism its phase says and the
    run reports ε within budget; only the independent composition of the observed steps sees the overspend."""
    import dataclasses

    from dpviz.privacy import accountants

    prv = accountants.REGISTRY["prv"]
    monkeypatch.setitem(accountants.REGISTRY, "prv",
                        dataclasses.replace(prv, epsilon=lambda history, delta: 0.8 * prv.epsilon(history, delta)))
    # the seam refuses such an ε before training (tests/test_accountant_seam.py); past it, the check still sees it
    monkeypatch.setattr(accountants, "check_answer", lambda *a, **k: None)
    out = verify_fails(FFT, cache_dir, capsys, "epsilon")
    assert "ok   noise" in out and "ok   sensitivity" in out


def test_noise_not_at_sigma_c_fails(cache_dir, capsys, monkeypatch):
    noise = dpsgd.gaussian_noise
    monkeypatch.setattr(dpsgd, "gaussian_noise", lambda p, std, gen: noise(p, 0.9 * std, gen))
    verify_fails(FFT, cache_dir, capsys, "noise")


def test_an_update_divided_by_the_drawn_batch_fails(cache_dir, capsys, monkeypatch):
    step = dpsgd.private_step

    def drawn(stepper, x, y, *, expected_batch, mask=None, **k):
        ys = y if isinstance(y, list) else [y]
        real = sum(len(v) if m is None else int(m.sum()) for v, m in zip(ys, mask if isinstance(mask, list) else [mask]))
        return step(stepper, x, y, expected_batch=float(max(real, 1)), mask=mask, **k)

    monkeypatch.setattr(dpsgd, "private_step", drawn)
    verify_fails(FFT, cache_dir, capsys, "sensitivity")


def test_a_sampler_that_ignores_bandmfs_parts_fails(cache_dir, capsys, monkeypatch):
    """Every record sampled at b·q at every step while the accountant counts ⌈T/b⌉ steps at b·q."""
    sample = training_loop.Loop._sample
    monkeypatch.setattr(training_loop.Loop, "_sample",
                        lambda self, n, q, k=None: sample(self, n, q * (self.bands if k is not None else 1), None))
    verify_fails(dict(FFT, mechanism="bandmf", bands=4), cache_dir, capsys, "participation", "rate")


def test_a_fixed_size_batch_in_place_of_poisson_sampling_fails(cache_dir, capsys, monkeypatch):
    monkeypatch.setattr(training_loop.Loop, "_sample",
                        lambda self, n, q, k=None: torch.randperm(n, generator=self.gen_sample)[:round(q * n)])
    verify_fails(FFT, cache_dir, capsys, "batch sizes")


def test_bandmf_coefficients_not_normalised_fail(cache_dir, capsys, monkeypatch):
    """‖m‖ = 1.22 at b = 4: σ effectively 18 % low. The check reads the strategy from the released noise, not
    through the product's coefficients, so it sees it."""
    coefficients = bandmf.coefficients
    monkeypatch.setattr(bandmf, "coefficients", lambda b, m=0.0: tuple(1.22 * c for c in coefficients(b, m))
                        if b > 1 else coefficients(b, m))
    out = verify_fails(dict(FFT, mechanism="bandmf", bands=4), cache_dir, capsys, "noise")
    assert "0.82" in out


def test_a_split_batch_drawing_noise_per_chunk_fails(cache_dir, capsys, monkeypatch):
    """Physical sizes below the drawn batches split every step into chunks (as a batch beyond the largest size
    is), and the broken step draws the noise once per chunk."""
    monkeypatch.setattr(shapes, "physical_sizes", lambda n, q, count: (96, 128))
    step = dpsgd.private_step

    def per_chunk(stepper, x, y, *, mask=None, generator, **k):
        if not isinstance(y, list) or len(y) < 2:
            return step(stepper, x, y, mask=mask, generator=generator, **k)
        grads = None
        for xc, yc, mc in zip(x, y, mask):  # each chunk: its own clipped sum and its own noise
            step(stepper, xc, yc, mask=mc, generator=generator, **k)
            g = [p.grad.clone() for p in stepper.params]
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        for p, g in zip(stepper.params, grads):
            p.grad = g
        return dpsgd.StepStats(loss=0.0, train_accuracy=0.0, batch_size=sum(int(m.sum()) for m in mask))

    monkeypatch.setattr(dpsgd, "private_step", per_chunk)
    verify_fails(dict(FFT, batch_shapes=2), cache_dir, capsys, "noise")


class TwiceFullFineTune(Strategy):
    """Two private phases that train the same parameters: each must start BandMF's noise memory afresh."""

    name, label, color = "twice-fft", "full fine-tuning, in two phases", "#999999"
    lr_fields = ("lr_ft",)

    def plan(self, *, total_steps, steps_per_epoch, num_blocks):
        half = total_steps // 2
        return [PhasePlan(name="first", steps=half, lr=self.cfg.lr_ft),
                PhasePlan(name="second", steps=total_steps - half, lr=self.cfg.lr_ft)]


@pytest.fixture
def twice():
    strategies.register(TwiceFullFineTune)
    yield TwiceFullFineTune.name
    strategies.REGISTRY.pop(TwiceFullFineTune.name, None)


def test_noise_memory_carried_across_a_phase_switch_fails(twice, cache_dir, capsys, monkeypatch):
    cfg = dict(FFT, strategy=twice, mechanism="bandmf", bands=4, epochs=3)
    assert dpviz.run(RunConfig(**cfg), cache_dir=cache_dir)["privacy_check"]["verdict"] == "passed"
    made = []

    class Carried(bandmf.BandedNoise):  # a new phase's memory starts where the last phase's ended
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            if made:
                self.memory = made[-1].memory
            made.append(self)

    monkeypatch.setattr(bandmf, "BandedNoise", Carried)
    out = verify_fails(dict(cfg, seed=1), cache_dir, capsys, "noise")
    assert "earlier phase's noise memory" in out


@pytest.mark.subprocess
def test_a_two_process_run_carries_a_passing_check_on_every_rank(tmp_path):
    """torchrun, two ranks (gloo): every rank replays the checked steps alike (their collectives pair up), rank 0
    removes its rows; the noise enters once, at σ·C, and rank 0's summary carries the check."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DPVIZ_CACHE_DIR": str(tmp_path / "cache"),
           "DPVIZ_BACKGROUND_ANALYSES": "off"}
    flags = ["--strategy", "fft", "--epochs", "2", "--lr-ft", "0.01", "--clip-norm", "0.05", "--epsilon", "2",
             "--checkpoint-every", "-1", "--keep-weights", "none", "--json", "--quiet"]
    run = subprocess.run([str(Path(sys.executable).with_name("torchrun")), "--nproc-per-node", "2", "--master-port",
                          "29541", "-m", "dpviz", "run", *flags], capture_output=True, text=True, env=env, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout[run.stdout.index("{"):])
    assert summary["world_size"] == 2
    got = checked(summary)
    assert got["_"]["verdict"] == "passed", got["_"]["line"]
    assert len([c for st in got["_"]["steps"] for c in st["contributions"]]) == 6


# --- the clip fraction inside ε -------------------------------------------------------------------------
def test_a_privatised_clip_fraction_is_paid_for_inside_epsilon(cache_dir):
    """clip_fraction_noise σ_b: each step also releases the clipped count plus N(0, σ_b²); the pair is one
    Gaussian mechanism of the calibrated σ, so the gradient's noise rises to σ_g = 1/√(σ⁻² − σ_b⁻²), ε stays within
    the budget, and the check reads the count's noise off the releases."""
    from dpviz.privacy import release
    from dpviz.store import Store

    s = dpviz.run(RunConfig(**FFT, clip_fraction_noise=12.8), cache_dir=cache_dir)
    phase = s["phases"][0]
    assert phase["count_noise"] == 12.8
    assert phase["grad_noise_multiplier"] == pytest.approx((phase["noise_multiplier"] ** -2 - 12.8 ** -2) ** -0.5)
    assert s["epsilon_spent"] <= FFT["epsilon"]
    got = checked(s)
    assert got["_"]["verdict"] == "passed" and got["count noise"]["passed"], got["_"]["line"]
    released = [v for _, v in Store(cache_dir).metrics(s["run_id"], "clip_fraction_dp")["clip_fraction_dp"]]
    exact = [v for _, v in Store(cache_dir).metrics(s["run_id"], "clip_fraction")["clip_fraction"]]
    assert len(released) == phase["steps"] and released != exact
    assert any("clip_fraction_dp" in c for c in release.statement(s)["covered"])
    assert release.metric_label("clip_fraction_dp") == "clip_fraction_dp"  # inside ε: no label
    assert release.metric_label("clip_fraction").endswith("(not covered by ε)")


def test_a_clip_fraction_released_without_its_noise_fails(cache_dir, capsys, monkeypatch):
    noise = dpsgd.gaussian_noise
    monkeypatch.setattr(dpsgd, "gaussian_noise", lambda p, std, gen: noise(p, std if p.dim() else 0.0, gen))
    verify_fails(dict(FFT, clip_fraction_noise=12.8), cache_dir, capsys, "count noise")
