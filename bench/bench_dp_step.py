"""DP step time ÷ non-private step time, per strategy and built-in backbone.

Both steps run on the same batch (B = 256 of the default digits task, 16×16),
timed in alternation; a step is forward + backward (+ clipping and noise for
DP) + optimizer update. lp-fft is the step-weighted mix of its LP and FFT
phases at p = 0.3. Usage: python bench/bench_dp_step.py [--batch 256]

On a GPU (``--device cuda``, see `dp_step_cuda`): dpviz's DP step against a plain
step and Opacus (hooks, ghost clipping) on the built-in CNN, torchvision ResNet-18/50
and timm ViT-S/16, time and peak-memory ratios; ``--profile DIR`` also writes
torch.profiler tables of dpviz's step per model. Usage: python bench/bench_dp_step.py
--device cuda [--models cnn resnet18 resnet50 vit_small] [--profile DIR]

Real pretrained backbones (``--backbone minilm efficientnet_lite0``, see `dp_step_real`): the same four
methods on MiniLM over the real-text task's tweets and on EfficientNet-Lite0 over Fashion-MNIST, B = 64,
on the CPU or with ``--device cuda``; ``--profile DIR`` writes torch.profiler tables of the plain and
dpviz steps. Usage: python bench/bench_dp_step.py --backbone minilm [efficientnet_lite0] [--device cuda]

``--precision fp32|tf32|bf16|fp16`` runs every method's forward and backward in that precision (the plain
step too, so a ratio compares like with like); dpviz's per-sample norms and clipping stay FP32.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from pathlib import Path

import torch

from common import batch, interleaved, prepared
from results import record
from dpviz.training import prepare
from dpviz.privacy import dpsgd


def step_fns(prep, trainable: str, x, y, mode: str, precision: str = "fp32", generator=None):
    model = prep.model
    prepare.set_trainable(model, trainable)
    module, inputs = (model.head, prepare.backbone_features(model, x, "cpu")) if trainable == "head" else (model, x)
    twin = copy.deepcopy(module)  # the non-private step runs without any hooks
    opt = torch.optim.SGD([p for p in module.parameters() if p.requires_grad], lr=1e-3, momentum=0.9)
    opt_plain = torch.optim.SGD([p for p in twin.parameters() if p.requires_grad], lr=1e-3, momentum=0.9)
    stepper = dpsgd.Stepper(module, mode, precision if mode != "hooks" else "fp32")
    g = (generator or torch.Generator()).manual_seed(0)  # the noise's generator lives on the parameters' device

    def private():
        opt.zero_grad(set_to_none=True)
        dpsgd.private_step(stepper, inputs, y, clip_norm=1.0, noise_multiplier=1.0,
                           expected_batch=len(y), generator=g)
        opt.step()

    def plain():
        opt_plain.zero_grad(set_to_none=True)
        dpsgd.plain_step(twin, inputs, y, precision)
        opt_plain.step()

    return private, plain, stepper


def measure(backbone: str, B: int, mode: str, precision: str = "fp32") -> dict:
    prep = prepared(backbone=backbone, strategy="fft")
    x, y = batch(prep, B)
    out = {}
    for name, trainable in (("lp", "head"), ("fft", "all"), ("partial", "last:1")):
        private, plain, stepper = step_fns(prep, trainable, x, y, mode, precision)
        t = interleaved({"dp": private, "plain": plain})
        stepper.close()
        out[name] = (t["dp"], t["plain"], stepper.mode)
    lp, fft = out["lp"], out["fft"]
    out["lp-fft"] = (0.3 * lp[0] + 0.7 * fft[0], 0.3 * lp[1] + 0.7 * fft[1], fft[2])
    return out


def cuda_main(args) -> None:
    import dp_step_cuda as gpu

    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; TF32 in convolutions "
          f"{torch.backends.cudnn.allow_tf32}, in matmuls {torch.backends.cuda.matmul.allow_tf32} (PyTorch's "
          "defaults, the same for every method)", flush=True)
    results = {}
    for name in args.models:
        results[name] = gpu.measure_model(name, methods=args.methods)
        print(gpu.markdown(gpu.table({name: results[name]}), header=False), flush=True)
        if args.profile:
            gpu.profile_dpviz(name, Path(args.profile) / f"profile-{name}.txt")
    rows = gpu.table(results)
    print(gpu.markdown(rows))
    record(f"dp_step_cuda_{args.precision}", title=f"DP step ÷ plain step on a GPU, {args.precision}",
           columns=gpu.COLUMNS, rows=rows,
           notes=f"one process per model, one batch, random weights; time: median of alternating rounds, the "
                 f"device synchronised before each clock read; memory: each method's peak above what was "
                 f"allocated before it, as a ratio to the plain step's. TF32 in convolutions "
                 f"{torch.backends.cudnn.allow_tf32}, in matmuls {torch.backends.cuda.matmul.allow_tf32}.")


def real_main(args, names) -> None:
    import os

    import opacus

    import dp_step_real as real

    B = args.batch or 64
    if args.threads:
        torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    clock = time.process_time if args.cpu_time else time.perf_counter
    load = os.getloadavg()[0]
    print(f"# {where}, torch {torch.__version__}, Opacus {opacus.__version__}; {clock.__name__}; load average "
          f"{load:.2f} at the start", flush=True)
    results = {}
    for name in names:
        for inputs in real.REAL[name][2]:
            if args.inputs and inputs not in args.inputs:
                continue
            key = (name, inputs, real.tokens(name, inputs, B))
            results[key] = real.measure(name, inputs, B, args.device, methods=args.methods, rounds=args.rounds,
                                        reps=args.reps, memory=not args.no_memory, clock=clock)
            print(real.markdown(real.table({key: results[key]}), header=False), flush=True)
            if args.profile:
                real.profile(name, inputs, B, Path(args.profile) / f"profile-{name}-{inputs}.txt", args.device)
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    rows = real.table(results)
    print(real.markdown(rows))
    record(f"dp_step_real_{args.device}", title=f"DP step ÷ plain step on real pretrained backbones, B = {B}",
           columns=real.COLUMNS, rows=rows,
           notes=f"{where}, Opacus {opacus.__version__}; time: median of {args.rounds} alternating rounds of "
                 f"{args.reps} steps ({clock.__name__}); memory: growth of each method's peak resident set in a "
                 f"fresh process, ÷ the plain step's; load average {load:.2f} at the start")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, help="batch size (default 256; 64 for the real backbones)")
    ap.add_argument("--backbone", nargs="+", default=["cnn", "vit"],
                    choices=["cnn", "vit", "minilm", "efficientnet_lite0"])
    ap.add_argument("--inputs", nargs="+", help="real backbones: only these inputs (tweets, random, fashion-mnist)")
    ap.add_argument("--rounds", type=int, default=7, help="real backbones: alternating timing rounds")
    ap.add_argument("--reps", type=int, default=2, help="real backbones: steps per method and round")
    ap.add_argument("--threads", type=int, help="real backbones: torch threads (default: torch's)")
    ap.add_argument("--cpu-time", action="store_true", help="real backbones: time by process CPU time (with "
                    "--threads 1: what other processes' load does not inflate)")
    ap.add_argument("--no-memory", action="store_true", help="real backbones: time only")
    ap.add_argument("--modes", nargs="+", default=["auto", "hooks"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--models", nargs="+", default=["cnn", "resnet18", "resnet50", "vit_small"])
    ap.add_argument("--methods", nargs="+", default=["plain", "dpviz", "hooks", "ghost"])
    ap.add_argument("--profile", help="folder for torch.profiler tables of dpviz's GPU step")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16", "fp16"],
                    help="every method's forward and backward (dpviz's norms and clipping stay FP32); the plain "
                         "step runs in the same precision, so each ratio compares like with like")
    args = ap.parse_args()
    os.environ["DPVIZ_BENCH_PRECISION"] = args.precision  # before dp_step_cuda is imported (and its children)
    torch.manual_seed(0)
    real = [b for b in args.backbone if b in ("minilm", "efficientnet_lite0")]
    if real:
        return real_main(args, real)
    args.batch = args.batch or 256
    if args.device == "cuda":
        return cuda_main(args)
    print(f"# CPU, {torch.get_num_threads()} threads, precision {args.precision} (DP and plain steps alike)")
    columns = ["backbone", "strategy", "per-sample path", "DP step (ms)", "non-private step (ms)", "ratio"]
    print("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    rows = []
    for backbone in args.backbone:
        for mode in args.modes:
            for strat, (dp, plain, used) in measure(backbone, args.batch, mode, args.precision).items():
                if mode != "auto" and strat != "fft":
                    continue
                rows.append([backbone, strat, used, f"{dp * 1e3:.1f}", f"{plain * 1e3:.1f}", f"{dp / plain:.2f}×"])
                print("| " + " | ".join(rows[-1]) + " |", flush=True)
    record(f"dp_step_cpu_{args.precision}", columns=columns, rows=rows,
           title=f"DP step ÷ non-private step, CPU, {args.precision}, B = {args.batch}, 16×16 digits",
           notes=f"{torch.get_num_threads()} torch threads; the DP and plain steps timed in alternation, medians.")


if __name__ == "__main__":
    main()
