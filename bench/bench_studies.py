"""What a study costs a user: its first reading on a fresh store (from the shipped results, then from a study of
one's own), and what a study in pieces carries from one piece to the next with ``--keep results`` beside
``--keep all``. Each command runs in a fresh process on a fresh store, as a user's would.

Usage: python bench/bench_studies.py [--repeat 3]
Writes bench/results/studies.json (`bench/results.py`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results import record

ROOT = Path(__file__).resolve().parents[1]
OWN = ["study", "run", "noise", "--seeds", "0", "--vary", "epsilon=1,8", "bands=1,2"]  # 4 runs of the default task


def dpviz(store: Path, *args: str) -> float:
    """Seconds the command took in a fresh process on ``store``."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dpviz", "--cache-dir", str(store), *args], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def size(store: Path) -> int:
    return sum(p.stat().st_size for p in store.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    shown, own, kept = [], [], {}
    with tempfile.TemporaryDirectory(prefix="dpviz-bench-studies-") as d:
        for i in range(args.repeat):
            shown.append(dpviz(Path(d) / f"show{i}", "study", "show", "noise"))
        for keep in ("all", "results"):
            store = Path(d) / f"own-{keep}"
            own.append(dpviz(store, *OWN, "--keep", keep))
            kept[keep] = size(store)
    rows = [["first reading, shipped results (`study show noise`, fresh store)", f"{statistics.median(shown):.1f} s",
             f"median of {args.repeat}"],
            ["first reading of one's own (`" + " ".join(OWN) + "`, 4 runs, fresh store)",
             f"{statistics.median(own):.1f} s", "median of 2 (keep all, keep results)"],
            ["store left after the 4 runs, --keep all", f"{kept['all'] / 2**20:.2f} MiB", "1.00×"],
            ["store left after the 4 runs, --keep results", f"{kept['results'] / 2**20:.2f} MiB",
             f"{kept['results'] / kept['all']:.2f}×"]]
    for r in rows:
        print(" | ".join(r))
    record("studies", title="A study's first reading and what it carries between pieces", columns=[
        "what", "measured", "note"], rows=rows, notes=f"the default task (the built-in CNN on digits), {os.cpu_count()} "
           "cores, each command a fresh process; a store's size counts every file under it (database, results, "
           "checkpoints)")


if __name__ == "__main__":
    main()
