"""Public-to-private continual training: no private record before the switch; ε counts only DP steps."""

import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from opacus.accountants import create_accountant

import dpviz
from dpviz import catalog, data, strategies
from dpviz.training import calibration
from dpviz.training import prepare
from dpviz.config import RunConfig
from dpviz.errors import ConfigError
from dpviz.store import Store


@pytest.fixture
def poisoned_private(monkeypatch):
    """Private training images all NaN: any step that touches them turns loss and weights into NaN."""
    real = catalog.DATASETS["digits"]

    def load(cfg=None):
        b = real.load(cfg)
        b.x_train = torch.full_like(b.x_train, math.nan)
        return b
    monkeypatch.setitem(catalog.DATASETS, "digits", replace(real, loader=load))


def losses(store, run_id):
    return dict(store.metrics(run_id, "loss")["loss"])


def finite(v):
    return v is not None and math.isfinite(v)  # SQLite stores NaN as NULL


def test_fixed_switch_uses_public_data_only_before_it(poisoned_private, cache_dir):
    cfg = RunConfig(strategy="continual", epsilon=2.0, epochs=2, switch_step=8, checkpoint_every=8)
    s = dpviz.run(cfg, cache_dir=cache_dir)
    store = Store(cache_dir)
    loss = losses(store, s["run_id"])
    assert all(finite(loss[t]) for t in range(1, 9))  # public steps: finite
    assert not any(finite(loss[t]) for t in loss if t > 8)  # the poison is live once DP starts
    w8 = store.load_weights(s["run_id"], 8)
    assert all(torch.isfinite(v).all() for v in w8.values())
    assert s["public_phase"]["step"] == 8 and s["public_phase"]["reason"] == "step"
    eps = dict(store.metrics(s["run_id"], "epsilon")["epsilon"])
    assert all(eps[t] == 0 for t in range(1, 9)) and eps[9] > 0  # ε starts at the switch


@pytest.mark.slow
def test_automatic_switch_measures_the_decelerator_on_public_data(poisoned_private, cache_dir):
    cfg = RunConfig(strategy="continual", epsilon=2.0, epochs=6, switch_threshold=0.9)
    s = dpviz.run(cfg, cache_dir=cache_dir)
    store = Store(cache_dir)
    dec = store.metrics(s["run_id"], "decelerator_public")["decelerator_public"]
    switch = s["public_phase"]["step"]
    assert len(dec) >= 1 and all(finite(v) for _, v in dec)  # NaN if private data were used
    assert s["public_phase"]["reason"] in ("decelerator", "public step cap")
    loss = losses(store, s["run_id"])
    assert all(finite(loss[t]) for t in range(1, switch + 1))


@pytest.mark.slow
def test_switch_batch_sets_the_public_examples_each_check_reads(cache_dir):
    runs = {b: dpviz.run(RunConfig(strategy="continual", epsilon=2.0, epochs=2, switch_batch=b), cache_dir=cache_dir)
            for b in (256, 16)}
    store = Store(cache_dir)
    first = {b: store.metrics(s["run_id"], "decelerator_public")["decelerator_public"][0][1] for b, s in runs.items()}
    assert all(finite(v) for v in first.values()) and first[16] != pytest.approx(first[256], rel=1e-3)
    assert runs[16]["run_id"] != runs[256]["run_id"]
    # the default keeps the hash of runs stored before the field; a real task's continual takes 32
    assert "switch_batch" not in RunConfig(strategy="continual").to_json(hashed_only=True)
    from dpviz import tasks

    assert tasks.config("real-text", strategy="continual").switch_batch == 32
    assert tasks.config("real-text", strategy="fft").switch_batch == 256


def test_epsilon_counts_only_the_private_phase(cache_dir):
    cfg = RunConfig(strategy="continual", epsilon=1.0, epochs=2, switch_step=10)
    s = dpviz.run(cfg, cache_dir=cache_dir)
    fft = calibration.preview(cfg.replace(strategy="fft"))
    assert [p["name"] for p in s["phases"]] == ["dp"] and s["phases"][0]["steps"] == fft["total_steps"]
    assert s["phases"][0]["noise_multiplier"] == pytest.approx(fft["noise_multiplier"])
    acc = create_accountant("prv")
    acc.history = [(p["noise_multiplier"], p["sample_rate"], p["steps"]) for p in s["phases"]]
    assert s["epsilon_spent"] == pytest.approx(acc.get_epsilon(delta=1e-5)) and s["epsilon_spent"] <= 1.0
    assert s["total_steps"] == 10 + fft["total_steps"]


def test_adamw_keeps_second_moment_and_restarts_first_at_the_switch():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    strategy = strategies.get("continual")(RunConfig(strategy="continual", optimizer="adamw"))
    strategy.carried = opt  # what the public phase leaves behind
    new = strategy._carry_over(SimpleNamespace())
    assert new is opt and strategy.carried is None
    for st in new.state.values():
        assert (st["exp_avg"] == 0).all() and (st["exp_avg_sq"] > 0).any()


def test_bad_continual_inputs():
    with pytest.raises(ConfigError, match="public_dataset"):
        RunConfig(strategy="continual", dataset="glyphs", public_dataset="glyphs")
    with pytest.raises(ConfigError, match="switch_threshold"):
        RunConfig(strategy="continual", switch_threshold=1.5)
    with pytest.raises(ConfigError, match="switch_batch"):
        RunConfig(strategy="continual", switch_batch=4)
    with pytest.raises(ConfigError, match="public_dataset"):
        calibration.preview(RunConfig(strategy="continual", public_dataset="synthetic"))  # 2 classes vs 10
