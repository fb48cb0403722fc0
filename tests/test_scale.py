"""The scorecard's scale axis: the sizes' declarations, their grid, the public proxy at size, one claim at a tiny
custom size from the command line, and the figure of a claim at every size."""

import json
import subprocess
import sys

import pytest
import torch

from dpviz import reproduce as r
from dpviz.figures.reproduce import scale_figure

SCALED_TASKS = [(s, t) for s in r.SCALES for t in r.SCALES[s] if s != "small"]


def test_the_sizes_grow_the_data_and_the_steps_at_small_s_epochs_and_batch():
    """small is today's SCALE; on real-vision the larger sizes reach ≈ 500 and ≈ 2,000 DP steps on more of
    Fashion-MNIST's 60,000 images, at the same 3 epochs and B = 64."""
    assert r.SCALES["small"] is r.SCALE and r.SCALE_NAMES == ("small", "medium", "large")
    small, medium, large = (r.SCALES[s]["real-vision"] for s in r.SCALE_NAMES)
    assert small["train_size"] < medium["train_size"] < large["train_size"] <= 60000
    assert all((x["batch_size"], x["epochs"]) == (64, 3) for x in (small, medium, large))
    assert r.steps_of(small) == 48 and 500 <= r.steps_of(medium) < 600 and 2000 <= r.steps_of(large) < 2200


@pytest.mark.parametrize("scale,task", SCALED_TASKS)
def test_every_scale_sensitive_claim_plans_its_runs_with_the_size_s_data_and_steps(scale, task):
    """At a larger size the scale-sensitive claims plan 3 seeds each with the size's fields, checkpoints
    `every` times as far apart as at small, and no weights; the other claims say why they are not read."""
    small = r.plan(r.CLAIMS, (0, 1, 2), task)
    sized = r.plan(r.CLAIMS, (0, 1, 2), task, scale=scale)
    every = r.SCALES[scale][task]["every"]
    assert set(sized) == {c.id for c in r.CLAIMS if scale in c.scales} == {"000-lpfft", "000-dip", "002-law",
                                                                              "002-constant"}
    for cid, groups in sized.items():
        assert groups.keys() == small[cid].keys()
        for g, cfgs in groups.items():
            assert [c.seed for c in cfgs] == [0, 1, 2]
            for big, base in zip(cfgs, small[cid][g]):
                assert all(getattr(big, k) == v for k, v in r.size_fields(task, scale).items())
                assert big.checkpoint_every == (base.checkpoint_every * every if base.checkpoint_every > 0
                                                else base.checkpoint_every)
                assert big.eval_every == (base.eval_every * every if base.eval_every < 10**6 else base.eval_every)
                assert big.keep_weights != "checkpoints" and big.replace(
                    train_size=base.train_size, checkpoint_every=base.checkpoint_every, eval_every=base.eval_every,
                    keep_weights=base.keep_weights) == base  # nothing else changes
    for c in r.CLAIMS:
        if scale not in c.scales:
            assert "read at small only" in c.why_not(task, scale)
    assert "has no size" in r.REGISTRY["000-dip"].why_not("default", scale)


# the sizes whose searches are not in the shipped grid yet (scripts/build_auto_grid.py --scale S --epsilons E):
# each takes hours on a 2-core CPU (README, "The scale axis"); strict, so a grid that answers them fails here
# until they are taken off this list
NOT_BUILT = {("large", 1.0), ("large", 8.0)}


def _sized_runs():
    for scale, task in SCALED_TASKS:
        seen = {}
        for cid, groups in r.plan(r.CLAIMS, (0,), task, scale=scale).items():
            seen.update({cfg.hash(): (cid, g, cfg) for g, cfgs in groups.items() for cfg in cfgs})
        for eps in sorted({cfg.epsilon for _, _, cfg in seen.values()}):
            runs = [x for x in seen.values() if x[2].epsilon == eps]
            yield pytest.param(runs, id=f"{task}-{scale}-eps{eps:g}", marks=[pytest.mark.xfail(
                strict=True, reason="not built yet")] if (scale, eps) in NOT_BUILT else [])


