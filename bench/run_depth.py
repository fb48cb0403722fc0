"""The separation law on three depths of one family: EfficientNet-Lite0, Lite1 and Lite2 on Fashion-MNIST.

For each backbone: its per-layer fuzziness D_l on the real-vision evaluation subset, pretrained (ImageNet
weights, before any private step) and, with ``--fft``, after DP-FFT at ε = 8 on the scorecard's size
``--scale`` (``--seeds`` seeds; the rate: Lite0's entry of the shipped grid at that size and ε, for every
backbone, since the grid is searched on Lite0); then the fit of log D_l against depth from layer 1 on
(R², ρ) and over all layers. Writes bench/results/depth_real-vision.json (``_<scale>`` appended above small).

Usage: python bench/run_depth.py [--fft] [--scale small] [--seeds 3] [--workers 1] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402

from dpviz import autotune, reproduce, tasks  # noqa: E402
from dpviz.analyses.separability import fuzziness, separability  # noqa: E402
from results import record  # noqa: E402

BACKBONES = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2")


def pretrained(backbone: str, cache_dir) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """D_l of ``backbone``'s ImageNet features on the real-vision evaluation subset (nothing trains): at the
    library's layers (the input, then each of the 7 stages, the last with the head conv) and after every
    MBConv block (the input, then 16, 21 or 21 blocks, then the head conv), each pooled over space."""
    import torch

    from dpviz.training import prepare

    cfg = reproduce.scorecard_config("real-vision", backbone=backbone, strategy="fft", epsilon=8.0).fixed_rates()
    prep = prepare.prepare(cfg, cache_dir=cache_dir, with_curve=False)
    x, y = prep.bundle.eval_subset(cfg.eval_subset)
    stages = separability(prepare.layer_features(prep.model, x, y, "cpu")).fuzziness
    net = prep.model.backbone.eval()
    with torch.no_grad():
        feats, h = [x.flatten(1)], net.stem(net._input(x))
        for i, stage in enumerate(net.blocks):
            head = []
            if i == len(net.blocks) - 1:  # Sequential(the last stage's blocks, head conv, its norm)
                stage, *head = stage
            for block in stage:
                h = block(h)
                feats.append(h.mean(dim=(2, 3)))  # (N, C) after each MBConv block
        for m in head:
            h = m(h)
        feats.append(h.mean(dim=(2, 3)))  # after the head conv (N, 1280)
    yy = y.numpy()
    blocks = tuple(fuzziness(f.float().numpy(), yy) for f in feats)
    return stages, blocks


def fft_configs(backbone: str, scale: str, seeds: int) -> list:
    """The DP-FFT runs at ε = 8 at ``scale`` of ``backbone``, one per seed, on Lite0's shipped rate."""
    lite0 = reproduce.at_scale(reproduce.scorecard_config("real-vision", strategy="fft", epsilon=8.0),
                               "real-vision", scale)
    values, _ = autotune.lookup(lite0, autotune.used_fields(lite0))
    return [lite0.replace(backbone=backbone, seed=seed, keep_weights="none", checkpoint_every=-1, **values)
            for seed in range(seeds)]


def after_fft(configs: list, cache_dir) -> list[tuple[float, ...]]:
    """D_l at the end of each run of ``configs`` (trained here, or answered from the store)."""
    import dpviz
    from dpviz.analyses.service import analyze
    from dpviz.store import Store

    out = []
    for cfg in configs:
        s = dpviz.run(cfg, cache_dir=cache_dir)
        out.append(tuple(analyze(Store(cache_dir), s["run_id"], "separability")["fuzziness"]))
    return out


def fit(fz) -> tuple[float, float, float]:
    """(R² from layer 1, ρ from layer 1, R² over all layers) of log D_l vs depth."""
    return reproduce.fit_r2(fz, 1), reproduce.fit_rho(fz, 1), reproduce.fit_r2(fz)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fft", action="store_true")
    ap.add_argument("--scale", default="small", choices=list(reproduce.SCALES))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--cache-dir", default="cache")
    ap.add_argument("--workers", type=int, default=1, help="processes that train the DP-FFT runs first")
    a = ap.parse_args()
    t0 = time.perf_counter()
    runs = {b: fft_configs(b, a.scale, a.seeds) for b in BACKBONES} if a.fft else {}
    if a.workers > 1 and runs:  # fill the store in the pool; the loop below then reads each run from it
        from dpviz.reproduce.scorecard import train

        train([cfg for cfgs in runs.values() for cfg in cfgs], workers=a.workers, cache_dir=a.cache_dir)
    rows = []
    for b in BACKBONES:
        fz, by_block = pretrained(b, a.cache_dir)
        for unit, f in (("stages", fz), ("blocks", by_block)):
            r2, rho, r2_all = fit(f)
            rows.append([b, f"{len(f) - 1} {unit}", "pretrained", f"{r2:.3f}", f"{rho:.3f}", f"{r2_all:.3f}"])
            print(rows[-1], flush=True)
        if a.fft:
            fits = np.array([fit(f) for f in after_fft(runs[b], a.cache_dir)])
            m, s = fits.mean(0), fits.std(0)
            rows.append([b, f"{len(fz) - 1} stages", f"DP-FFT ε = 8, {a.scale}, {a.seeds} seeds",
                         *(f"{m[i]:.3f} ± {s[i]:.3f}" for i in range(3))])
            print(rows[-1], flush=True)
    size = reproduce.SCALES[a.scale]["real-vision"]
    name = "depth_real-vision" + (f"_{a.scale}" if a.scale != "small" else "")
    record(name, title="The separation law on EfficientNet-Lite0, Lite1 and Lite2 (Fashion-MNIST)"
                       + (f", DP-FFT at size {a.scale}" if a.scale != "small" else ""),
           columns=["backbone", "layers read (after the input)", "features", "R² from layer 1", "ρ from layer 1",
                    "R² all layers"], rows=rows,
           notes=f"D_l on the real-vision evaluation subset; DP-FFT rows: {size['train_size']:,} examples, "
                 f"≈ {reproduce.steps_of(size)} DP steps, Lite0's shipped rate for every backbone; "
                 f"{(time.perf_counter() - t0) / 60:.1f} min with {a.workers} worker(s) (runs in the store answered "
                 f"from it).")


if __name__ == "__main__":
    main()
