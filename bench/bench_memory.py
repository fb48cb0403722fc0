"""Peak memory of a DP-FFT step ÷ a non-private step at the same batch.

Each measurement runs in its own process: on CPU the peak resident set size
growth over 5 training steps (after set-up), on CUDA torch's peak allocated
bytes. Usage: python bench/bench_memory.py [--batch 256]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys
sys.path.insert(0, {bench!r})
from common import prepared, batch
import torch
from dpviz.training import prepare
from dpviz.privacy import dpsgd
prep = prepared(backbone={backbone!r}, strategy="fft")
prepare.set_trainable(prep.model, "all")
dev = "cuda" if torch.cuda.is_available() else "cpu"
model = prep.model.to(dev)
x, y = batch(prep, {B})
x, y = x.to(dev), y.to(dev)
step = dpsgd.Stepper(model, "auto") if {dp} else None
g = torch.Generator(device=dev).manual_seed(0)
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
def run():
    opt.zero_grad(set_to_none=True)
    if step: dpsgd.private_step(step, x, y, clip_norm=1.0, noise_multiplier=1.0, expected_batch={B}, generator=g)
    else: dpsgd.plain_step(model, x, y)
    opt.step()
if dev == "cuda":
    torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
    for _ in range(5): run()
    peak = torch.cuda.max_memory_allocated() - base
else:
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for _ in range(5): run()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
print(json.dumps({{"peak": peak, "device": dev}}))
"""


def measure(backbone: str, B: int, dp: bool) -> dict:
    code = CHILD.format(bench=str(Path(__file__).parent), backbone=backbone, B=B, dp=dp)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    from results import record

    columns = ["backbone", "device", "DP-FFT step peak (MiB)", "non-private step peak (MiB)", "ratio"]
    print("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    rows = []
    for bb in ("cnn", "vit"):
        dp, plain = measure(bb, args.batch, True), measure(bb, args.batch, False)
        mib = lambda v: v / 2**20  # noqa: E731
        rows.append([bb, dp["device"], f"{mib(dp['peak']):.1f}", f"{mib(plain['peak']):.1f}",
                     f"{dp['peak'] / max(plain['peak'], 1):.2f}×"])
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
    record("memory", title=f"Peak memory, DP-FFT ÷ non-private, B = {args.batch}", columns=columns, rows=rows,
           notes="Peak resident-set growth over 5 steps, each path in its own process; on a GPU, "
                 "torch.cuda.max_memory_allocated.")


if __name__ == "__main__":
    main()
