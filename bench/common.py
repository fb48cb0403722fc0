"""Shared set-up for benchmarks: a prepared default run, timing helpers."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import dpviz  # noqa: E402,F401
from dpviz.training import prepare  # noqa: E402
from dpviz.config import RunConfig  # noqa: E402

CACHE = Path(os.environ.get("DPVIZ_CACHE_DIR", ROOT / "cache"))


def prepared(**kw):
    """A prepared run on the default data (pretrained backbone from the cache)."""
    return prepare.prepare(RunConfig(**kw).fixed_rates(), cache_dir=CACHE, with_curve=False)  # σ only: fixed rates


def interleaved(fns: dict, rounds: int = 7, reps: int = 3, sync=lambda: None, clock=time.perf_counter) -> dict:
    """Median seconds per call of each fn, timing them in alternation so load drifts hit all.

    ``sync`` runs before each clock read (``torch.cuda.synchronize`` for GPU work); ``clock``:
    ``time.process_time`` counts this process's CPU time instead of wall time (on one thread, what a
    loaded machine does not inflate).
    """
    for f in fns.values():
        f()  # warm-up
    sync()
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t = clock()
            for _ in range(reps):
                f()
            sync()
            times[k].append((clock() - t) / reps)
    return {k: statistics.median(v) for k, v in times.items()}


def batch(prep, size: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(prep.bundle.n, generator=g)[:size]
    return prep.bundle.x_train[idx], prep.bundle.y_train[idx]
