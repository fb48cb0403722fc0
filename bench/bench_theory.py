"""The theory lab: what a slider change costs, and the gap between the diffusion and dpviz's DP-SGD.

1. Slider redraws: the Theory page under Streamlit's AppTest (the whole page script: simulation, figures,
   readings), median seconds per change of the ε slider and of the p slider (the utility curve is cached
   per setting, as on the page), beside the simulation alone (`theory.curves`).
2. The overlay: dpviz's DP-SGD (Poisson sampling, book-keeping clipping, PRV-calibrated σ) against the
   diffusion with matched noise, mean |loss gap| over time, for LP and FFT at two ε.
Usage: python bench/bench_theory.py
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpviz import theory  # noqa: E402

EPS = (0.5, 2.0, 8.0, 1.0)
SHARES = (0.1, 0.5, 0.9, 0.3)


def page_redraws() -> dict:
    from streamlit.testing.v1 import AppTest

    os.environ.update(DPVIZ_CACHE_DIR=tempfile.mkdtemp(), DPVIZ_UMAP_WARMUP="0")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.switch_page("pages/theory.py").run()
    out = {}
    for key, values, kind in (("th_eps", EPS, "select_slider"), ("th_p", SHARES, "slider")):
        times = []
        for v in values:
            t = time.perf_counter()
            getattr(at, kind)(key=key).set_value(v).run()
            times.append(time.perf_counter() - t)
            assert not at.exception, [e.value for e in at.exception]
        out[key] = statistics.median(times)
    return out


def simulation_alone() -> float:
    times = []
    for e in EPS:
        t = time.perf_counter()
        theory.curves(theory.Setting(epsilon=e))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    r = page_redraws()
    print("| slider | page redraw (median s) | simulation alone (median s) |\n|---|---|---|")
    alone = simulation_alone()
    print(f"| ε | {r['th_eps']:.2f} | {alone:.2f} |\n| p | {r['th_p']:.2f} | {alone:.2f} |")
    print("\n| strategy | ε | σ (PRV) | diffusion noise s | mean gap | gap ÷ initial loss | ε spent | wall |")
    print("|---|---|---|---|---|---|---|---|")
    for strategy in ("lp", "fft"):
        for eps in (1.0, 4.0):
            t = time.perf_counter()
            o = theory.overlay(theory.Setting(epsilon=eps), strategy=strategy)
            print(f"| {strategy} | {eps:g} | {o['noise_multiplier']:.2f} | {o['noise']:.3f} | {o['gap']:.4f} | "
                  f"{o['gap_relative']:.1%} | {o['epsilon_spent']:.3f} | {time.perf_counter() - t:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
