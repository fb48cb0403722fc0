"""Every DP step of a real run is the Gaussian mechanism its accountant counts, measured from what the step did.

For every strategy, every per-sample path (book-keeping, its ghost norms on a ViT's token sequences, Opacus's
hooks, the closed-form head, the fixed-shape padded batches), every precision, BandMF's correlated noise (whose
fresh draws are read back from its noise memory) and a run over two processes,
`mechanism.Probe` measures checked steps of a real run: each removed example's contribution (≤ C, some at C,
and equal to its own gradient clipped at C), the noise's standard deviation (σ·C) and the divisor (q·n, the
accountant's), against the σ, C and q of the run's phases; `mechanism.check_epsilon` composes the steps it
saw with dp_accounting's PLD, independently of dpviz's accounting. The last tests break the product on
purpose — a step that clips at 1.1·C but accounts C, a shared clip factor at 1.1·C, an accountant whose ε
reads low (so σ is calibrated low and the run's own check agrees), noise at 0.9·σC, an update divided by the
drawn batch — and see the harness fail on each.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dpviz
from dpviz import RunConfig, runner
from dpviz.privacy import dpsgd

from conftest import ROOT
import mechanism

pytestmark = pytest.mark.slow  # each case trains a short run and replays its checked steps ≈ 20 times

BASE = dict(epochs=2, batch_size=256, eval_every=6, lr_lp=0.5, lr_ft=0.01, clip_norm=0.05, epsilon=2.0,
            delta=1e-5, checkpoint_every=-1, keep_weights="none")
CASES = {  # id: (the config's own fields, precision the tolerance is read at)
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
    "padded": dict(strategy="fft", batch_shapes=2),  # fixed physical sizes: rows masked, big batches split
    # every precision
    "tf32": dict(strategy="fft", precision="tf32"),
    "bf16": dict(strategy="fft", precision="bf16"),
    "fp16": dict(strategy="fft", precision="fp16"),
    # correlated noise: BandMF's noise memory, cyclic sampling and its accounting
    "bandmf-1": dict(strategy="fft", mechanism="bandmf", bands=1),
    "bandmf-4": dict(strategy="fft", mechanism="bandmf", bands=4),
    "bandmf-lp-fft": dict(strategy="lp-fft", mechanism="bandmf", bands=2),
}


def first_steps(cfg: RunConfig) -> set[int]:
    """The first and third private step of every phase (0-based over the run)."""
    out, at = set(), 0
    for p in runner.preview(cfg)["phases"]:
        out |= {at, at + min(2, p["steps"] - 1)}
        at += p["steps"]
    return out


def measured_run(cfg: RunConfig, cache_dir, monkeypatch):
    probe = mechanism.Probe(check=first_steps(cfg))
    monkeypatch.setattr(dpsgd, "private_step", probe)
    summary = dpviz.run(cfg, cache_dir=cache_dir)
    return summary, probe


def check(cfg, summary, probe):
    mechanism.check_steps(probe.records, phases=summary["phases"], n=summary["n_train"], precision=cfg.precision)
    return mechanism.check_epsilon(summary, probe, epsilon=cfg.epsilon, delta=cfg.delta)


@pytest.mark.parametrize("case", list(CASES))
def test_every_checked_step_is_the_accounted_gaussian_mechanism(case, cache_dir, monkeypatch):
    cfg = RunConfig(**{**BASE, **CASES[case]})
    summary, probe = measured_run(cfg, cache_dir, monkeypatch)
    eps = check(cfg, summary, probe)
    assert len(probe.records) == len(first_steps(cfg))
    assert eps == pytest.approx(summary["epsilon_spent"], rel=0.01)


# --- the harness fails on each breakage --------------------------------------------------------------
FFT = RunConfig(**{**BASE, "strategy": "fft"})


def test_a_step_clipping_at_more_than_the_accounted_c_fails(cache_dir, monkeypatch):
    """Each step clips at 1.1·C but adds noise for, and accounts, C."""
    clipped_sum = dpsgd.Stepper.clipped_sum
    monkeypatch.setattr(dpsgd.Stepper, "clipped_sum",
                        lambda self, x, y, clip_norm, *a, **k: clipped_sum(self, x, y, 1.1 * clip_norm, *a, **k))
    summary, probe = measured_run(FFT, cache_dir, monkeypatch)
    with pytest.raises(AssertionError, match=r"contributes .* > C"):
        check(FFT, summary, probe)


def test_a_shared_clip_factor_above_c_fails(cache_dir, monkeypatch):
    from dpviz.privacy import clipping

    factors = clipping.clip_factors
    monkeypatch.setattr(clipping, "clip_factors", lambda norms, clip_norm, *a, **k: factors(norms, 1.1 * clip_norm, *a, **k))
    summary, probe = measured_run(FFT, cache_dir, monkeypatch)
    with pytest.raises(AssertionError, match=r"contributes .* > C"):
        check(FFT, summary, probe)


def test_an_accountant_that_understates_epsilon_fails(cache_dir, monkeypatch):
    """The accountant's ε reads 20 % low: calibration then picks a σ too small, and the run's own check of
    what it spent (the same accountant) passes, as does every test reading the reported ε. Every step is the
    mechanism its phase says; only the independent composition of the steps sees the overspend."""
    import dataclasses

    from dpviz.privacy import accountants

    prv = accountants.REGISTRY["prv"]
    monkeypatch.setitem(accountants.REGISTRY, "prv",
                        dataclasses.replace(prv, epsilon=lambda history, delta: 0.8 * prv.epsilon(history, delta)))
    summary, probe = measured_run(FFT, cache_dir, monkeypatch)
    assert summary["epsilon_spent"] <= FFT.epsilon  # what the run reports: within budget
    mechanism.check_steps(probe.records, phases=summary["phases"], n=summary["n_train"])
    with pytest.raises(AssertionError, match="over its budget"):
        mechanism.check_epsilon(summary, probe, epsilon=FFT.epsilon, delta=FFT.delta)


def test_noise_not_at_sigma_c_fails(cache_dir, monkeypatch):
    """The noise drawn at 0.9·σC while σ is accounted: the measured std says so."""
    noise = dpsgd.gaussian_noise
    monkeypatch.setattr(dpsgd, "gaussian_noise", lambda p, std, gen: noise(p, 0.9 * std, gen))
    summary, probe = measured_run(FFT, cache_dir, monkeypatch)
    with pytest.raises(AssertionError, match="the noise's std"):
        check(FFT, summary, probe)


def test_an_update_divided_by_the_drawn_batch_fails(cache_dir, monkeypatch):
    """Dividing by the sampled batch size instead of q·n changes the sensitivity: the divisor check sees it."""
    step = dpsgd.private_step

    def drawn(stepper, x, y, *, expected_batch, mask=None, **k):
        ys = y if isinstance(y, list) else [y]
        return step(stepper, x, y, expected_batch=float(sum(len(v) for v in ys)), mask=mask, **k)

    monkeypatch.setattr(dpsgd, "private_step", drawn)
    probe = mechanism.Probe(check={0, 3})
    monkeypatch.setattr(dpsgd, "private_step", probe)
    summary = dpviz.run(FFT, cache_dir=cache_dir)
    with pytest.raises(AssertionError, match=r"contributes|differs from its own|reaches C|the noise's std"):
        check(FFT, summary, probe)


@pytest.mark.subprocess
def test_a_two_process_run_is_the_accounted_mechanism_on_every_rank(tmp_path):
    """torchrun, two ranks (gloo): each rank's probe replays the checked steps (the replays' collectives pair
    up), rank 0 measures its rows' contributions; the noise enters once, at σ·C."""
    out = tmp_path / "probe"
    env = {**os.environ, "DPVIZ_PLUGINS": "mechanism_plugin", "PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}",
           "DPVIZ_PROBE_OUT": str(out), "DPVIZ_PROBE_STEPS": "0,2,5", "DPVIZ_CACHE_DIR": str(tmp_path / "cache"),
           "DPVIZ_BACKGROUND_ANALYSES": "off"}
    flags = ["--strategy", "fft", "--epochs", "2", "--lr-ft", "0.01", "--clip-norm", "0.05", "--epsilon", "2",
             "--checkpoint-every", "-1", "--keep-weights", "none", "--json", "--quiet"]
    run = subprocess.run([str(Path(sys.executable).with_name("torchrun")), "--nproc-per-node", "2", "--master-port",
                          "29541", "-m", "dpviz", "run", *flags], capture_output=True, text=True, env=env, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout[run.stdout.index("{"):])
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["calls"] == ranks[1]["calls"] == sum(p["steps"] for p in summary["phases"])
    records = [mechanism.StepRecord(**r) for r in ranks[0]["records"]]
    mechanism.check_steps(records, phases=summary["phases"], n=summary["n_train"])
    probe = mechanism.Probe(check=())
    probe.calls = ranks[0]["calls"]
    mechanism.check_epsilon(summary, probe, epsilon=2.0, delta=summary["delta"] if "delta" in summary else 1e-5)
    # the other rank drew the same noise: its measured std is rank 0's
    assert [r["noise_std"] for r in ranks[1]["records"]] == [r["noise_std"] for r in ranks[0]["records"]]
