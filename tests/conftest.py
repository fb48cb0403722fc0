"""Shared fixtures: an isolated store per test that reuses one pretrained-backbone cache."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The suite's runs use short schedules off the shipped "auto" grid: a proxy search per test would
# dominate its time, so "auto" there takes the fixed defaults; tests/test_autotune.py turns searching on.
os.environ.setdefault("DPVIZ_AUTO_SEARCH", "off")
# A CLI run starts a detached `analyze all` once it returns; in the suite those processes would compete
# with later tests for the 2 cores, so only tests/test_cli.py's run test turns them on (and waits for them).
os.environ.setdefault("DPVIZ_BACKGROUND_ANALYSES", "off")

import dpviz  # noqa: E402
from dpviz.config import RunConfig  # noqa: E402

# A short but real schedule: 2 epochs of 5 steps on the default digits task.
FAST = dict(epochs=2, batch_size=256, eval_every=5)


@pytest.fixture(scope="session")
def backbone_cache(tmp_path_factory) -> Path:
    """One folder of pretrained public backbones for the whole session."""
    d = tmp_path_factory.mktemp("backbones")
    return d


@pytest.fixture
def cache_dir(tmp_path, backbone_cache) -> Path:
    """A fresh store whose backbones/ is the session's shared pretrained cache."""
    d = tmp_path / "cache"
    d.mkdir()
    os.symlink(backbone_cache, d / "backbones")
    return d


@pytest.fixture
def fast_cfg():
    def make(**kw):
        return RunConfig(**{**FAST, **kw})
    return make


@pytest.fixture
def cli_env(cache_dir):
    env = dict(os.environ, DPVIZ_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    return env
