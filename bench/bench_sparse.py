"""Masked (row-grouped) and DP-LoRA DP steps ÷ the dense DP-FFT step, on the built-in backbones.

Every step: forward + book-keeping backward + clipping + noise + SGD update, B = 256 of the
default digits task, timed in alternation with the dense step. The masked step trains the head,
biases, norms and a fraction s of every Conv/Linear layer's rows through `sparse.RowDelta`; the
LoRA step trains the head and rank-r adapters on every Conv/Linear layer (`dpviz.models.lora`).
Usage: python bench/bench_sparse.py [--sparsity 0.2 0.05] [--lora-ranks 1 4 8]
"""

from __future__ import annotations

import argparse
import copy

import torch

from common import batch, interleaved, prepared
from dpviz.training import prepare
from dpviz.models import lora
from dpviz.models import sparse
from dpviz.privacy import dpsgd
from dpviz.strategies.sparse import trains


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
    ap.add_argument("--lora-ranks", type=int, nargs="*", default=[1, 4, 8])
    a = ap.parse_args()
    torch.set_num_threads(2)
    print("| backbone | method | trainable fraction | its DP step (ms) | dense DP-FFT step (ms) | ratio |")
    print("|---|---|---|---|---|---|")
    for backbone in ("cnn", "vit"):
        prep = prepared(backbone=backbone, strategy="fft")
        x, y = batch(prep, 256)
        dense = prep.model
        prepare.set_trainable(dense, "all")
        for s in a.sparsity:
            masked = copy.deepcopy(dense)
            sparse.apply_mask(masked.backbone, sparse.random_mask(masked.backbone, s, seed=0))
            sparse.set_masked_trainable(masked, **trains("random"))
            row(backbone, f"sparse rows s = {s:g}", sparse.trainable_fraction(masked), dense, masked, x, y)
        for r in a.lora_ranks:
            adapted = copy.deepcopy(dense)
            lora.apply_lora(adapted.backbone, r)
            lora.set_lora_trainable(adapted)
            row(backbone, f"LoRA r = {r}", lora.trainable_fraction(adapted), dense, adapted, x, y)


def row(backbone, method, fraction, dense, other, x, y):
    """Time ``other``'s DP step against the dense one, in alternation, and print a table row."""
    d_step, d_st = dp_step(dense, x, y)
    o_step, o_st = dp_step(other, x, y)
    t = interleaved({"dense": d_step, "other": o_step})
    d_st.close()
    o_st.close()
    print(f"| {backbone} | {method} | {fraction:.3f} | {t['other'] * 1e3:.1f} | {t['dense'] * 1e3:.1f} | "
          f"{t['other'] / t['dense']:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
