"""Privacy audits on the default task: ε_lb against ε, white-box and black-box, beside the ideal attack.

For each ε, one audit per threat with M canaries (fresh store, so every audit trains): ε_lb by the
one-run bound and by the f-DP bound, the ideal ε_lb (median over 5 draws of scores from the exact
mechanism: the limit of any attack for the same M and confidence), their ratio and the wall time.
With --sweep: the audit sweep of the Privacy audit page over every registered strategy, ε ∈ {0.5, 1, 2,
4, 8, ∞} and both threats: ε_lb per cell (white-box / black-box), the ceiling, and the sweep's wall time.
Usage: python bench/bench_audit.py [--canaries 1000] [--sweep]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpviz.audit import AuditSpec, audit, bounds  # noqa: E402
from dpviz.config import RunConfig  # noqa: E402


def ideal(r: dict, draws: int = 5) -> float:
    import numpy as np

    inc = np.zeros(r["canaries"], bool)
    inc[:r["included"]] = True
    vals = []
    for s in range(draws):
        sc = bounds.ideal_scores(inc, steps=r["steps"], sample_rate=r["sample_rate"],
                                 noise_multiplier=r["noise_multiplier"], seed=100 + s)
        b = bounds.best_bounds(sc, inc, delta=r["delta"], confidence=r["confidence"])
        vals.append(max(b["epsilon_lb"], b["epsilon_lb_fdp"]))
    return statistics.median(vals)


def sweep_table(canaries: int, cache: Path) -> None:
    from dpviz import strategies
    from dpviz.audit import sweep

    t0 = time.perf_counter()
    rows = sweep.sweep(RunConfig(), AuditSpec(canaries=canaries), strategies=strategies.names(), cache_dir=cache)
    wall = time.perf_counter() - t0
    cell = {(r["strategy"], r["epsilon"], r["threat"]): r["epsilon_lb"] for r in rows}
    eps = [None if e == float("inf") else e for e in sweep.EPSILONS]
    print("| strategy | " + " | ".join(f"ε = {'∞' if e is None else format(e, 'g')}" for e in eps) + " |")
    print("|---|" + "---|" * len(eps))
    for s in strategies.names():
        print(f"| {s} | " + " | ".join(f"{cell[s, e, 'white-box']:.2f} / {cell[s, e, 'black-box']:.2f}"
                                        for e in eps) + " |")
    over = [r for r in rows if r["epsilon"] is not None and r["epsilon_lb"] > r["epsilon_spent"]]
    print(f"\nε_lb white-box / black-box, M = {canaries}; ceiling {rows[0]['ceiling']:.2f}; "
          f"{len(rows)} audits in {wall:.0f} s ({wall / len(rows):.1f} s each); ε_lb > ε spent: {len(over)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--canaries", type=int, default=1000)
    ap.add_argument("--sweep", action="store_true")
    a = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="dpviz-audit-"))
    if a.sweep:
        return sweep_table(a.canaries, cache)
    print("| ε | threat | ε spent | ε_lb one-run | ε_lb f-DP | ideal ε_lb | best ÷ ideal | AUC | audit wall |")
    print("|---|---|---|---|---|---|---|---|---|")
    for eps in (1.0, 2.0, 4.0, 8.0):
        for threat in ("white-box", "black-box"):
            t0 = time.perf_counter()
            r = audit(RunConfig(epsilon=eps), AuditSpec(canaries=a.canaries, threat=threat), cache_dir=cache)
            wall = time.perf_counter() - t0
            best, lim = max(r["epsilon_lb"], r["epsilon_lb_fdp"]), ideal(r)
            print(f"| {eps:g} | {threat} | {r['epsilon_spent']:.3f} | {r['epsilon_lb']:.3f} | {r['epsilon_lb_fdp']:.3f} "
                  f"| {lim:.3f} | {best / lim if lim else float('nan'):.2f} | {r['auc']:.3f} | {wall:.1f} s |")
    print(f"\nceiling for M = {a.canaries} at 95 %: {r['ceiling']:.2f}")


if __name__ == "__main__":
    main()
