"""What BandMF's assignment of records to parts costs: ``parts = independent`` (each record's part drawn on
its own, valid for add-or-remove neighbours) beside ``equal`` (an equal split, valid for zero-out neighbours
only), on the default task (the embedded default: DP LP-then-FFT of the built-in CNN on digits), BandMF b = 4,
at ε ∈ {1, 8}, over seeds. Every run takes the shipped grid's rates (no search): the two differ only in parts.

Writes ``bench/results/parts_default.json``: test accuracy mean ± sd per ε and assignment, the per-seed values,
and the gap independent − equal against the spread.
Usage: python bench/compare_parts.py [--seeds 0 1 2] [--epsilons 1 8] [--bands 4] [--cache DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from results import record

import dpviz
from dpviz import RunConfig, tasks
from dpviz.store import Store


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 8.0])
    ap.add_argument("--bands", type=int, default=4)
    ap.add_argument("--cache", default=None)
    args = ap.parse_args()
    store = Store(args.cache or tempfile.mkdtemp(prefix="dpviz-parts-"))
    base = tasks.config("default")
    rows = []
    for eps in args.epsilons:
        acc = {}
        for parts in ("independent", "equal"):
            acc[parts] = [dpviz.run(base.replace(epsilon=eps, seed=s, mechanism="bandmf", bands=args.bands, parts=parts),
                                    store=store, rates="grid")["test_accuracy"] for s in args.seeds]
            print(eps, parts, acc[parts], flush=True)
        gap = [a - b for a, b in zip(acc["independent"], acc["equal"])]
        for parts in ("independent", "equal"):
            v = acc[parts]
            rows.append([f"{eps:g}", parts, f"{statistics.mean(v):.3f} ± {statistics.stdev(v):.3f}",
                         ", ".join(f"{x:.3f}" for x in v),
                         f"{statistics.mean(gap):+.3f} ± {statistics.stdev(gap):.3f}" if parts == "independent" else ""])
    record("parts_default", title=f"BandMF b = {args.bands} on the default task: independent parts beside an equal split",
           columns=["ε", "parts", "test accuracy", "per seed", "independent − equal (paired by seed)"], rows=rows,
           notes=f"{len(args.seeds)} seeds; DP LP-then-FFT of the built-in CNN on digits, the shipped grid's rates")


if __name__ == "__main__":
    main()
