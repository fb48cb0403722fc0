"""Each strategy end to end on the default digits task: real (short) DP training."""

import time

import pytest
import torch
from opacus.accountants import create_accountant

import dpviz
from dpviz import strategies
from dpviz.training import prepare
from dpviz.store import Store


def recompute_epsilon(summary, mechanism=None):
    """ε of the reported phases by a fresh Opacus accountant: by default the one that bounds the run
    (PRV for a run that names GDP, which is an approximation)."""
    mechanism = mechanism or summary.get("epsilon_spent_bound_by", summary["accountant"])
    acc = create_accountant(mechanism=mechanism)
    acc.history = [(p["noise_multiplier"], p["sample_rate"], p["steps"]) for p in summary["phases"]]
    if mechanism == "gdp":  # Opacus's GDP reads only its last entry: merge the phases
        s, q, _ = acc.history[0]
        acc.history = [(s, q, sum(t for _, _, t in acc.history))]
    return acc.get_epsilon(delta=summary["delta"])


def check_spent(s, target):
    """ε spent ≤ target, equal to a fresh Opacus accountant's ε for the reported phases, never above it."""
    assert 0 < s["epsilon_spent"] <= target
    assert s["epsilon_spent"] == pytest.approx(recompute_epsilon(s), rel=1e-9)
    if s["accountant"] == "gdp":  # calibrated by PRV's bound; GDP's approximation reported beside it
        assert s["epsilon_spent_bound_by"] == "prv"
        assert s["epsilon_gdp_approx"] == pytest.approx(recompute_epsilon(s, "gdp"), rel=1e-9)
    assert {p["noise_multiplier"] for p in s["phases"]} == {s["phases"][0]["noise_multiplier"]} != {0.0}
    assert 0.0 <= s["test_accuracy"] <= 1.0


def smallest(strategy, fast_cfg, **kw):
    """The smallest real run of ``strategy``: two epochs of 6 steps, or its declared minimum of epochs."""
    return fast_cfg(strategy=strategy, epochs=max(2, strategies.get(strategy).min_epochs), **kw)


@pytest.mark.parametrize("strategy", strategies.names())
def test_every_registered_strategy_trains_within_its_budget(strategy, fast_cfg, cache_dir):
    s = dpviz.run(smallest(strategy, fast_cfg, epsilon=1.0), cache_dir=cache_dir)
    check_spent(s, 1.0)
    assert s["strategy"] == strategy
    eps = Store(cache_dir).metrics(s["run_id"], "epsilon")["epsilon"]
    values = [v for _, v in eps]
    assert values == sorted(values) and values[-1] == pytest.approx(s["epsilon_spent"]) and max(values) <= 1.0
    # the final model loads into the unmodified classifier, whatever the strategy trained
    model = prepare.prepare(smallest(strategy, fast_cfg).fixed_rates(), cache_dir=cache_dir, with_curve=False).model
    final = Store(cache_dir).load_model(s["run_id"])["state_dict"]
    model.load_state_dict(final)
    # checkpoints after the first keep only the tensors that changed, and read back whole
    store, steps = Store(cache_dir), Store(cache_dir).weight_steps(s["run_id"])
    kept = torch.load(store.run_dir(s["run_id"]) / "weights" / f"step_{steps[-1]:06d}.pt", weights_only=True)
    assert kept["base"] == steps[0] and 0 < len(kept["state_dict"]) <= len(final)
    if strategy == "lp":  # a frozen backbone is stored once per run
        assert {k.split(".")[0] for k in kept["state_dict"]} == {"head"}
    last = store.load_weights(s["run_id"], steps[-1])
    assert last.keys() == final.keys() and all(torch.equal(last[k], final[k]) for k in final)


@pytest.mark.parametrize("accountant", ["prv", "rdp", "gdp"])
def test_each_accountant_spends_at_most_target(accountant, fast_cfg, cache_dir):
    s = dpviz.run(fast_cfg(strategy="lp-fft", epsilon=1.0, accountant=accountant), cache_dir=cache_dir)
    check_spent(s, 1.0)
    assert sum(p["steps"] for p in s["phases"]) == s["total_steps"] == 12


def test_lp_fft_splits_steps_by_fraction(fast_cfg, cache_dir):
    s = dpviz.run(fast_cfg(strategy="lp-fft", lp_fraction=0.3, epochs=4), cache_dir=cache_dir)
    assert [(p["name"], p["steps"]) for p in s["phases"]] == [("lp", 7), ("fft", 17)]


def weights_after(cfg, cache_dir):
    s = dpviz.run(cfg, cache_dir=cache_dir)
    state = Store(cache_dir).load_model(s["run_id"])["state_dict"]
    prep = prepare.prepare(cfg.fixed_rates(), cache_dir=cache_dir, with_curve=False)  # the untouched pretrained model
    return state, prep.model.state_dict()


