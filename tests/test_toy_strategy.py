"""A strategy is one file: this one defines a toy strategy and dpviz picks it up everywhere.

The toy trains the head alone, then the last block with it. Nothing outside this file
names it: the run, the accountant, the run form and the CLI find it in the registry.
"""

import json
import subprocess
import sys

import pytest

import dpviz
from dpviz import strategies
from dpviz.store import Store
from dpviz.strategies import PhasePlan, Strategy

try:  # the dashboard's test helpers (pytest puts tests/ on the path; a CLI child importing this file has none)
    from test_app import app_env, open_page  # noqa: F401
except ImportError:
    pass

TOY = "toy-head-then-last"


class HeadThenLastBlock(Strategy):
    """Head for the first half of the steps, then the last backbone block and the head."""

    name, label, color = TOY, "toy: head, then the last block", "#e377c2"
    lr_fields = ("lr_lp", "lr_ft")

    def plan(self, *, total_steps, steps_per_epoch, num_blocks):
        half = total_steps // 2
        return [PhasePlan(name="head", steps=half, lr=self.cfg.lr_lp, trainable="head"),
                PhasePlan(name="last", steps=total_steps - half, lr=self.cfg.lr_ft, trainable="last:1")]


def _register():
    """Register on import, so a CLI child naming this module in DPVIZ_STRATEGIES sees the toy too."""
    if TOY not in strategies.REGISTRY:
        strategies.register(HeadThenLastBlock)


_register()


@pytest.fixture
def toy():
    """The toy stays registered for this file's tests; other files see the registry they expect."""
    _register()
    yield TOY
    strategies.REGISTRY.pop(TOY, None)


def test_toy_runs_end_to_end_within_budget(toy, fast_cfg, cache_dir):
    s = dpviz.run(fast_cfg(strategy=toy, epsilon=1.0), cache_dir=cache_dir)
    assert [(p["name"], p["steps"]) for p in s["phases"]] == [("head", 6), ("last", 6)]
    assert 0 < s["epsilon_spent"] <= 1.0
    state = Store(cache_dir).load_model(s["run_id"])["state_dict"]
    assert set(k.split(".")[0] for k in state) == {"backbone", "head"}


def test_toy_is_a_choice_of_the_run_form(toy, app_env):
    at = open_page("pages/runs.py")
    assert f"{toy} — {HeadThenLastBlock.label}" in at.selectbox(key="f_strategy").options
    at.selectbox(key="f_strategy").set_value(toy).run()
    assert not at.error and "σ =" in at.info[0].value
    keys = {w.key for w in at.number_input}
    assert {"f_lr_lp", "f_lr_ft"} <= keys and "f_tune_blocks" not in keys  # only its own fields


@pytest.mark.subprocess
def test_toy_is_a_choice_of_the_cli(toy, cli_env):
    env = dict(cli_env, DPVIZ_STRATEGIES="tests.test_toy_strategy")
    out = subprocess.run([sys.executable, "-m", "dpviz", "strategies", "--json"], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert toy in [r["name"] for r in json.loads(out)]
    bad = subprocess.run([sys.executable, "-m", "dpviz", "run", "--strategy", "nope", "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and toy in bad.stderr  # the one-line error lists it among the choices
