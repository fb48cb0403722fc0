"""What checking shared tensors against their hash costs: reading a MiniLM run's final model (its 90 MB of
backbone weights are shared tensors) with every file hashed, as a process's first read does, against a
read of the same unchanged files that this process has checked before (no hash), side by side.

    python bench/bench_tensor_check.py [--repeats 5]

Trains (once, in a throwaway store) the real-text task's DP-LP run with fixed rates.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    import dpviz
    from dpviz import tasks
    from dpviz.store import tensors
    from dpviz.store import Store

    with tempfile.TemporaryDirectory() as d:
        cfg = tasks.config("real-text", strategy="lp", epochs=1, lr_lp=0.5)
        rid = dpviz.run(cfg, cache_dir=d)["run_id"]
        store = Store(d)
        mb = sum(p.stat().st_size for p in (Path(d) / "tensors").glob("*/*.pt")) / 1e6
        checked, known = [], []
        for _ in range(a.repeats):
            tensors._INTACT.clear()  # as a fresh process: every file is hashed
            t0 = time.perf_counter()
            store.load_model(rid)
            checked.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            store.load_model(rid)  # the same files, unchanged: read, not hashed again
            known.append(time.perf_counter() - t0)
    c, k = statistics.median(checked), statistics.median(known)
    print(f"# MiniLM DP-LP final model, {mb:.0f} MB of shared tensors; medians of {a.repeats}")
    print(f"{'read, every tensor hashed':<36} {c:8.3f} s")
    print(f"{'read, checked before in this process':<36} {k:8.3f} s")
    print(f"{'ratio':<36} {c / k:8.2f}×")


if __name__ == "__main__":
    main()
