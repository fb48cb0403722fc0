"""The reproduction scorecard of a task, written as a results file for the documentation.

Runs `dpviz.reproduce.run` (every claim, ``--seeds`` seeds, finished runs answered from the store) and writes
bench/results/scorecard_<task>.json (`bench/results.py`): one row per claim with its verdict, the measured
means ± std and the reading, and the wall time of the whole pass in the notes. The results pages show the
file (`<!-- results: scorecard_default -->`), so a verdict on the site is the last one measured.

Usage: python bench/run_scorecard.py [--task default] [--seeds 3] [--workers 1] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from dpviz import reproduce  # noqa: E402
from results import record  # noqa: E402


def measured(stats: dict) -> str:
    """A row's measurement as text: each group's mean ± std."""
    return "; ".join(f"{g} {s['mean']:.3f} ± {s['std']:.3f}" for g, s in stats.items())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="default")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--cache-dir", default=None)
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = reproduce.run(task=a.task, seeds=tuple(range(a.seeds)), cache_dir=a.cache_dir, workers=a.workers)
    wall = time.perf_counter() - t0
    table = [[r["id"], r["verdict"], measured(r["measured"]), r["reading"]] for r in rows]
    for t in table:
        print("| " + " | ".join(t) + " |")
    record(f"scorecard_{a.task}", title=f"Reproduction scorecard: {a.task} task",
           columns=["id", "verdict", f"dpviz's measurement (mean ± std, {a.seeds} seeds, auto rates)", "reading"],
           rows=table, notes=f"{a.seeds} seeds, {a.workers} worker(s); {wall / 60:.1f} min for the pass "
                             f"(runs already in the store answered from it).")


if __name__ == "__main__":
    main()
