"""The DP step on a GPU: dpviz against a plain step and Opacus (hooks, ghost clipping),
for `bench_dp_step.py --device cuda`.

Each model's methods run on the same batch; peak memory is measured one method at a time (its own
model copy, gradients, optimizer state and activations: the peak above what was allocated before),
time with all four built and timed in alternation, synchronising the device before each clock read.
Weights are random (saved to a temporary file for the torchvision/timm builders): the step's cost
does not depend on them.
"""

from __future__ import annotations

import copy
import gc
import os
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from common import interleaved
from dpviz.models import Classifier, build_backbone
from dpviz.privacy import dpsgd
from dpviz.privacy import precision as prec

MODELS = {  # name: (label, channels, size, batch)
    "cnn": ("built-in CNN, 16×16", 1, 16, 256),
    "resnet18": ("torchvision ResNet-18, 32×32", 3, 32, 64),
    "resnet50": ("torchvision ResNet-50, 32×32", 3, 32, 64),
    "vit_small": ("timm ViT-S/16, 224×224", 3, 224, 64),
}
METHODS = ("plain", "dpviz", "hooks", "ghost")
NUM_CLASSES = 10
PRECISION = os.environ.get("DPVIZ_BENCH_PRECISION", "fp32")  # every method's arithmetic (`--precision`;
# an environment variable so that the memory probes' child processes see it too)


def random_weights(name: str, folder: Path) -> str | None:
    """A state_dict of the original architecture with random weights (None for built-ins)."""
    if name.startswith("resnet"):
        import torchvision
        state = getattr(torchvision.models, name)(weights=None).state_dict()
    elif name.startswith("vit"):
        import timm
        from dpviz.models.external import TIMM_ARCHS
        state = timm.create_model(TIMM_ARCHS[name], pretrained=False, num_classes=0).state_dict()
    else:
        return None
    path = folder / f"{name}.pt"
    torch.save(state, path)
    return str(path)


def build_model(name: str, device: str) -> torch.nn.Module:
    _, channels, size, _ = MODELS[name]
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        backbone = build_backbone(name, channels=channels, size=size, weights=random_weights(name, Path(d)))
    return Classifier(backbone, NUM_CLASSES).to(device)


