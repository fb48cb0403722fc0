"""BandMF's cost beside DP-SGD's: the DP step with b bands of correlated noise ÷ the non-private step, and the
noise memory it holds, per built-in backbone (full fine-tuning, B = 256 of the default digits task).

b = 1 is DP-SGD (no memory; the very code path of every DP-SGD run). The steps are timed in alternation with
the plain step, medians; the noise memory is what `dpviz.privacy.bandmf.BandedNoise` holds after b steps
(b − 1 vectors of the trainable parameters), in MB and ÷ the trainable parameters' own bytes.
Usage: python bench/bench_bandmf.py [--bands 1 4 16] [--backbone cnn vit] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse

import torch

from bench_dp_step import step_fns
from common import batch, interleaved, prepared
from results import record
from dpviz.privacy import bandmf, dpsgd


def measure(backbone: str, bands: int, B: int, device: str) -> list:
    prep = prepared(backbone=backbone, strategy="fft", device=device)
    x, y = batch(prep, B)
    x, y = x.to(prep.device), y.to(prep.device)
    prep.model.to(prep.device)  # prepare leaves the model on the CPU; the run's loop moves it as this does
    noise = bandmf.BandedNoise(bands) if bands > 1 else None
    private, plain, stepper = step_fns(prep, "all", x, y, "auto", generator=torch.Generator(device=prep.device))
    step = dpsgd.private_step

    def correlated(*a, **k):  # the same DP step, its noise through the run's BandMF memory
        return step(*a, **k, **({"correlate": noise} if noise is not None else {}))

    dpsgd.private_step = correlated
    try:
        sync = torch.cuda.synchronize if prep.device == "cuda" else (lambda: None)
        t = interleaved({"dp": private, "plain": plain}, sync=sync)
    finally:
        dpsgd.private_step = step
    params = sum(p.numel() * p.element_size() for p in stepper.params)
    held = sum(t.numel() * t.element_size() for v in (noise.memory if noise else []) for t in v)
    stepper.close()
    return [backbone, bands, f"{t['dp'] * 1e3:.1f}", f"{t['plain'] * 1e3:.1f}", f"{t['dp'] / t['plain']:.2f}×",
            f"{held / 2**20:.2f}", f"{held / params:.0f}×"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bands", nargs="+", type=int, default=[1, 4, 16])
    ap.add_argument("--backbone", nargs="+", default=["cnn", "vit"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args()
    torch.manual_seed(0)
    columns = ["backbone", "bands b", "DP step (ms)", "non-private step (ms)", "ratio", "noise memory (MB)",
               "memory ÷ trainable parameters"]
    print("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    rows = []
    for backbone in args.backbone:
        for b in args.bands:
            rows.append(measure(backbone, b, args.batch, args.device))
            print("| " + " | ".join(str(c) for c in rows[-1]) + " |", flush=True)
    record(f"bandmf_{args.device}", columns=columns, rows=rows,
           title=f"BandMF's DP step ÷ non-private step and its noise memory, {args.device}, B = {args.batch}",
           notes=f"{torch.get_num_threads()} torch threads; full fine-tuning; b = 1 is DP-SGD; steps timed in "
                 "alternation with the plain step, medians; the memory is what the noise keeps after b steps.")


if __name__ == "__main__":
    main()
