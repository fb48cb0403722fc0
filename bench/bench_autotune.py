"""How fast "auto" answers: the shipped grid vs reopening a finished proxy search vs running one.

Prints the median time to resolve a config from the shipped grid (goal < 50 ms), the time to answer
an off-grid config from its finished search (a second resolution), and the time of that search itself.
Usage: python bench/bench_autotune.py
"""

from __future__ import annotations

import statistics
import tempfile
import time

from common import CACHE  # noqa: F401  (sys.path)
from dpviz import autotune
from dpviz.config import RunConfig


def timed(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    autotune.shipped()  # the file is read once per process
    queries = [RunConfig.from_dict(dict(strategy=s, epsilon=e, lp_fraction=p), reset_unread=True)
               for s in ("lp", "fft", "lp-fft") for e in (0.7, 1.0, 3.0, 8.0) for p in (0.25, 0.3)]
    queries += [RunConfig(strategy=s, epsilon="inf") for s in ("lp", "fft")]
    assert all(autotune.resolve(q)[1].source == "shipped" for q in queries)
    shipped = timed(lambda: [autotune.resolve(q) for q in queries], 5) / len(queries)
    with tempfile.TemporaryDirectory() as d:
        import os

        os.symlink(CACHE / "backbones", os.path.join(d, "backbones"))
        off = RunConfig(strategy="fft", epsilon=2.0, epochs=3)  # not on the grid: searched on glyphs
        t0 = time.perf_counter()
        autotune.resolve(off, cache_dir=d)
        search = time.perf_counter() - t0
        again = timed(lambda: autotune.resolve(off, cache_dir=d), 5)
    print("| measurement | value | goal |\n|---|---|---|")
    print(f"| resolve from the shipped grid (median over {len(queries)} configs) | {shipped * 1e3:.2f} ms | < 50 ms |")
    print(f"| off-grid config (FFT, 3 epochs): the proxy search, {autotune.trials_for(['lr_ft'])} runs on glyphs "
          f"| {search:.1f} s | — |")
    print(f"| the same config again (finished search reopened) | {again * 1e3:.0f} ms "
          f"({search / again:.0f}× faster) | — |")


if __name__ == "__main__":
    main()