@pytest.mark.parametrize("runs", list(_sized_runs()))
def test_the_shipped_grid_answers_every_run_of_a_size(tmp_path, runs):
    """Each size's learning rates come from the shipped grid, searched on the public glyphs at that size:
    a scorecard at the size trains no search."""
    from dpviz import autotune

    for cid, g, cfg in runs:
        _, res = autotune.resolve(cfg, cache_dir=tmp_path, search_ok=False)
        assert res.source in ("shipped", "unused"), (cid, g, res.source)
        if res.source == "shipped":  # searched on the public glyphs at this size
            _, entry = autotune.lookup(cfg, autotune.used_fields(cfg))
            assert entry["proxy"] == "glyphs" and entry["size"]["train_size"] == cfg.train_size
            assert any(float(p["epsilon"]) == cfg.epsilon for p in entry["points"]), (cid, g)  # searched at this ε


def test_the_public_glyphs_grow_to_a_larger_size_and_keep_their_first_images():
    """A proxy search for 11,000 private images trains on 11,000 glyphs (as many steps), whose first 1,500
    are the glyphs every smaller search used."""
    from dpviz import tasks
    from dpviz.data import load
    from dpviz.data.glyphs import N_TRAIN, load_glyphs

    base = load_glyphs()
    cfg = tasks.config("real-vision", **r.size_fields("real-vision", "medium"), dataset="glyphs")
    big = load(cfg)
    assert base.x_train.shape[0] == N_TRAIN and big.x_train.shape[0] == cfg.train_size
    grown = load_glyphs(cfg)
    assert torch.equal(grown.x_train[:N_TRAIN], base.x_train) and torch.equal(grown.x_test, base.x_test)
    assert not torch.equal(grown.x_train[N_TRAIN:2 * N_TRAIN], base.x_train)  # new glyphs, not copies
    assert torch.bincount(grown.y_train, minlength=10).min() > cfg.train_size // 20  # every class drawn


