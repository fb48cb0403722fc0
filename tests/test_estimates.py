"""The time a run has left, as pages and the command line say it: measured from the run's own recent steps
(evaluations included), phase by phase, with earlier runs' step times pricing the phases ahead."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dpviz.jobs import eta

FIXTURES = Path(__file__).parent / "fixtures"
TOLERANCE, FLOOR_S = 0.30, 1.0  # ±30 %, or a second where under four seconds are left (the run's own wrap-up)


def replay(doc: dict, prior: dict | None = None):
    """(step, estimate or None, seconds actually left) at every progress report of a recorded run."""
    pace = eta.Pace(phases=[tuple(p) for p in doc["plan"]], eval_every=doc["eval_every"],
                    prior=doc["prior"] if prior is None else prior)
    for step, t in doc["marks"]:
        pace.observe(step, t)
        yield step, pace.left(t), doc["end"] - t


def off(estimate, actual: float) -> bool:
    return abs(estimate.seconds - actual) > max(TOLERANCE * actual, FLOOR_S)


@pytest.mark.parametrize("name", ["timeline_default.json", "timeline_default_fft.json"])
def test_a_recorded_run_is_estimated_within_30_percent_from_a_fifth_of_its_steps_on(name):
    doc = json.loads((FIXTURES / name).read_text())
    total = sum(steps for _, steps in doc["plan"])
    late = [(s, e, a) for s, e, a in replay(doc) if s >= 0.2 * total]
    assert all(e is not None and e.complete for _, e, _ in late)  # the prior prices every phase ahead
    bad = [(s, round(e.seconds, 2), round(a, 2)) for s, e, a in late if off(e, a)]
    assert not bad, f"(step, estimated, actual) off by more than 30 %: {bad}"


def test_an_average_over_all_steps_so_far_misses_the_slower_phase_ahead():
    """What the estimate replaced, on the same recording: steps done ÷ time since the first step. While the
    cheap LP phase runs it promises a fraction of the time left."""
    doc = json.loads((FIXTURES / "timeline_default.json").read_text())
    total = sum(steps for _, steps in doc["plan"])
    first = next((s, t) for s, t in doc["marks"] if s > 0)
    misses = [s for s, t in doc["marks"] if 0.2 * total <= s < doc["plan"][0][1] and s > first[0]
              and abs((t - first[1]) / (s - first[0]) * (total - s) - (doc["end"] - t)) > 0.3 * (doc["end"] - t)]
    assert misses


def test_without_earlier_runs_a_phase_ahead_makes_the_estimate_a_lower_bound():
    doc = json.loads((FIXTURES / "timeline_default.json").read_text())
    lp = doc["plan"][0][1]
    during_lp = [e for s, e, _ in replay(doc, prior={}) if 0.2 * sum(p[1] for p in doc["plan"]) <= s < lp]
    assert during_lp and all(e is None or not e.complete for e in during_lp)
    from dpviz.jobs import time_left

    pace = eta.Pace(phases=[("lp", 40), ("fft", 80)], eval_every=10)
    for step in range(1, 21):
        pace.observe(step, step * 0.01)
    assert time_left(pace, now=0.2).startswith("at least ")


def test_the_window_spans_an_evaluation_so_the_estimate_does_not_jump_after_each():
    """Steps of 0.1 s with a 2 s evaluation every 10: the pace over a window of one evaluation period is
    0.3 s a step at every report, where the last few steps alone would say 0.1 s or 2.1 s."""
    pace = eta.Pace(phases=[("fft", 200)], eval_every=10)
    t, seen = 0.0, []
    for step in range(1, 101):
        t += 0.1 + (2.0 if step % 10 == 0 else 0.0)
        pace.observe(step, t)
        if step >= 20:
            seen.append(pace.left(t).seconds / (200 - step))
    assert min(seen) > 0.25 and max(seen) < 0.35


def test_prior_reads_this_machine_s_step_times_of_each_phase_from_the_store(cache_dir, fast_cfg):
    import dpviz
    from dpviz.store import Store

    store = Store(cache_dir)
    cfg = fast_cfg(strategy="lp-fft")
    dpviz.run(cfg, store=store)
    prior = eta.prior(store, cfg.replace(seed=cfg.seed + 1))
    assert set(prior) == {"lp", "lp:start", "fft", "fft:start", eta.WRAP_UP} and all(v > 0 for v in prior.values())
    assert eta.prior(store, cfg.replace(batch_size=cfg.batch_size * 2)) == {}  # another batch: not this pace


def test_the_command_line_bar_never_shows_tqdm_s_own_rate_or_time_left(capsys):
    from dpviz.cli.common import Progress
    from dpviz.config import RunConfig

    bar = Progress(RunConfig(), quiet=False)
    plan = [("lp", 30), ("fft", 90)]
    bar(0, 120, {"plan": plan, "pass": ["features of the training set", 512, 2048, 40.0]})
    assert bar.bar is None  # no step bar (and no step clock) before the first step
    for step in range(1, 13):
        bar(step, 120, {"plan": plan, "loss": 1.0})
    bar(12, 120, {"plan": plan, "pass": ["features of a checkpoint", 100, 1000, 5.0]})  # a pass between steps
    bar.close()
    err = capsys.readouterr().err
    assert "features of the training set" in err and "about 2 min 00 s left" in err  # the pass: 40 s for 512 rows
    assert not re.search(r"step/s|s/step|<\d|\?step", err), err[-400:]


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_training_command_says_what_it_does_before_it_imports_torch(cli_env, tmp_path):
    """The first line comes before torch's import (seconds on a busy machine): ``-X importtime`` writes every
    import to stderr as it happens, so the order of the lines is the order of the events."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "dpviz", "run", "--epochs", "1", "--batch-size",
                          "256", "--eval-every", "5", "--seed", "5"], env=cli_env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stderr.splitlines()
    said = next(i for i, line in enumerate(lines) if line.startswith("dpviz: training lp-fft at ε = 1 (DP-SGD)"))
    torch_at = next(i for i, line in enumerate(lines) if re.search(r"\|\s+torch$", line))
    assert said < torch_at
