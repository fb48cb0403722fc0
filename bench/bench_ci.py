"""The test suite's wall times: CI on a clean clone of this repository, install included, and the fast tier.

Clones the committed tree (``HEAD``) into a temporary folder and runs there CI's script as CI does
(``CI=true bash .ci/run``: setup, then ``bash run.sh test``: two pytest runs on two pytest-xdist workers, the
fast tier and then the rest). The suite's share of CI is the two runs' own seconds (pytest's summaries) and its
counts their sum; the fast tier's time is the first run's own. Where CI's output holds one pytest summary only,
the fast tier runs again on the set-up clone (``bash run.sh test -m FAST``) and is timed there.
Writes the wall times, the suite's share and the counts to ``bench/results/ci.json``. Run it with nothing else
on the machine: two suites or a benchmark beside it double the figure.
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
COUNT = re.compile(r"(\d+) (\w+)")
# A tier's run deselects the other tier's tests: that count is no outcome, and the two would add up to the suite.
NOT_SUMMED = {"deselected"}
PLURAL = {"warning": "warnings", "error": "errors"}
ORDER = ("failed", "passed", "skipped", "xfailed", "xpassed", "warnings", "errors")  # pytest's own order
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
        runs = summaries(ci_log)
        fast, fast_log = (None, "") if len(runs) > 1 else pytest_run(["bash", "run.sh", "test", "-m", FAST], clone)
    if a.keep_log:
        Path(a.keep_log).write_text(ci_log + fast_log)
    suite, counts = sum(s for s, _ in runs), joined([c for _, c in runs])
    if fast is None:  # CI's first pytest run is the fast tier
        fast_s, fast_counts = runs[0][0], joined([runs[0][1]])
        fast_time = f"{minutes(fast_s)} of pytest, the first of CI's two runs ({fast_counts})"
    else:
        fast_s, fast_counts = summary(fast_log)
        fast_time = f"{minutes(fast)}, of which pytest {minutes(fast_s)} ({fast_counts})"
    rows = [["CI on a clean clone, install included", "`CI=true bash .ci/run`",
             f"{minutes(ci)}: install and setup {minutes(ci - suite)}, suite {minutes(suite)} ({counts})"],
            ["every test, on 2 pytest-xdist workers", "`bash run.sh test`",
             f"{minutes(suite)} (CI's suite: {len(runs)} pytest run{'s' * (len(runs) > 1)})"],
            ["the fast tier, on 2 workers", f'`bash run.sh test -m "{FAST}"`', fast_time]]
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


def summaries(log: str) -> list[tuple[float, str]]:
    """Each pytest run's own seconds and counts, in the order they ran (one summary line each)."""
    return [(float(seconds), counts) for counts, seconds in SUMMARY.findall(log)]


def joined(counts: list[str]) -> str:
    """pytest runs' counts added up ("875 passed, 2 skipped" and "90 passed, 1 warning": "965 passed, 2 skipped,
    1 warning"), in the order pytest names them, without what a run deselected."""
    total: dict[str, int] = {}
    for text in counts:
        for n, word in COUNT.findall(text):
            word = PLURAL.get(word, word)
            if word not in NOT_SUMMED:
                total[word] = total.get(word, 0) + int(n)
    singular = {v: k for k, v in PLURAL.items()}
    words = sorted(total, key=lambda w: ORDER.index(w) if w in ORDER else len(ORDER))
    return ", ".join(f"{total[w]} {singular.get(w, w) if total[w] == 1 else w}" for w in words)


if __name__ == "__main__":
    main()