def plain_fn(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        dpsgd.plain_step(model, x, y, PRECISION)
        opt.step()
    return step


def dpviz_fn(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    stepper = dpsgd.Stepper(model, "auto", PRECISION)
    gen = torch.Generator(device=x.device).manual_seed(0)

    def step():
        opt.zero_grad(set_to_none=True)
        dpsgd.private_step(stepper, x, y, clip_norm=1.0, noise_multiplier=1.0, expected_batch=len(y),
                           generator=gen)
        opt.step()
    return step


def dpviz_graph_fn(model, x, y):
    """dpviz's DP step replayed from a CUDA graph (`dpviz.training.capture`: eager where it cannot capture, as on a
    CPU); ``step.captured`` holds its capture time, memory and any reason it stepped eagerly."""
    from dpviz.training import capture

    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    gen = torch.Generator(device=x.device).manual_seed(0)
    mask = torch.ones(len(y), dtype=torch.bool, device=x.device)  # one fixed size, every row real
    cap = capture.CapturedSteps(dpsgd.Stepper(model, "auto", PRECISION), opt, gen, clip_norm=1.0,
                                noise_multiplier=1.0, expected_batch=len(y), graphs=x.is_cuda)
    if not x.is_cuda:
        cap.off = "a CPU has no CUDA graphs: the same step, eager"

    def step():
        cap.step(x, y, mask)
        if not cap.optimizes:
            opt.step()
    step.captured = cap
    return step


def plain_graph_fn(model, x, y):
    """The plain step (forward, backward, SGD's update, its statistics) replayed from one CUDA graph, so that a
    captured DP step is compared with a captured plain one; eager on a CPU. ``step.captured``: capture seconds."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def body():
        with prec.autocast(PRECISION, x.device.type):
            out = model(x)
            loss = F.cross_entropy(out, y, reduction="sum")
        (loss / len(y)).backward()
        opt.step()
        return torch.stack([loss.detach().double(), (out.argmax(1) == y).sum().double()])

    if not x.is_cuda:
        def step():
            opt.zero_grad(set_to_none=True)
            body().tolist()
        step.captured = None
        return step
    import time
    t0 = time.perf_counter()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sums = body()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0

    def step():
        graph.replay()
        sums.tolist()  # the host reads the statistics, as the eager steps do
    step.captured = seconds
    return step


def opacus_fn(model, x, y, mode: str):
    """Opacus 1.6's own training loop: ``make_private`` with grad_sample_mode "hooks" or "ghost" (under
    ``torch.autocast`` in bf16/fp16, its own mixed-precision mode; fp16 without a loss scale)."""
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    from dpviz.models.vit import register_with_opacus
    register_with_opacus()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loader = DataLoader(TensorDataset(x, y), batch_size=len(y))
    made = PrivacyEngine().make_private(module=model, optimizer=opt, data_loader=loader, noise_multiplier=1.0,
                                        max_grad_norm=1.0, poisson_sampling=False, grad_sample_mode=mode,
                                        criterion=torch.nn.CrossEntropyLoss())
    module, dp_opt = made[0], made[1]
    criterion = made[2] if mode == "ghost" else torch.nn.CrossEntropyLoss()

    def step():
        dp_opt.zero_grad(set_to_none=True)
        with prec.autocast(PRECISION, x.device.type):
            loss = criterion(module(x), y)
        loss.backward()
        dp_opt.step()
        loss.item()  # the loss a training loop reports, as the plain and dpviz steps do
    return step


def make_step(method: str, base: torch.nn.Module, x, y):
    model = copy.deepcopy(base)
    if method == "plain":
        return plain_fn(model, x, y)
    if method == "dpviz":
        return dpviz_fn(model, x, y)
    if method == "plain-graph":
        return plain_graph_fn(model, x, y)
    if method == "dpviz-graph":
        return dpviz_graph_fn(model, x, y)
    return opacus_fn(model, x, y, method)


def peak_memory(method: str, base, x, y, steps: int = 3) -> int:
    """Peak bytes allocated over a few steps of this method's own model copy (its parameters, gradients,
    optimizer state and activations), above what was there before (the shared template and the batch)."""
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    step = make_step(method, base, x, y)
    step()  # gradients and optimizer state exist from here on, as in training
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del step
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def measure_model(name: str, methods=METHODS, rounds: int = 15, reps: int = 3, warmup: int = 5) -> dict:
    """{method: (seconds per step, peak bytes)} for model ``name`` on the GPU."""
    B = MODELS[name][3]
    base = build_model(name, "cpu")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, MODELS[name][1], MODELS[name][2], MODELS[name][2], generator=g).cuda()
    y = torch.randint(0, NUM_CLASSES, (B,), generator=g).cuda()
    base = base.cuda()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus' secure-RNG and full-backward-hook notices
        for m in methods:  # library workspaces (cuBLAS, cuDNN) exist before any method is measured
            make_step(m, base, x, y)()
        mem = {m: peak_memory(m, base, x, y) for m in methods}
        steps = {m: make_step(m, base, x, y) for m in methods}
        for _ in range(warmup):
            for f in steps.values():
                f()
        t = interleaved(steps, rounds=rounds, reps=reps, sync=torch.cuda.synchronize)
    return {m: (t[m], mem[m]) for m in methods}


COLUMNS = ["model", "B", "plain step", "dpviz", "Opacus hooks", "Opacus ghost clipping"]


def table(results: dict) -> list[list[str]]:
    """One row of cells per model (`COLUMNS`): plain ms, then each DP method's (time ratio; memory ratio) to
    the plain step."""
    rows = []
    for name, r in results.items():
        t0, m0 = r["plain"]
        cells = [f"{r[m][0] / t0:.2f}×; {r[m][1] / m0:.2f}×" if m in r else "–" for m in METHODS[1:]]
        rows.append([MODELS[name][0], str(MODELS[name][3]), f"{t0 * 1e3:.1f} ms", *cells])
    return rows


def markdown(rows: list[list[str]], header: bool = True, columns: list[str] = COLUMNS) -> str:
    """``rows`` as a Markdown table, under ``columns`` when ``header``."""
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"] if header else []
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def profile_dpviz(name: str, path: Path, steps: int = 5) -> None:
    """torch.profiler tables of ``steps`` dpviz DP steps (by GPU time, by host time) into ``path``."""
    from torch.profiler import ProfilerActivity, profile
    _, c, s, B = MODELS[name]
    x, y = torch.randn(B, c, s, s, device="cuda"), torch.randint(0, NUM_CLASSES, (B,), device="cuda")
    step = make_step("dpviz", build_model(name, "cuda"), x, y)
    with annotated_bk():
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
    ka = prof.key_averages()
    with open(path, "w") as f:
        for key in ("cuda_time_total", "cpu_time_total"):
            f.write(f"== {name} B={B}: dpviz DP step, {steps} steps, by {key}\n")
            f.write(ka.table(sort_by=key, row_limit=40, max_name_column_width=70) + "\n\n")


class annotated_bk:
    """Label book-keeping's per-layer work (`bk.<Layer>.norm2` / `.accumulate`) in the profile only."""

    def __enter__(self):
        from dpviz.privacy import bk
        self.bk, self.saved = bk.BookKeeper, (bk.BookKeeper._norm2, bk.BookKeeper._accumulate)
        norm2, acc = self.saved

        def _norm2(keeper, m, *args):
            with torch.profiler.record_function(f"bk.{type(m).__name__}.norm2"):
                return norm2(keeper, m, *args)

        def _accumulate(m, state, c):
            with torch.profiler.record_function(f"bk.{type(m).__name__}.accumulate"):
                return acc(m, state, c)
        self.bk._norm2, self.bk._accumulate = _norm2, staticmethod(_accumulate)
        return self

    def __exit__(self, *exc):
        self.bk._norm2, self.bk._accumulate = self.saved[0], staticmethod(self.saved[1])
