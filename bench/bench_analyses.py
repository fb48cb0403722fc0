"""Analysis speed: fuzziness, kNN, and all analyses of one checkpoint vs the run's training time.

Usage: python bench/bench_analyses.py
"""

from __future__ import annotations

import time

import numpy as np

from common import CACHE
import dpviz
from dpviz.analyses import REGISTRY, run_analysis
from dpviz.analyses.separability import fuzziness


def timed(f, reps=5):
    f()
    t = time.perf_counter()
    for _ in range(reps):
        f()
    return (time.perf_counter() - t) / reps


def naive_fuzziness(x, y):
    """The plain route: d × d scatter matrices and a pseudo-inverse."""
    mu = x.mean(0)
    sb, sw = np.zeros((x.shape[1],) * 2), np.zeros((x.shape[1],) * 2)
    for c in np.unique(y):
        xc = x[y == c]
        m = xc.mean(0)
        sb += len(xc) * np.outer(m - mu, m - mu)
        sw += (xc - m).T @ (xc - m)
    return np.trace(sw @ np.linalg.pinv(sb))


def main():
    rng = np.random.default_rng(0)
    feats = [rng.normal(size=(1000, 192)) for _ in range(12)]
    y = rng.integers(0, 10, 1000)
    fast = timed(lambda: [fuzziness(x, y) for x in feats])
    naive = timed(lambda: [naive_fuzziness(x, y) for x in feats], reps=1)
    x2, y2 = rng.normal(size=(2000, 64)), rng.integers(0, 10, 2000)
    knn = timed(lambda: run_analysis("knn", {"layer_0": x2, "labels": y2}))
    from dpviz.analyses.embedding import umap_maps, warm_umap

    t = time.perf_counter()
    warm_umap()
    warm = time.perf_counter() - t
    x3 = np.vstack([rng.normal(size=(200, 64)) + 4 * rng.normal(size=64) for _ in range(10)])  # 2000 points
    um = timed(lambda: umap_maps([x3]), reps=2)
    s = dpviz.run(dpviz.RunConfig(checkpoint_every=0), cache_dir=CACHE)  # the default run
    store = dpviz.Store(CACHE)
    f = store.load_features(s["run_id"], s["total_steps"])
    per = {name: timed(lambda n=name: run_analysis(n, f)) for name in REGISTRY}
    total = sum(per.values())
    print("| measurement | value | goal |\n|---|---|---|")
    print(f"| fuzziness, 12 layers × 1000 points × 192 dims | {fast:.3f} s (pinv loop: {naive:.2f} s, "
          f"{naive / fast:.0f}× slower) | ≤ 0.5 s |")
    print(f"| kNN (k = 20, cosine, 2-fold) on 2000 points × 64 dims | {knn:.3f} s | ≤ 0.2 s |")
    print(f"| UMAP map of 2000 points × 64 dims after warm-up (warm-up in this process: {warm:.0f} s) | "
          f"{um:.2f} s | ≤ 5 s |")
    print(f"| all analyses of one checkpoint of the default run ({', '.join(f'{k} {v * 1e3:.0f} ms' for k, v in per.items())})"
          f" ÷ its training time ({s['wall_time_s']:.1f} s) | {total / s['wall_time_s']:.1%} | ≤ 10 % |")


if __name__ == "__main__":
    main()
