"""Curvature cost: one Hessian-vector product ÷ one gradient, probes for a 5 % standard error,
and the curvature analysis of one checkpoint ÷ the default run's training time.

Usage: python bench/bench_curvature.py
"""

from __future__ import annotations

import tempfile
import time

import torch
import torch.nn.functional as F

from common import CACHE, interleaved, prepared
import dpviz
from dpviz.privacy import curvature
from dpviz.analyses.service import analyze, model_checkpoint
from dpviz.config import RunConfig
from dpviz.store import Store


def hvp_vs_grad(backbone: str) -> None:
    prep = prepared(strategy="fft", backbone=backbone)
    m = prep.model.eval()
    x, y = prep.bundle.x_train[:256], prep.bundle.y_train[:256]
    params = list(m.parameters())
    lc = curvature.LossCurvature(m, x, y, params)
    v = [torch.randn_like(p) for p in params]

    def grad():
        torch.autograd.grad(F.cross_entropy(m(x), y), params)

    def hvp_fresh():  # graph built for one product only
        curvature.LossCurvature(m, x, y, params).hvp(v)

    t = interleaved({"grad": grad, "hvp": lambda: lc.hvp(v), "fresh": hvp_fresh}, rounds=7, reps=3)
    print(f"| {backbone} | {t['grad'] * 1e3:.1f} ms | {t['hvp'] * 1e3:.1f} ms | {t['hvp'] / t['grad']:.2f}× | "
          f"{t['fresh'] / t['grad']:.2f}× |")


def probes_for_5_percent(store: Store, run_id: str, step: int) -> None:
    ck = model_checkpoint(store, run_id, step, 256)
    from dpviz.analyses.hessian import trainable_params

    params = trainable_params(ck.model, "all")
    lc = curvature.LossCurvature(ck.model, ck.x, ck.y, params)
    est, _ = curvature.hutchinson(lc, {"all": list(range(len(params)))}, rtol=0.05, max_probes=3000, min_probes=10,
                                  generator=torch.Generator().manual_seed(0))
    print(f"| step {step} | {est.value:.2f} ± {est.stderr:.2f} | {est.samples} |"
          + (" not reached (cap)" if est.stderr > 0.05 * abs(est.value) else "") )


def main() -> None:
    torch.set_num_threads(2)
    print("| backbone | gradient | Hv (graph reused) | Hv ÷ gradient | Hv with its own graph ÷ gradient |")
    print("|---|---|---|---|---|")
    for bb in ("cnn", "vit"):
        hvp_vs_grad(bb)
    with tempfile.TemporaryDirectory() as d:
        (CACHE / "backbones").mkdir(parents=True, exist_ok=True)
        import os
        os.symlink((CACHE / "backbones").resolve(), f"{d}/backbones")
        store = Store(d)
        cfg = RunConfig()  # the default run: CNN, LP-FFT, ε = 1, 20 epochs
        s = dpviz.run(cfg, store=store)
        steps = store.feature_steps(s["run_id"])
        print("\n| default run checkpoint | tr(H) ± s.e. | probes for s.e. ≤ 5 % |\n|---|---|---|")
        for step in steps:
            probes_for_5_percent(store, s["run_id"], step)
        t = time.perf_counter()
        for step in steps:
            analyze(store, s["run_id"], "hessian", step=step)
        per = (time.perf_counter() - t) / len(steps)
        print(f"\ncurvature analysis per checkpoint (≤ 100 probes + 16 per-sample terms): {per:.2f} s; "
              f"the default run trains in {s['wall_time_s']:.2f} s: {per / s['wall_time_s']:.2f}× per checkpoint")


if __name__ == "__main__":
    main()
