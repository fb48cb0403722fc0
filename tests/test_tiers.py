"""The tiers a developer runs while working: every test declares what it starts (its marks, or its fixtures'
in tests/conftest.py; tests/tier_guard.py fails an undeclared start), so
``-m "not slow and not browser and not subprocess and not real"`` leaves out exactly those."""

import subprocess
import sys

import pytest

from conftest import ROOT

TIERS = {"browser", "subprocess", "real", "slow"}

# One collection of the whole suite in a child pytest, printing each test's file and tier markers.
SHOW = """
import pytest, sys
class Show:
    def pytest_collection_finish(self, session):
        for item in session.items:
            marks = sorted({m.name for m in item.iter_markers()} & {"browser", "subprocess", "real", "slow"})
            print("TIER", item.nodeid.split("::")[0], ",".join(marks))
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider"], plugins=[Show()]))
"""


def suite_tiers(session) -> dict[str, set[str]]:
    """{tier: test files with a test in it} ("fast": a test with none of the tier marks) of the whole suite: this
    run's own collection when it holds every test file unfiltered (the whole suite's run, on every pytest-xdist
    worker), else a child pytest's."""
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("test_*.py")}
    items = session.items
    if len(items) == session.testscollected and {i.nodeid.split("::")[0] for i in items} == files:
        rows = [(i.nodeid.split("::")[0], sorted({m.name for m in i.iter_markers()} & TIERS)) for i in items]
    else:
        out = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, cwd=ROOT)
        rows = [(path, marks[0].split(",") if marks and marks[0] else [])
                for _, path, *marks in (line.split(" ") for line in out.stdout.splitlines() if line.startswith("TIER "))]
    tiers: dict[str, set[str]] = {}
    for path, marks in rows:
        for m in marks or ["fast"]:
            tiers.setdefault(m, set()).add(path)
    return tiers


@pytest.mark.subprocess  # a child pytest collects the suite where this run holds part of it
def test_each_tier_holds_the_tests_that_start_what_it_names(request):
    tiers = suite_tiers(request.session)
    assert {"tests/test_form_browser.py", "tests/test_pages_browser.py", "tests/test_server_stop.py"} <= tiers["browser"]
    assert {"tests/test_one_run.py", "tests/test_distributed.py", "tests/test_cli.py"} <= tiers["subprocess"]
    assert "tests/test_real_models.py" in tiers["real"]
    marked = tiers["browser"] | tiers["subprocess"] | tiers["real"]
    assert "tests/test_config.py" not in marked and "tests/test_config.py" in tiers["fast"]
    assert not {"tests/test_form_browser.py", "tests/test_real_models.py"} & tiers["fast"]


def test_a_missing_package_fails_in_ci_and_is_skipped_elsewhere(monkeypatch):
    from conftest import need

    assert need("math").sqrt(4) == 2
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no_such_package_here is missing in CI"):
        need("no_such_package_here")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        need("no_such_package_here")


# Tests without their tier's mark, run by an inner pytest with tests/tier_guard.py: each fails in one line naming
# the mark; the marked one and the standard library's probe pass. Nothing here starts a browser or reads a model.
UNDECLARED = '''
import ctypes.util
import subprocess
import threading

import pytest

import tier_guard


def test_starts_a_process():
    subprocess.run(["true"])


def test_starts_a_process_in_a_thread():
    t = threading.Thread(target=subprocess.run, args=(["true"],))
    t.start()
    t.join()


def test_starts_a_browser():
    subprocess.Popen(["/nonexistent/chromium", "--headless"])


def test_reads_a_real_model(tmp_path, monkeypatch):
    (tmp_path / "model.safetensors").write_bytes(b"0")
    monkeypatch.setattr(tier_guard, "REAL", (str(tmp_path) + "/",))
    open(tmp_path / "model.safetensors", "rb").close()


@pytest.mark.subprocess
def test_declares_its_process():
    subprocess.run(["true"], check=True)


def test_only_probes_the_system():
    ctypes.util.find_library("c")  # runs ldconfig: nobody's process
'''


def test_a_test_without_its_tiers_mark_fails_in_one_line_naming_it(pytester):
    pytester.makeini("[pytest]\nmarkers =\n    subprocess: x\n    browser: x\n    real: x\n")
    pytester.makepyfile(test_undeclared=UNDECLARED)
    result = pytester.runpytest_inprocess("-p", "tier_guard", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=4)
    result.stdout.fnmatch_lines_random([
        "test_undeclared.py::test_starts_a_process starts a process: mark it subprocess (true)",
        "test_undeclared.py::test_starts_a_process_in_a_thread starts a process: mark it subprocess (true)",
        "test_undeclared.py::test_starts_a_browser starts a browser: mark it browser (/nonexistent/chromium *)",
        "test_undeclared.py::test_reads_a_real_model reads a packaged real model or corpus: mark it real (*/model.*)",
    ])
