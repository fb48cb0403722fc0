"""DP-LoRA on the sparse profile's setting: accuracy and trainable share at each rank r.

The default task (CNN on digits, 20 epochs), ε ∈ {1, 8}, seeds 0 and 1, and the learning rates of
the sparse profile (lr_ft 0.01 at ε = 1, 0.1 at ε = 8 for every method). Runs go through the store
(``$DPVIZ_CACHE_DIR`` or ./cache), so a second call answers from the cache.
Usage: python bench/run_lora_profile.py [--ranks 1 2 4 8] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import statistics

from common import CACHE
import dpviz
from dpviz.config import RunConfig

LR_FT = {1.0: 0.01, 8.0: 0.1}  # the profile's rates (README, "Profile on the default")


def cell(accs: list[float]) -> str:
    sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
    return f"{statistics.mean(accs):.3f} ± {sd:.3f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    a = ap.parse_args()
    print("| method | r | % of backbone trained | ε = 1 | ε = 8 |\n|---|---|---|---|---|")
    for r in a.ranks:
        accs, frac = {}, None
        for eps, lr in LR_FT.items():
            for seed in a.seeds:
                cfg = RunConfig(strategy="lora", lora_rank=r, epsilon=eps, lr_ft=lr, epochs=20, seed=seed)
                s = dpviz.run(cfg, cache_dir=CACHE)
                assert s["epsilon_spent"] <= eps
                accs.setdefault(eps, []).append(s["test_accuracy"])
                frac = s["trainable_fraction"]
        print(f"| DP-LoRA | {r} | {100 * frac:.1f} | {cell(accs[1.0])} | {cell(accs[8.0])} |", flush=True)


if __name__ == "__main__":
    main()
