"""Masked (row-grouped) DP step ÷ dense DP-FFT step, at sparsity s on the built-in backbones.

Both steps: forward + book-keeping backward + clipping + noise + SGD update, B = 256 of the
default digits task, timed in alternation. The masked step trains the head, biases, norms and a
fraction s of every Conv/Linear layer's rows through `sparse.RowDelta`.
Usage: python bench/bench_sparse.py [--sparsity 0.2 0.05]
"""

from __future__ import annotations

import argparse
import copy

import torch

from common import batch, interleaved, prepared
from dpviz import engine, sparse
from dpviz.privacy import dpsgd


def dp_step(model, x, y):
    stepper = dpsgd.Stepper(model, "auto")
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3, momentum=0.9)
    g = torch.Generator().manual_seed(0)

    def step():
        opt.zero_grad(set_to_none=True)
        dpsgd.private_step(stepper, x, y, clip_norm=1.0, noise_multiplier=1.0, expected_batch=len(y), generator=g)
        opt.step()
    return step, stepper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sparsity", type=float, nargs="+", default=[0.2, 0.05])
    a = ap.parse_args()
    torch.set_num_threads(2)
    print("| backbone | s | trainable fraction | masked DP step (ms) | dense DP-FFT step (ms) | ratio |")
    print("|---|---|---|---|---|---|")
    for backbone in ("cnn", "vit"):
        prep = prepared(backbone=backbone, strategy="fft")
        x, y = batch(prep, 256)
        dense = prep.model
        engine.set_trainable(dense, "all")
        for s in a.sparsity:
            masked = copy.deepcopy(dense)
            sparse.apply_mask(masked.backbone, sparse.random_mask(masked.backbone, s, seed=0))
            sparse.set_masked_trainable(masked, "random")
            d_step, d_st = dp_step(dense, x, y)
            m_step, m_st = dp_step(masked, x, y)
            t = interleaved({"dense": d_step, "masked": m_step})
            d_st.close()
            m_st.close()
            print(f"| {backbone} | {s:g} | {sparse.trainable_fraction(masked):.3f} | {t['masked'] * 1e3:.1f} | "
                  f"{t['dense'] * 1e3:.1f} | {t['masked'] / t['dense']:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
