"""One DP-SGD step over N processes (torch.distributed, gloo on the CPU) against one process at the same
global batch: ms per step, the speed-up, and the share of the distributed step spent in the all-reduce.

Every configuration runs the real step of a run (`dpsgd.private_step`, book-keeping, clipping, noise, an SGD
update) on the default task's backbones, FFT, global batch B: one process with all the machine's threads
against N processes of threads/N each, each rank holding its shard of the same batch, as
`dpviz.training.distributed` shards it. Alternating rounds of ``--steps`` steps; the medians are printed. The
all-reduce share is the time inside ``World.all_reduce`` over the rank's whole step.
Usage: python bench/bench_distributed.py [--backbones cnn vit] [--batch 256] [--procs 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common import batch, prepared
from results import record
from dpviz.training import prepare
from dpviz.privacy import dpsgd


def _setup(backbone: str, B: int):
    prep = prepared(backbone=backbone, strategy="fft")
    prepare.set_trainable(prep.model, "all")
    x, y = batch(prep, B)
    return prep.model, x, y


def _steps(model, x, y, steps: int, world=None):
    """Seconds per step over ``steps`` steps, and the seconds of them spent in the all-reduce."""
    stepper = dpsgd.Stepper(model, "auto")
    opt = torch.optim.SGD(stepper.params, lr=1e-3, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    idx = torch.arange(len(y))
    reduce_s = [0.0]
    reduce = None
    if world is not None:
        idx = world.shard(idx)

        def reduce(ts):
            t0 = time.perf_counter()
            world.all_reduce(ts)
            reduce_s[0] += time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        dpsgd.private_step(stepper, x[idx], y[idx], clip_norm=1.0, noise_multiplier=1.0, expected_batch=len(y),
                           generator=gen, reduce=reduce)
        opt.step()
    stepper.close()
    return (time.perf_counter() - t0) / steps, reduce_s[0] / steps


def _rank(rank, procs, port, backbone, B, steps, rounds, out):
    from dpviz.training import distributed

    torch.set_num_threads(max(1, os.cpu_count() // procs))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=procs)
    world = distributed.current()
    model, x, y = _setup(backbone, B)
    world.broadcast(model)
    _steps(model, x, y, 2, world)  # warm-up
    res = []
    for _ in range(rounds):
        world.barrier()
        res.append(_steps(model, x, y, steps, world))
    if rank == 0:
        torch.save(res, out)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backbones", nargs="+", default=["cnn", "vit"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    threads = os.cpu_count()
    many_t = max(1, threads // args.procs)
    print(f"# CPU, {threads} cores; 1 process × {threads} threads against {args.procs} processes × "
          f"{many_t} thread(s) (gloo); global batch B = {args.batch}, FFT; "
          f"{args.rounds} alternating rounds of {args.steps} steps, medians")
    columns = ["backbone", f"1 process × {threads} threads (ms/step)",
               f"{args.procs} processes × {many_t} thread{'s' * (many_t > 1)} (ms/step)", "speed-up",
               "all-reduce share"]
    print("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    rows = []
    out = "/tmp/dpviz-bench-distributed.pt"
    for backbone in args.backbones:
        one, many, share = [], [], []
        for r in range(args.rounds):  # alternate: one round of each
            torch.set_num_threads(threads)
            model, x, y = _setup(backbone, args.batch)
            _steps(model, x, y, 1)
            one.append(_steps(model, x, y, args.steps)[0])
            mp.spawn(_rank, args=(args.procs, 29540 + r, backbone, args.batch, args.steps, 1, out), nprocs=args.procs)
            (t, red), = torch.load(out)
            many.append(t)
            share.append(red / t)
        a, b = statistics.median(one), statistics.median(many)
        rows.append([backbone, f"{a * 1e3:.1f}", f"{b * 1e3:.1f}", f"{a / b:.2f}×", f"{statistics.median(share):.1%}"])
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
    record(f"distributed_cpu_{args.procs}", columns=columns, rows=rows,
           title=f"One DP step on {args.procs} processes against one, CPU (gloo), FFT, global B = {args.batch}",
           notes=f"{args.rounds} alternating rounds of {args.steps} steps, medians; the all-reduce share is the "
                 f"time in World.all_reduce over the rank's whole step.")


if __name__ == "__main__":
    main()