def changed(after, before, prefix):
    return any(not torch.equal(after[k], before[k]) for k in before if k.startswith(prefix))


def test_lp_keeps_backbone_and_fft_changes_it(fast_cfg, cache_dir):
    after, before = weights_after(fast_cfg(strategy="lp"), cache_dir)
    assert not changed(after, before, "backbone.") and changed(after, before, "head.")
    after, before = weights_after(fast_cfg(strategy="fft"), cache_dir)
    assert changed(after, before, "backbone.blocks.0.")


@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["cnn", "vit"])
def test_partial_trains_only_last_blocks(backbone, fast_cfg, cache_dir):
    after, before = weights_after(fast_cfg(strategy="partial", tune_blocks=1, backbone=backbone), cache_dir)
    assert changed(after, before, "backbone.blocks.2." if backbone == "cnn" else "backbone.blocks.3.")
    assert not changed(after, before, "backbone.blocks.0.") and not changed(after, before, "backbone.blocks.1.")


def test_same_seed_same_result_and_cache_hit(fast_cfg, cache_dir):
    cfg = fast_cfg(strategy="lp-fft", epsilon=2.0)
    first = dpviz.run(cfg, cache_dir=cache_dir)
    again = dpviz.run(cfg, cache_dir=cache_dir)
    assert again["cached"] and again["run_id"] == first["run_id"] and not first["cached"]
    assert len(Store(cache_dir).list_runs()) == 1
    forced = dpviz.run(cfg, cache_dir=cache_dir, force=True)
    assert forced["run_id"] != first["run_id"]
    assert forced["test_accuracy"] == first["test_accuracy"] and forced["test_loss"] == first["test_loss"]
    other = dpviz.run(cfg.replace(seed=1), cache_dir=cache_dir)
    assert other["test_loss"] != first["test_loss"]


def test_non_private_baseline(fast_cfg, cache_dir):
    s = dpviz.run(fast_cfg(strategy="fft", epsilon="inf", lr_ft=0.05, epochs=4), cache_dir=cache_dir)
    assert s["epsilon_spent"] is None and not s["private"]
    assert all(p["noise_multiplier"] == 0 for p in s["phases"])
    assert s["test_accuracy"] > 0.5  # real learning happens in 20 plain steps


def test_records_metrics_features_and_weights(fast_cfg, cache_dir):
    s = dpviz.run(fast_cfg(strategy="fft", checkpoint_every=5, eval_subset=50), cache_dir=cache_dir)
    store = Store(cache_dir)
    m = store.metrics(s["run_id"])
    for name in ("loss", "train_accuracy", "epsilon", "clip_fraction", "grad_norm", "lr", "test_accuracy"):
        assert name in m, name
    assert [st for st, _ in m["loss"]] == list(range(1, 13))
    assert [st for st, _ in m["test_accuracy"]] == [0, 5, 10, 12]
    assert all(0 <= v <= 1 for _, v in m["clip_fraction"])
    assert store.feature_steps(s["run_id"]) == [0, 5, 10, 12]
    f = store.load_features(s["run_id"], 12)
    assert f["labels"].shape == (50,) and f["layer_0"].shape == (50, 256)
    assert [f[f"layer_{i}"].shape[1] for i in range(1, 4)] == [16, 32, 64]
    assert not (f["layer_3"] == store.load_features(s["run_id"], 0)["layer_3"]).all()
    assert (store.run_dir(s["run_id"]) / "model.pt").exists()


def test_jobs_run_in_background_and_cancel(fast_cfg, cache_dir):
    jm = dpviz.JobManager(cache_dir, max_workers=2)
    slow = jm.submit(fast_cfg(strategy="fft", epochs=200))
    quick = jm.submit(fast_cfg(strategy="lp"))
    assert quick.wait(120)["test_accuracy"] is not None
    while slow.step < 3:
        time.sleep(0.05)
    slow.cancel()
    slow.future.result(60)
    assert slow.status == "cancelled"
    assert Store(cache_dir).get_run(slow.run_id)["status"] == "cancelled"
    jm.shutdown()



@pytest.mark.slow
def test_torchvision_resnet_from_local_weights(fast_cfg, cache_dir, tmp_path):
    import torchvision

    path = tmp_path / "resnet18.pt"
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), path)
    s = dpviz.run(fast_cfg(backbone="resnet18", weights=str(path), strategy="partial", tune_blocks=1,
                           epochs=1, batch_size=512, eval_subset=50), cache_dir=cache_dir)
    assert s["epsilon_spent"] <= 1.0 and s["test_accuracy"] is not None
    f = Store(cache_dir).load_features(s["run_id"], s["total_steps"])
    assert [f[f"layer_{i}"].shape[1] for i in range(1, 5)] == [64, 128, 256, 512]


