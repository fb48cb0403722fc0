"""The budget-split utility curve on the default: LP-FFT test accuracy over the LP share p, per ε.

Two columns per ε, both over seeds 0–2: learning rates on "auto" (tuned on public glyphs, zero privacy
spent on tuning) and the rates picked on the private data (`TUNED`: LP 3, FT per ε, as in the accuracy
table — a privacy cost no run's ε includes). Prints the table, the best p of each column per ε and
whether every run's ε spent stayed within its budget.
Usage: python bench/bench_budget.py [--epsilons 1 2 8] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import statistics

from common import CACHE
import dpviz
from dpviz.config import RunConfig

TUNED = {"1": (3.0, 0.01), "2": (3.0, 0.03), "8": (3.0, 0.1)}  # (lr_lp, lr_ft), picked on private digits
FRACTIONS = [round(0.1 * i, 1) for i in range(11)]


def cell(cfg: RunConfig, seeds) -> tuple[float, float, bool]:
    """(mean, std, every run's ε spent ≤ ε) of test accuracy over ``seeds``."""
    runs = [dpviz.run(cfg.replace(seed=s), cache_dir=CACHE) for s in seeds]
    acc = [r["test_accuracy"] for r in runs]
    ok = all(r["epsilon_spent"] is None or r["epsilon_spent"] <= cfg.epsilon for r in runs)
    return statistics.mean(acc), statistics.pstdev(acc), ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epsilons", nargs="+", default=["1", "2", "8"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = ap.parse_args()
    base = RunConfig(strategy="lp-fft")
    table, ok = {}, True
    for eps in args.epsilons:
        for p in FRACTIONS:
            cfg = base.replace(epsilon=eps, lp_fraction=p)
            lr_lp, lr_ft = TUNED[eps]
            a, t = cell(cfg, args.seeds), cell(cfg.replace(lr_lp=lr_lp, lr_ft=lr_ft), args.seeds)
            table[eps, p] = (a, t)
            ok = ok and a[2] and t[2]
            print(f"ε={eps} p={p}: auto {a[0]:.3f}, tuned {t[0]:.3f}", flush=True)
    head = " | ".join(f"ε={e} auto | ε={e} tuned" for e in args.epsilons)
    print(f"\n| p | {head} |\n|---|" + "---|" * (2 * len(args.epsilons)))
    for p in FRACTIONS:
        cells = " | ".join(f"{m:.3f} ± {s:.3f}" for e in args.epsilons for m, s, _ in table[e, p])
        print(f"| {p:g} | {cells} |")
    for col, name in ((0, "auto"), (1, "tuned")):
        best = {e: max(FRACTIONS, key=lambda p: (table[e, p][col][0], -p)) for e in args.epsilons}
        print(f"best p, {name}: " + ", ".join(f"ε={e}: p={best[e]:g} ({table[e, best[e]][col][0]:.3f})"
                                              for e in args.epsilons))
    print(f"every run's ε spent ≤ its ε: {ok}")


if __name__ == "__main__":
    main()
