"""Budget-sweep scaling and the study machinery's per-trial overhead.

1. The same 12-run budget sweep (ε ∈ {1, 8} × p ∈ {0, 0.5, 1} × seeds {0, 1}) with
   1 worker and with 2 worker processes (torch threads × workers = cores), each
   in a fresh store sharing the pretrained-backbone cache: wall-time speed-up.
2. Per-trial overhead: the same 6 configurations run bare (`dpviz.run`) and as
   trials of a study in this process, both into fresh stores.
Usage: python bench/bench_sweep.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import CACHE, ROOT
import dpviz
from dpviz import sweeps
from dpviz.config import RunConfig

GRID = dict(eps=["1", "8"], fractions=["0", "0.5", "1"], seeds=["0", "1"])


def fresh() -> Path:
    d = Path(tempfile.mkdtemp()) / "cache"
    d.mkdir()
    (CACHE / "backbones").mkdir(parents=True, exist_ok=True)
    os.symlink(CACHE / "backbones", d / "backbones")
    return d


def sweep_time(workers: int) -> float:
    d = fresh()
    cmd = [sys.executable, "-m", "dpviz", "--cache-dir", str(d), "sweep", "budget", "--epsilon", *GRID["eps"],
           "--fractions", *GRID["fractions"], "--seeds", *GRID["seeds"], "--workers", str(workers), "--json"]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - t


def overhead() -> tuple[float, float]:
    cfgs = [RunConfig(epsilon=float(e), lp_fraction=float(p)) for e in GRID["eps"] for p in GRID["fractions"]]
    dpviz.run(cfgs[0], cache_dir=fresh())  # warm-up (imports, first calls), timed by neither side
    d1 = fresh()
    t = time.perf_counter()
    for c in cfgs:
        dpviz.run(c, cache_dir=d1)
    bare = time.perf_counter() - t
    d2 = fresh()
    space = sweeps.budget_grid(epsilons=GRID["eps"], fractions=[float(p) for p in GRID["fractions"]], seeds=[0])
    t = time.perf_counter()
    study = sweeps.create_budget_sweep(RunConfig(), space, cache_dir=d2)
    sweeps.work(study, run=dpviz.run, cache_dir=d2)
    return bare, time.perf_counter() - t


def main():
    one, two = sweep_time(1), sweep_time(2)
    bare, study = overhead()
    print("| measurement | value | goal |\n|---|---|---|")
    print(f"| 12-run budget sweep, 1 worker vs 2 workers | {one:.1f} s vs {two:.1f} s: {one / two:.2f}× | ≥ 1.7× |")
    print(f"| 6 runs bare vs as study trials (per-trial overhead) | {bare:.1f} s vs {study:.1f} s: "
          f"{(study - bare) / bare:+.1%} | ≤ 2 % |")


if __name__ == "__main__":
    main()
