"""Scorecard runs an hour: one process on every core vs `reproduce --workers N` (one thread each).

Both train the same distinct runs (a real task's scorecard-size DP runs, seeds 0..k-1) into fresh
stores, side by side in one invocation: first one process with torch on all cores, run after run (what
`reproduce` does without --workers), then `dpviz.reproduce.scorecard.train` with N single-threaded
processes. Prints the wall time of each and the ratio, and writes them to bench/results/workers.json.
Usage: python bench/bench_workers.py [--task real-vision] [--strategy fft] [--runs 4] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import common  # noqa: F401  (the repository on sys.path)
import torch

from dpviz.reproduce import scorecard_config
from dpviz.reproduce.claims import KEEP
from dpviz.reproduce.scorecard import train
from dpviz.runner import run
from dpviz.store import Store
from results import record


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="real-vision")
    ap.add_argument("--strategy", default="fft")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    os.environ["DPVIZ_BACKGROUND_ANALYSES"] = "off"
    cfgs = [scorecard_config(a.task, strategy=a.strategy, epsilon=1.0, seed=s, **KEEP["accuracy"])
            for s in range(a.runs)]
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as pool:
        torch.set_num_threads(cores)
        run(cfgs[0].replace(seed=10**6), store=Store(one))  # warm the data and backbone caches off the clock
        t0 = time.perf_counter()
        for cfg in cfgs:
            run(cfg, store=Store(one))
        serial = time.perf_counter() - t0
        t0 = time.perf_counter()
        finished = train(cfgs, workers=a.workers, cache_dir=pool)
        parallel = time.perf_counter() - t0
    assert finished == len(cfgs), f"{finished} of {len(cfgs)} runs finished in the pool"
    columns = [f"{a.task} {a.strategy}, {a.runs} runs", f"1 process × {cores} threads",
               f"{a.workers} workers × {max(1, cores // a.workers)} thread", "ratio"]
    rows = [["wall time", f"{serial:.0f} s", f"{parallel:.0f} s", f"{serial / parallel:.2f}×"]]
    print("| " + " | ".join(columns) + " |\n|---|---|---|---|\n| " + " | ".join(rows[0]) + " |")
    record("workers", title="Scorecard runs: one process on every core vs worker processes", columns=columns,
           rows=rows, notes="the same distinct runs into fresh stores, one after the other in one invocation; the "
                            "workers' start (each imports torch and loads the backbone) included")


if __name__ == "__main__":
    main()
