"""The reproduction scorecard of a task, written as a results file for the documentation.

Runs `dpviz.reproduce.run` (every claim, ``--seeds`` seeds, finished runs answered from the store) and writes
bench/results/scorecard_<task>.json (`bench/results.py`): one row per claim with its verdict, the measured
means ± std and the reading, and the wall time of the whole pass in the notes. The results pages show the
file (`<!-- results: scorecard_default -->`), so a verdict on the site is the last one measured.

A larger size (``--scale medium|large``, `dpviz.reproduce.SCALES`) reads its scale-sensitive claims and
writes bench/results/scorecard_<task>_<scale>.json; every size also writes its rows whole, with the curves
its figures draw (kNN over steps, log D_l over depth), to bench/results/rows/, which the Reproduction page
and the scale page of the results read.

``--set mechanism=bandmf bands=2`` (RunConfig fields on every run, as `python -m dpviz reproduce --set`) writes
the same files with the variant in their names (`dpviz.reproduce.variant`: scorecard_default_bandmf-b2.json),
which the Reproduction page's correlated-noise section reads.

Usage: python bench/run_scorecard.py [--task default] [--scale small] [--seeds 3] [--workers 1]
       [--device auto|cpu|cuda] [--claims ID ...] [--cache-dir DIR] [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
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
    ap.add_argument("--scale", default="small", choices=list(reproduce.SCALES))
    ap.add_argument("--device", default=None, choices=("auto", "cpu", "cuda"))
    ap.add_argument("--claims", nargs="+", default=None)
    ap.add_argument("--set", nargs="+", default=None, metavar="FIELD=VALUE", dest="changes")
    a = ap.parse_args()
    changes = {k: json.loads(v) if v[:1].isdigit() else v for k, _, v in (c.partition("=") for c in a.changes or ())}
    t0 = time.perf_counter()
    rows = reproduce.run(a.claims, task=a.task, seeds=tuple(range(a.seeds)), cache_dir=a.cache_dir,
                         workers=a.workers, scale=a.scale,
                         changes={**changes, **({"device": a.device} if a.device else {})} or None)
    wall = time.perf_counter() - t0
    if a.scale != "small":  # the claims read at this size only
        rows = [r for r in rows if r["verdict"] != reproduce.NOT_READ]
    table = [[r["id"], r["verdict"], measured(r["measured"]), r["reading"]] for r in rows]
    for t in table:
        print("| " + " | ".join(t) + " |")
    name = reproduce.results_name(a.task, a.scale, changes)
    size = reproduce.SCALES[a.scale].get(a.task, {})
    what = (f"{a.scale}: {size['train_size']:,} examples, ≈ {reproduce.steps_of(size):,} DP steps a run; "
            if size else "")
    record(name, title=f"Reproduction scorecard: {a.task} task" + (f", size {a.scale}" if a.scale != "small" else "")
           + (f", {reproduce.variant(changes)}" if reproduce.variant(changes) else ""),
           columns=["id", "verdict", f"dpviz's measurement (mean ± std, {a.seeds} seeds, auto rates)", "reading"],
           rows=table, notes=f"{what}{a.seeds} seeds, {a.workers} worker(s); {wall / 60:.1f} min for the pass "
                             f"(runs already in the store answered from it).")
    (ROOT / "bench" / "results" / "rows").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "rows" / f"{name}.json").write_text(json.dumps(
        {"task": a.task, "scale": a.scale, "seeds": a.seeds, "changes": changes, "wall_s": round(wall, 1), "rows": rows},
        ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
