"""One run with `auto` rates vs a private search within the same total ε vs a fixed-count search composed
to that total: test accuracy of what each releases, on the private data.

For each task, total ε and seed: (a) one run of the task's LP-FFT with learning rates on `auto` (tuned on
public data only: no privacy spent on tuning); (b) `tune --private` with a truncated negative binomial
(geometric) number of trials of mean 5 over lr_lp and lr_ft (`dpviz.autotune.RANGES`), the best released;
(c) the same with exactly 5 trials whose training and scores are composed (PLD) to the total. (b) and (c)
hold out the same training examples for their scores; (a) trains on all of them. Runs and searches are
stored in ``--cache-dir``, so a second invocation answers from the store.

Usage: python bench/run_private_tuning.py [--task default real-text] [--epsilons 1 8] [--seeds 0 1 2]
Writes bench/results/private_tuning_<task>.json (`bench/results.py`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import dpviz  # noqa: E402
from dpviz import autotune, tasks  # noqa: E402
from dpviz.store import Store  # noqa: E402
from dpviz.sweeps import private  # noqa: E402
from results import record  # noqa: E402

# the real-text task at the scorecard's size (its `small`): 1,000 tweets, 32 tokens, B = 64, 3 epochs
SIZES = {"default": {}, "real-text": dict(train_size=1000, max_length=32, batch_size=64, epochs=3)}
METHODS = ("auto", "negative-binomial", "fixed")
LABELS = {"auto": "(a) one run, auto rates (public)", "negative-binomial": "(b) private search, geometric, mean 5",
          "fixed": "(c) 5 trials composed to the total"}


def base(task: str, eps: float, seed: int):
    return tasks.config(task, strategy="lp-fft", epsilon=eps, seed=seed, **SIZES[task])


def one(task: str, method: str, eps: float, seed: int, store: Store) -> tuple[float, float]:
    """(test accuracy of what the method releases, total ε it spent)."""
    cfg = base(task, eps, seed)
    if method == "auto":
        s = dpviz.run(cfg, store=store)
        return s["test_accuracy"], s["epsilon_spent"]
    search = private.PrivateSearch(base=cfg, space={f: autotune.RANGES[f] for f in ("lr_lp", "lr_ft")},
                                   total_epsilon=eps, distribution=method, mean_trials=5)
    e = private.run_search(search, run=dpviz.run, store=store)
    return (e["test_accuracy"] if e["released_run_id"] else float("nan")), e["epsilon_spent"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", nargs="+", default=["default"], choices=list(SIZES))
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 8.0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--cache-dir", default=None)
    a = ap.parse_args()
    store = Store(a.cache_dir)
    for task in a.task:
        rows, t0 = [], time.perf_counter()
        for eps in a.epsilons:
            for method in METHODS:
                got = [one(task, method, eps, s, store) for s in a.seeds]
                accs = [g[0] for g in got]
                rows.append([f"{eps:g}", LABELS[method], f"{statistics.mean(accs):.3f} ± {statistics.stdev(accs):.3f}",
                             " ".join(f"{x:.3f}" for x in accs), f"{max(g[1] for g in got):.3f}"])
                print("| " + " | ".join(rows[-1]) + " |", flush=True)
        record(f"private_tuning_{task}", title=f"Tuning within one total ε: {task} task, LP-FFT",
               columns=["total ε", "what is released", "test accuracy (mean ± std)", "per seed", "ε spent (max)"],
               rows=rows, notes=f"{len(a.seeds)} seeds ({', '.join(map(str, a.seeds))}); δ = 1e-5; searches over "
               f"lr_lp and lr_ft on their `auto` ranges; {time.perf_counter() - t0:.0f} s in all.")


if __name__ == "__main__":
    main()
