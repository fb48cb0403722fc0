"""The test suite's wall times: CI on a clean clone of this repository, install included, and the fast tier.

Clones the committed tree (``HEAD``) into a temporary folder and runs there, one after the other:
1. CI's script as CI does (``CI=true bash .ci/run``: setup, then ``bash run.sh test``, every test on two
   pytest-xdist workers);
2. the fast tier (``bash run.sh test -m FAST``), on the set-up clone.
Writes each wall time, the suite's share of CI (pytest's own summary) and the counts to
``bench/results/ci.json``. Run it with nothing else on the machine: two suites or a benchmark beside it
double the figure.
Usage: python bench/bench_ci.py [--keep-log FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from results import record  # noqa: E402

# pytest's last line: "= 875 passed, 2 skipped, 2 xfailed, 2 warnings in 641.25s (0:10:41) ="
SUMMARY = re.compile(r"=+ (?P<counts>[^=]*?) in (?P<seconds>[\d.]+)s")
# The tier without a browser, a subprocess, a packaged real model or a slow test (the README's command while working).
FAST = "not slow and not browser and not subprocess and not real"


def minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep-log", help="also write CI's output here")
    a = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "main"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        ci, ci_log = pytest_run(["bash", ".ci/run"], clone)
        fast, fast_log = pytest_run(["bash", "run.sh", "test", "-m", FAST], clone)
    if a.keep_log:
        Path(a.keep_log).write_text(ci_log + fast_log)
    suite, counts = summary(ci_log)
    fast_s, fast_counts = summary(fast_log)
    rows = [["CI on a clean clone, install included", "`CI=true bash .ci/run`",
             f"{minutes(ci)}: install and setup {minutes(ci - suite)}, suite {minutes(suite)} ({counts})"],
            ["every test, on 2 pytest-xdist workers", "`bash run.sh test`", f"{minutes(suite)} (CI's suite)"],
            ["the fast tier, on 2 workers", f'`bash run.sh test -m "{FAST}"`',
             f"{minutes(fast)}, of which pytest {minutes(fast_s)} ({fast_counts})"]]
    for row in rows:
        print(" | ".join(row))
    record("ci", title="The test suite", columns=["what", "command", "time"], rows=rows,
           notes=f"commit {commit}, a clean clone, CI=true, no GPU; nothing else running (goal for CI: 12 min)")


def timed(cmd: list[str], cwd: Path, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """Seconds ``cmd`` took in ``cwd`` (``env`` over this process's environment) and its finished process; a
    failure stops the benchmark with the output's end, and nothing is recorded."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        print((done.stdout + done.stderr)[-3000:])
        sys.exit(f"{' '.join(cmd)} failed (exit {done.returncode}): nothing recorded")
    return wall, done


def pytest_run(cmd: list[str], cwd: Path) -> tuple[float, str]:
    """`timed` for a command that ends in a pytest run, as CI runs it (CI=true): seconds and the output."""
    wall, done = timed(cmd, cwd, {"CI": "true"})
    log = done.stdout + done.stderr
    if not SUMMARY.findall(log):
        print(log[-3000:])
        sys.exit(f"{' '.join(cmd)} printed no pytest summary: nothing recorded")
    return wall, log


def summary(log: str) -> tuple[float, str]:
    """pytest's own seconds and counts, from its last summary line."""
    counts, seconds = SUMMARY.findall(log)[-1]
    return float(seconds), counts


if __name__ == "__main__":
    main()
