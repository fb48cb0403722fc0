"""The best LP share under correlated noise: DP-LP-FFT's test accuracy over the LP share p, DP-SGD beside
BandMF, per ε (seed 001's budget split, asked again of each mechanism).

Every run takes the shipped grid's DP-LP-FFT rates at its ε (the same for every mechanism: no search); p = 0
is DP-FFT and p = 1 is DP-LP, both through the LP-FFT strategy. Seeds are outermost, and the file is rewritten
after every run, so ``--stop-after SECONDS`` (a GPU call's limit) leaves whole seeds; a cell with fewer seeds
says how many.

``--scale small`` (or medium, large) runs at that size of the scorecard (`dpviz.reproduce.SCALES`) instead of
the task's preset: real text's small size (1,000 tweets of 32 tokens, B = 64) costs a sixth of its preset's
tokens per step, with the scorecard's own shipped rates.

Writes ``bench/results/split_<task>[_<scale>].json``: one row per (ε, mechanism), accuracy (mean ± sd over seeds) per p,
and the best p.
Usage: python bench/compare_split.py [--task real-vision] [--scale small] [--seeds 0 1 2] [--bands 1 4] [--epsilons 1 8]
       [--fractions 0 0.2 0.4 0.6 0.8 1] [--stop-after SECONDS] [--cache DIR]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from results import record

import dpviz
from dpviz import reproduce, tasks
from dpviz.store import Store


def rows(got: dict, args) -> list[list[str]]:
    """One row per (ε, mechanism) with a finished run: accuracy per p (mean ± sd), then the best p."""
    out = []
    for eps in args.epsilons:
        for b in args.bands:
            cells = {p: got.get((eps, b, p), []) for p in args.fractions}
            if not any(cells.values()):
                continue
            means = {p: statistics.mean(v) for p, v in cells.items() if v}
            row = [f"{eps:g}", f"bandmf b={b}" if b > 1 else "dp-sgd"]
            for p in args.fractions:
                v = cells[p]
                row.append("" if not v else f"{statistics.mean(v):.3f}" + (f" ± {statistics.stdev(v):.3f}" if len(v) > 1
                                                                            else "")
                           + (f" ({len(v)} of {len(args.seeds)})" if len(v) < len(args.seeds) else ""))
            out.append(row + [f"{max(means, key=means.get):g}"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="real-vision", choices=list(tasks.TASKS))
    ap.add_argument("--scale", choices=list(reproduce.SCALE_NAMES),
                    help="a size of the scorecard (`dpviz.reproduce.SCALES`); left out, the task's preset")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--bands", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 8.0])
    ap.add_argument("--fractions", nargs="+", type=float, default=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ap.add_argument("--stop-after", type=float, default=0, metavar="SECONDS",
                    help="start no run after this many seconds (0: no limit); the file holds the seeds finished")
    ap.add_argument("--cache", default="/tmp/dpviz-noise", help="the store the runs go to")
    args = ap.parse_args()
    sized = reproduce.size_fields(args.task, args.scale) if args.scale else {}
    if args.scale and not sized:
        ap.error(f"--scale: {args.task} has no {args.scale} size")
    name = f"split_{args.task}" + (f"_{args.scale}" if args.scale else "")
    store, got, t0 = Store(Path(args.cache)), {}, time.monotonic()
    columns = ["ε", "mechanism"] + [f"p = {p:g}" for p in args.fractions] + ["best p"]
    for seed in args.seeds:
        for eps in args.epsilons:
            for b in args.bands:
                for p in args.fractions:
                    if args.stop_after and time.monotonic() - t0 > args.stop_after:
                        print(f"stopped after {time.monotonic() - t0:.0f} s, before seed {seed}", flush=True)
                        return
                    kw = dict(mechanism="bandmf", bands=b) if b > 1 else {}
                    cfg = tasks.config(args.task, strategy="lp-fft", lp_fraction=p, epsilon=eps, seed=seed,
                                       keep_weights="none", **sized, **kw)
                    s = dpviz.run(cfg, store=store, rates="grid")
                    assert s["epsilon_spent"] <= eps
                    got.setdefault((eps, b, p), []).append(s["test_accuracy"])
                    print(f"seed {seed} | ε={eps:g} | b={b} | p={p:g} | accuracy {s['test_accuracy']:.4f} | "
                          f"ε spent {s['epsilon_spent']:.4f}", flush=True)
                    record(name, columns=columns, rows=rows(got, args),
                           title=f"The best LP share, DP-SGD beside BandMF, {tasks.task(args.task).label}: DP-LP-FFT"
                                 + (f", the scorecard's {args.scale} size" if args.scale else ""),
                           notes=f"test accuracy, mean ± sd over seeds {', '.join(map(str, args.seeds))}"
                                 + "".join(f", {k} {v}" for k, v in sized.items()) + "; the shipped "
                                 "grid's DP-LP-FFT rates at each ε for every mechanism; p = 0 is DP-FFT, p = 1 DP-LP.")


if __name__ == "__main__":
    main()
