"""A dataset and a backbone are one catalogue entry each: this file adds a toy of each, and dpviz takes
them everywhere — config validation, the accountant's static schedule, a real run, the run form and the
command line — with no other file changed (as tests/test_toy_strategy.py does for strategies)."""

import json
import subprocess
import sys

import pytest

import dpviz
from dpviz import catalog
from dpviz.catalog import Backbone, Dataset, Shape

try:  # the dashboard's test helpers (a CLI child importing this file has none on its path)
    from test_app import app_env, open_page  # noqa: F401
except ImportError:
    pass

DATA, NET = "toy-blobs", "toy-mlp"
N, SIZE, CLASSES = 240, 8, 3


def load_blobs(cfg=None):
    """Three Gaussian blobs drawn as 1×8×8 images in [-1, 1] (a fixed seed: the same data every call)."""
    import torch

    from dpviz.data import Bundle

    g = torch.Generator().manual_seed(7)
    y = torch.arange(N + 60) % CLASSES
    centres = torch.randn(CLASSES, SIZE * SIZE, generator=g)
    x = (centres[y] + 0.8 * torch.randn(len(y), SIZE * SIZE, generator=g)).tanh().view(-1, 1, SIZE, SIZE)
    return Bundle(DATA, x[:N], y[:N], x[N:], y[N:], CLASSES)


def build_mlp(*, channels, size, weights=None):
    """Two blocks of Linear + ReLU with the backbone contract (blocks, feature_dim, features per layer)."""
    import torch
    from torch import nn

    class ToyMLP(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)  # the "package's weights": a fixed initialisation
            d = channels * size * size
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(d, 32), nn.ReLU()),
                                         nn.Sequential(nn.Linear(32, 16), nn.ReLU())])
            self.feature_dim = 16

        def layer_features(self, x):
            out = [x.flatten(1)]
            for b in self.blocks:
                out.append(b(out[-1]))
            return out

        def forward_features(self, x):
            return self.layer_features(x)[-1]

    return ToyMLP()


def _register():
    catalog.add_dataset(Dataset(name=DATA, label="toy blobs", source="shipped", loader=load_blobs,
                                shape=Shape(N, 1, SIZE, CLASSES)))
    catalog.add_backbone(Backbone(name=NET, label="toy MLP", source="package", builder=build_mlp, blocks=2))


_register()  # on import, so a CLI child naming this module in DPVIZ_PLUGINS sees them too


@pytest.fixture
def toys():
    _register()
    yield DATA, NET
    catalog.DATASETS.pop(DATA, None)
    catalog.BACKBONES.pop(NET, None)


FIXED = dict(strategy="lp-fft", epochs=4, batch_size=48, lr_lp=0.5, lr_ft=0.05, eval_every=5)


def test_the_toys_run_end_to_end_within_budget(toys, cache_dir):
    cfg = dpviz.RunConfig(dataset=DATA, backbone=NET, epsilon=2.0, **FIXED)
    assert catalog.static_shape(cfg) == (Shape(N, 1, SIZE, CLASSES), 2)  # previewed without loading
    s = dpviz.run(cfg, cache_dir=cache_dir)
    assert 0 < s["epsilon_spent"] <= 2.0 and s["n_train"] == N and s["test_accuracy"] > 1 / CLASSES
    assert [p["name"] for p in s["phases"]] == ["lp", "fft"]


@pytest.mark.subprocess
def test_the_toys_are_choices_of_the_cli(toys, cli_env):
    env = dict(cli_env, DPVIZ_PLUGINS="test_toy_catalog", PYTHONPATH=f"{cli_env['PYTHONPATH']}:tests")
    argv = [sys.executable, "-m", "dpviz", "run", "--dataset", DATA, "--backbone", NET, "--epsilon", "2",
            *[f"--{k.replace('_', '-')}={v}" for k, v in FIXED.items()], "--json", "--quiet"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["config"]["dataset"] == DATA
    bad = subprocess.run([sys.executable, "-m", "dpviz", "run", "--dataset", "nope"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and DATA in bad.stderr  # the one-line error lists it among the choices


def test_the_toys_are_choices_of_the_run_form(toys, app_env):
    at = open_page("pages/runs.py")
    assert f"{DATA} — toy blobs" in at.selectbox(key="f_dataset").options
    at.selectbox(key="f_dataset").set_value(DATA).run()
    at.selectbox(key="f_backbone").set_value(NET).run()
    at.number_input(key="f_batch").set_value(48).run()
    assert not at.error and "σ =" in at.info[0].value and "q = B/n = 0.200" in at.info[0].value


@pytest.mark.subprocess
def test_a_plugin_that_does_not_import_is_one_line_naming_the_variable(cli_env):
    for variable in ("DPVIZ_PLUGINS", "DPVIZ_STRATEGIES"):
        out = subprocess.run([sys.executable, "-m", "dpviz", "list"], env=dict(cli_env, **{variable: "no_such_plugin"}),
                             capture_output=True, text=True, timeout=120)
        err = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(err) == 1 and variable in err[0] and "no_such_plugin" in err[0], err