@pytest.mark.subprocess
@pytest.mark.real  # its child trains the real-vision task
def test_a_claim_at_a_tiny_custom_size_from_the_command_line(cli_env, cache_dir):
    """002-law at --scale medium with a tiny training set (--set): the row is the size's, its runs checkpoint
    at the size's interval, its curves (log D_l over depth) are in the row; a bad size is one line, exit 2."""
    cmd = [sys.executable, "-m", "dpviz", "reproduce", "--task", "real-vision", "--claims", "002-law", "--seeds", "2",
           "--scale", "medium", "--device", "cpu", "--set", "train_size=128", "eval_subset=40", "lr_ft=0.05", "--json"]
    out = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert (row["id"], row["scale"], row["seeds"]) == ("002-law", "medium", 2) and row["verdict"] in r.VERDICTS
    assert "medium: 11,000 examples" in row["preset"] and "kNN" not in row["preset"]
    from dpviz.store import Store

    cfg = Store(cache_dir).get_run(row["run_ids"]["tuned"][0])["config"]
    assert (cfg["train_size"], cfg["checkpoint_every"], cfg["epsilon"]) == (128, 6 * 4, 8.0)
    assert len(row["depth"]["auto rate"]) == 8  # the stem + EfficientNet-Lite0's 7 stages, mean log₁₀ D_l
    assert [row] == r.stored_rows(["002-law"], task="real-vision", seeds=(0, 1), scale="medium", cache_dir=cache_dir,
                                  changes={"train_size": 128, "eval_subset": 40, "lr_ft": 0.05, "device": "cpu"})
    assert r.stored_rows(["002-law"], task="real-vision", seeds=(0, 1), cache_dir=cache_dir,  # small's are other runs
                         changes={"train_size": 128, "eval_subset": 40, "lr_ft": 0.05}) == []
    bad = subprocess.run(cmd[:4] + ["--scale", "large"], env=cli_env, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr == "dpviz: error: scale: a size task default has: small; got 'large'\n"
    bad = subprocess.run(cmd[:4] + ["--scale", "huge"], env=cli_env, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("dpviz: error: scale: one of small, medium, large")


def test_a_claim_s_figure_at_every_size_side_by_side():
    """kNN over the DP steps per size (the dip), log D_l over depth per size (the law), and a pair's bars by
    size, from rows alone."""
    def row(size, **curves):
        return {"id": "000-dip", "task": "real-vision", "seed": "000", "paper": "Ke et al. 2024", "verdict": r.AGREES,
                "scale": size, **curves}

    fig = scale_figure({"small": row("small", knn={"fft": [[0, 0.8], [6, 0.7]], "lp-fft": [[0, 0.8], [6, 0.82]]}),
                        "medium": row("medium", knn={"fft": [[0, 0.8], [24, 0.75], [48, 0.85]]})})
    assert [a.text for a in fig.layout.annotations] == ["small: agrees", "medium: agrees"]
    assert [(t.name, t.xaxis) for t in fig.data] == [("fft", "x"), ("lp-fft", "x"), ("fft", "x2")]
    assert list(fig.data[2].x) == [0, 24, 48] and fig.data[2].showlegend is False
    from dpviz.figures.style import color
    assert [t.line.color for t in fig.data] == [color("fft"), color("lp-fft"), color("fft")]  # as on every page
    law = scale_figure({"small": row("small", depth={"auto rate": [1.0, 0.5, 0.1]})})
    assert list(law.data[0].x) == [0, 1, 2] and law.layout.yaxis.title.text.startswith("log₁₀ D_l")
    bars = scale_figure({"small": row("small", measured={"DP-LP-FFT": {"mean": 0.6, "std": 0.1}}),
                         "medium": row("medium", measured={"DP-LP-FFT": {"mean": 0.8, "std": 0.0}})})
    assert [(t.type, t.name, list(t.y)) for t in bars.data] == [("bar", "small: agrees", [0.6]),
                                                              ("bar", "medium: agrees", [0.8])]


def test_a_saturated_proxy_s_tie_goes_to_the_lower_loss_not_to_the_range_s_end():
    """Rates whose proxy accuracy ties at 1.0 (the glyphs at a larger size) are told apart by their test loss,
    as the medium grid's DP-FFT search at ε = 8 found; equal losses (or none) keep the earliest trial."""
    import optuna

    from dpviz import autotune

    dist = {"lr_ft": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True)}

    def trial(number, lr, acc, loss):
        t = optuna.trial.create_trial(params={"lr_ft": lr}, distributions=dist, value=acc,
                                      user_attrs={"summary": {"test_loss": loss}})
        t.number = number
        return t

    done = [trial(0, 0.001, 1.0, 0.0039), trial(1, 0.00226, 1.0, 0.00038), trial(2, 0.0051, 1.0, 0.0005),
            trial(3, 0.0115, 0.988, 0.035), trial(4, 0.026, 0.1, 2.7)]
    assert autotune.best_trial(done).params["lr_ft"] == 0.00226
    assert autotune.best_trial(done[3:]).params["lr_ft"] == 0.0115  # accuracy first
    same = [trial(0, 0.001, 0.5, None), trial(1, 0.002, 0.5, None)]
    assert autotune.best_trial(same).number == 0


@pytest.mark.subprocess
def test_a_grid_build_with_workers_shares_its_searches_trials_and_trains_each_once(tmp_path, cli_env):
    """`build_auto_grid.py --workers 2`: the worker processes run one search's trials between them, each
    trial trained once, and the entry is read from the finished search as a one-process build writes it."""
    from pathlib import Path

    from dpviz.store import Store

    script = Path(__file__).resolve().parents[1] / "scripts" / "build_auto_grid.py"
    out = subprocess.run([sys.executable, str(script), "--strategies", "fft", "--epsilons", "1", "--workers", "2",
                          "--cache-dir", str(tmp_path / "g"), "--out", str(tmp_path / "grid.json"), "--threads", "1"],
                         env=cli_env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "2 workers ran its trials (0 failed)" in out.stdout
    (entry,) = json.loads((tmp_path / "grid.json").read_text())["entries"]
    (point,) = entry["points"]
    runs = Store(tmp_path / "g").list_runs()
    assert point["trials"] == 8 and len(runs) == 8 and {r["status"] for r in runs} == {"finished"}
    assert len({r["config_hash"] for r in runs}) == 8  # no trial trained twice
    assert len({r["owner"] for r in runs}) == 2  # both workers trained (owner: host:pid:start)
    assert point["values"]["lr_ft"] in {r["config"]["lr_ft"] for r in runs}
