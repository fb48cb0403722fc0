"""CI's wall time: ``CI=true bash .ci/run`` on a clean clone of this repository, install included.

Clones the committed tree (``HEAD``) into a temporary folder, runs CI's script there as CI does, and writes
the wall time, the suite's share (pytest's own summary) and its counts to ``bench/results/ci.json``. Run it
with nothing else on the machine: two suites or a benchmark beside it double the figure.
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
        t0 = time.perf_counter()
        done = subprocess.run(["bash", ".ci/run"], cwd=clone, env={**os.environ, "CI": "true"},
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
    log = done.stdout + done.stderr
    if a.keep_log:
        Path(a.keep_log).write_text(log)
    found = SUMMARY.findall(log)
    if done.returncode or not found:
        print(log[-3000:])
        sys.exit(f"CI failed (exit {done.returncode}): nothing recorded")
    counts, suite = found[-1][0], float(found[-1][1])
    row = ["a clean clone, install included", "`CI=true bash .ci/run`",
           f"{minutes(wall)}: install and setup {minutes(wall - suite)}, suite {minutes(suite)} ({counts})"]
    print(" | ".join(row))
    record("ci", title="CI on a clean clone", columns=["what", "command", "time"], rows=[row],
           notes=f"commit {commit}, CI=true, no GPU; nothing else running (goal: 12 min)")


if __name__ == "__main__":
    main()
