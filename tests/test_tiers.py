"""The tiers a developer runs while working: every test is marked by what it starts (tests/conftest.py), so
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
