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
# Under pytest-xdist each worker (and every process it starts) trains with one OpenMP thread: two workers of
# two threads each on 2 cores would have torch's threads spin-wait on busy cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")

import dpviz  # noqa: E402
from dpviz.config import RunConfig  # noqa: E402

# A short but real schedule: 2 epochs of 5 steps on the default digits task.
FAST = dict(epochs=2, batch_size=256, eval_every=5)


@pytest.fixture(scope="session")
def backbone_cache(tmp_path_factory, worker_id) -> Path:
    """One folder of pretrained public backbones for the whole run: under pytest-xdist the workers share it
    (their base folders sit side by side), and `dpviz.models.pretrain`'s file lock keeps a backbone from
    being pretrained twice at once."""
    if worker_id == "master":
        return tmp_path_factory.mktemp("backbones")
    d = tmp_path_factory.getbasetemp().parent / "backbones"
    d.mkdir(exist_ok=True)
    return d


@pytest.fixture(scope="session")
def worker_id(request) -> str:
    """pytest-xdist's worker name ("gw0", …), "master" without it (pytest-xdist's own fixture when installed)."""
    return getattr(request.config, "workerinput", {}).get("workerid", "master")


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


# --- tiers ------------------------------------------------------------------------------------------
# pytest.ini declares the tiers: `browser` (a real Chromium: Playwright or kaleido's export), `subprocess`
# (another process: a Python child, a server, torchrun, a kernel), `real` (a packaged pretrained model or
# corpus read in this process or a child), `slow`. A test that starts one of them itself declares it
# (`pytestmark = pytest.mark.X` for a module, `@pytest.mark.X` for a test); a fixture that starts one declares
# it here, once, for every test that uses it. tests/tier_guard.py fails a test that starts a process or a
# browser, or reads a packaged model or corpus, without the mark.
pytest_plugins = ("tier_guard", "pytester")

# Fixtures that start what a tier names: "module path::fixture name" → its tiers.
FIXTURE_TIERS = {
    "tests/test_bk_layers.py::minilm": ("real",),  # MiniLM's weights from its package
    "tests/test_cli.py::seeded": ("subprocess",),  # a `python -m dpviz run` child
    "tests/test_docs.py::site": ("subprocess",),  # `mkdocs build`
    "tests/test_form_browser.py::app": ("browser", "subprocess"),  # Chromium and dashboard servers
    "tests/test_pages_browser.py::visits": ("browser", "subprocess"),  # Chromium and a dashboard server
    "tests/test_sweeps.py::postgres": ("subprocess",),  # a PostgreSQL server (initdb, pg_ctl)
}
# Tests declared here, by node id, where their module cannot carry the mark: two cases of a parametrized test
# whose list has no room for marks (its ids unpack every case), which reach `dpviz run`'s training and so start
# dpviz.training.ahead's accounting child before they fail.
TEST_TIERS = {
    "tests/test_hardening.py::test_bad_input_is_one_line_naming_the_field"
    "[epsilon:run --strategy lp --epsilon 0.1 --accoun]": ("subprocess",),
    "tests/test_hardening.py::test_bad_input_is_one_line_naming_the_field"
    "[delta:--cache-dir NEW_DIR run --delta 0.01]": ("subprocess",),
}


def _fixture_key(fixturedef) -> str | None:
    try:
        path = Path(fixturedef.func.__code__.co_filename).resolve().relative_to(ROOT).as_posix()
    except (AttributeError, ValueError):
        return None
    return f"{path}::{fixturedef.argname}"


def pytest_collection_modifyitems(config, items):
    for item in items:
        tiers = set(TEST_TIERS.get(item.nodeid, ()))
        info = getattr(item, "_fixtureinfo", None)
        for name in getattr(item, "fixturenames", ()):
            for fixturedef in (info.name2fixturedefs.get(name, ()) if info else ()):
                tiers.update(FIXTURE_TIERS.get(_fixture_key(fixturedef), ()))
        for tier in sorted(tiers):
            item.add_marker(getattr(pytest.mark, tier))


def need(module: str):
    """``module`` imported, or the test skipped where it is not installed; in CI (``CI`` set), where .ci/run
    installs every extra, a missing package fails the test instead of skipping it unseen."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"{module} is missing in CI (bash run.sh setup installs dpviz's extras)")
        pytest.skip(f"{module} is not installed")


# --- pytest-xdist -----------------------------------------------------------------------------------
# `bash run.sh test` runs the suite on 2 workers (`-n 2 --dist loadgroup`). A test's group, read from its
# module's source by the controller (which collects nothing): every test of a module that drives the dashboard
# in Chromium (it imports browser_util) in one group, run one after another on one worker (two Chromiums and two
# dashboard servers at once on 2 cores would race their waits); the tests of a module with a module-scoped
# fixture in one group, so the fixture is built once; any other test on its own. An explicit xdist_group mark
# still wins where pytest-xdist reads it.
def xdist_group(nodeid: str) -> str | None:
    path = nodeid.split("::")[0]
    if path not in _SOURCES:
        f = ROOT / path
        _SOURCES[path] = f.read_text() if f.suffix == ".py" and f.is_file() else ""
    text = _SOURCES[path]
    if "browser_util" in text:
        return "browser"
    if 'scope="module"' in text:
        return path
    return None


_SOURCES: dict[str, str] = {}


@pytest.hookimpl(optionalhook=True)  # only a hook where pytest-xdist is loaded (not under -p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Groups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)  # an xdist_group mark's group, where pytest-xdist could add it
            return scope if scope != nodeid else xdist_group(nodeid) or nodeid

    return Groups(config, log)
