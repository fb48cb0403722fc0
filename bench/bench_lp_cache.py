"""DP-LP per epoch: head on cached features vs forwarding the frozen backbone every step.

Both do the same DP-SGD head update on the same Poisson batches of the default
task; the uncached path recomputes the batch's backbone features each step
(what a naive implementation does). The one-off cost of computing the cached
features is reported separately and amortised over a default 20-epoch run.
Usage: python bench/bench_lp_cache.py [--backbone cnn]
"""

from __future__ import annotations

import argparse
import time

import torch

from common import interleaved, prepared
from results import record
from dpviz.training import prepare
from dpviz.privacy import dpsgd


def epoch_fn(prep, cached: bool, feats: torch.Tensor):
    model, b = prep.model, prep.bundle
    prepare.set_trainable(model, "head")
    stepper = dpsgd.Stepper(model.head, "auto")
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1, momentum=0.9)
    n, q = b.n, prep.sample_rate
    steps = round(1 / q)
    g, gs = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)

    def epoch():
        for _ in range(steps):
            idx = (torch.rand(n, generator=gs) < q).nonzero().squeeze(1)
            if cached:
                x = feats[idx]
            else:
                with torch.no_grad():
                    x = model.backbone.forward_features(b.x_train[idx])
            opt.zero_grad(set_to_none=True)
            dpsgd.private_step(stepper, x, b.y_train[idx], clip_norm=1.0, noise_multiplier=1.0,
                               expected_batch=q * n, generator=g)
            opt.step()
    return epoch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backbone", nargs="+", default=["cnn", "vit"])
    args = ap.parse_args()
    columns = ["backbone", "cached epoch (ms)", "uncached epoch (ms)", "speed-up per epoch", "one-off features (ms)",
               "speed-up over 20 epochs incl. one-off"]
    print("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    rows = []
    for bb in args.backbone:
        prep = prepared(backbone=bb, strategy="lp")
        t = time.perf_counter()
        feats = prepare.backbone_features(prep.model, prep.bundle.x_train, "cpu")
        once = time.perf_counter() - t
        r = interleaved({"cached": epoch_fn(prep, True, feats), "uncached": epoch_fn(prep, False, feats)},
                        rounds=5, reps=2)
        total = (20 * r["uncached"]) / (20 * r["cached"] + once)
        rows.append([bb, f"{r['cached'] * 1e3:.1f}", f"{r['uncached'] * 1e3:.1f}", f"{r['uncached'] / r['cached']:.0f}×",
                     f"{once * 1e3:.0f}", f"{total:.1f}×"])
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
    record("lp_cache", title="DP-LP on cached features vs forwarding the frozen backbone", columns=columns, rows=rows,
           notes="An epoch of DP-LP steps, each path timed in alternation (5 rounds × 2 repetitions, medians).")


if __name__ == "__main__":
    main()
