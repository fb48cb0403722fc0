"""What the privacy check every run carries costs: the default task's run (the embedded default: DP
LP-then-FFT of the built-in CNN on digits, ε = 1) with ``privacy_check`` 3 (the default) beside 0 (off),
alternating, each in a store of its own (the check is not part of the configuration's key, so a shared store
would answer the second from the first), the shipped grid's rates.

Prints the median wall time of ``dpviz.run`` and of the training loop (the summary's ``wall_time_s``) for
each, and their ratio; writes ``bench/results/privacy_check_cost.json``.
Usage: python bench/bench_privacy_check.py [--repeats 5] [--checks 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from results import record

import dpviz
from dpviz import tasks
from dpviz.store import Store


def one(checks: int, seed: int) -> tuple[float, float]:
    store = Store(tempfile.mkdtemp(prefix="dpviz-check-"))
    t0 = time.perf_counter()
    s = dpviz.run(tasks.config("default", seed=seed, privacy_check=checks), store=store, rates="grid")
    return time.perf_counter() - t0, s["wall_time_s"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--checks", type=int, default=3)
    args = ap.parse_args()
    one(0, 99)  # imports, the backbone's cache and the grid: warm before anything is timed
    got = {0: [], args.checks: []}
    for r in range(args.repeats):
        for checks in (0, args.checks) if r % 2 == 0 else (args.checks, 0):
            got[checks].append(one(checks, r))
    med = {k: (statistics.median(v[0] for v in vs), statistics.median(v[1] for v in vs)) for k, vs in got.items()}
    rows = [[f"{k}", f"{med[k][0]:.2f} s", f"{med[k][1]:.2f} s"] for k in (0, args.checks)]
    ratio = (med[args.checks][0] / med[0][0], med[args.checks][1] / med[0][1])
    rows.append(["ratio", f"{ratio[0]:.3f}", f"{ratio[1]:.3f}"])
    for row in rows:
        print(*row, sep="\t")
    record("privacy_check_cost", title="The privacy check's cost on the default run (median of "
           f"{args.repeats}, alternating)", columns=["checked steps", "dpviz.run wall", "training loop"], rows=rows,
           notes="0: the check off; the default checks 3 steps (the first of each phase, then a random one) and "
           "reads every step's sampled indices")


if __name__ == "__main__":
    main()
