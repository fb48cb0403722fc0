"""What planning a private search costs: `dpviz.sweeps.private.plan` (σ calibrated so that the whole search
stays within its total ε, then the plan's figures) for a fixed count of trials, each trial and its score
composed by PLD, with the search costed on the 1e-4 privacy-loss grid beside the grid of the total ε
(`dpviz.privacy.selection.search_grid`), alternating.

Prints, per total ε, the median plan time of each, their ratio, the σ each finds and the search's ε at that σ
recomputed on the 1e-4 grid (both must be ≤ the total); writes ``bench/results/private_search_plan.json``.
Usage: python bench/bench_private_search.py [--repeats 3] [--trials 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from results import record

from dpviz.config import RunConfig
from dpviz.privacy import selection
from dpviz.privacy.accounting import PLD_DISCRETISATION
from dpviz.sweeps import private


def timed(search, grid) -> tuple[float, object]:
    """One plan with the search costed on ``grid`` (None: the shipped `search_grid`)."""
    shipped = selection.search_grid
    if grid is not None:
        selection.search_grid = lambda total: grid
    try:
        t0 = time.perf_counter()
        p = private.plan(search)
        return time.perf_counter() - t0, p
    finally:
        selection.search_grid = shipped


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--totals", type=float, nargs="+", default=[1.0, 8.0])
    args = ap.parse_args()
    rows = []
    for total in args.totals:
        search = private.PrivateSearch(base=RunConfig(strategy="lp", epochs=2), space={"lr_lp": (0.05, 5.0)},
                                       total_epsilon=total, distribution=selection.FIXED, mean_trials=args.trials)
        timed(search, None)  # imports (dp_accounting) before anything is timed
        got = {"fine": [], "search": []}
        plans = {}
        for r in range(args.repeats):
            for name in ("fine", "search") if r % 2 == 0 else ("search", "fine"):
                t, plans[name] = timed(search, PLD_DISCRETISATION if name == "fine" else None)
                got[name].append(t)
        med = {k: statistics.median(v) for k, v in got.items()}
        labels = {"fine": f"{PLD_DISCRETISATION:g} (fixed)", "search": f"{selection.search_grid(total):g} (search_grid)"}
        for name, label in labels.items():
            p = plans[name]
            fine_eps = selection.spent(phases=p.phases, score_sigma=p.score_sigma, delta=search.total_delta,
                                       mean_trials=args.trials, distribution=selection.FIXED)
            rows.append([f"{total:g}", label, f"{med[name]:.2f} s", f"{p.noise_multiplier:.4f}", f"{fine_eps:.4f}"])
        rows.append([f"{total:g}", "ratio (1e-4 ÷ search grid)", f"{med['fine'] / med['search']:.1f}×", "", ""])
    for row in rows:
        print(*row, sep="\t")
    record("private_search_plan", title=f"Planning a private search of {args.trials} fixed trials (median of "
           f"{args.repeats}, alternating)", columns=["total ε", "PLD grid", "plan", "σ", "search ε (1e-4 grid)"],
           rows=rows, notes="the default task's LP trials; σ is the smallest (to 0.2 %) whose search ε stays within "
           "the total; the last column recomputes that ε on the 1e-4 grid")


if __name__ == "__main__":
    main()
