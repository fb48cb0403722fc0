"""Tune on the public proxy vs on the private data, then score both choices on the private data.

Two TPE searches of the same size over (lr_ft, clip_norm) for DP-FFT at ε = 1 on the default
backbone: one whose trials train on the public proxy "glyphs", one on the private digits. Each
search's best configuration is then run on digits with three fresh seeds, next to the default
hyperparameters. Prints a markdown table; writes the searches' figures to docs/figures/.

Usage: python bench/run_tuning.py [--trials 12] [--workers 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dpviz  # noqa: E402
from dpviz import figures  # noqa: E402
from dpviz.figures import export
from dpviz import sweeps
from dpviz.config import RunConfig  # noqa: E402

OUT = ROOT / "docs" / "figures"
SPACE = {"lr_ft": [0.001, 0.3], "clip_norm": [0.1, 10.0]}


def search(base, proxy, trials, workers):
    study = sweeps.create_search(base, SPACE, trials=trials, proxy=proxy)
    for p in sweeps.start_workers(study, workers=workers):
        p.wait()
    return study


def score(cfg, seeds=(1, 2, 3)):
    jm = dpviz.JobManager(max_workers=2)
    jobs = [jm.submit(cfg.replace(seed=s)) for s in seeds]
    accs = [j.wait()["test_accuracy"] for j in jobs]
    jm.shutdown(cancel=False)
    return statistics.mean(accs), statistics.stdev(accs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epsilon", type=float, default=1.0)
    a = ap.parse_args()
    base = RunConfig(strategy="fft", epsilon=a.epsilon)
    print(f"| tuned on | best lr_ft | best C | best trial acc (on its data) | digits acc, 3 new seeds |\n|---|---|---|---|---|")
    m, s = score(base)
    print(f"| (default hyperparameters) | {base.lr_ft:g} | {base.clip_norm:g} | – | {m:.3f} ± {s:.3f} |")
    for proxy in ("glyphs", None):
        study = search(base, proxy, a.trials, a.workers)
        best = sweeps.best_config(study)
        m, s = score(best)
        where = f"public proxy {proxy}" if proxy else "private digits (extra privacy cost)"
        print(f"| {where} | {best.lr_ft:.3g} | {best.clip_norm:.3g} | {study.best_value:.3f} | {m:.3f} ± {s:.3f} |",
              flush=True)
        OUT.mkdir(parents=True, exist_ok=True)
        for kind in ("history", "parallel"):
            fig = figures.tuning.tuning_figure(study, kind)
            (OUT / f"tuning_{proxy or 'private'}_{kind}.png").write_bytes(
                export.figure_bytes(fig, "png", caption=figures.tuning.subtitle(study), width=900, height=480))


if __name__ == "__main__":
    main()
