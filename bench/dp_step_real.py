"""The DP step on dpviz's real pretrained backbones, for `bench_dp_step.py --backbone minilm efficientnet_lite0`.

MiniLM (all-MiniLM-L6-v2, every block trainable, its word-embedding table frozen) on the real-text task's
tweets (B = 64, the task's 48 tokens: the first 64 training tweets, padded as they come; or random ids
with no padding, the worst case) and EfficientNet-Lite0 (BatchNorm folded, all trainable) on the first
64 Fashion-MNIST training images of the real-vision task. The four methods of `dp_step_cuda` (plain step,
dpviz, Opacus 1.6 hooks, Opacus ghost clipping via ``make_private``) run on one pretrained model and
batch, timed in alternation, on the CPU or (``--device cuda``) the GPU.

Peak memory, one method at a time, as a ratio to the plain step: on a GPU torch's peak allocated bytes
(`dp_step_cuda.peak_memory`); on the CPU each method in a fresh process, the growth of its peak
resident set (Linux's VmHWM, reset through ``/proc/self/clear_refs`` once model and batch are loaded)
over building its model copy and optimizer, a first step and 3 more: its copy, gradients, optimizer
state, activations, and whatever the allocator holds at the peak.

Opacus walks a model's children without de-duplicating shared modules (``iterate_submodules``), and
dpviz's `TextEncoder` registers the embeddings and the blocks twice (``backbone.model.*`` and
``backbone.embeddings`` / ``backbone.blocks``): as built, ghost clipping refuses the model ("Parameter
tying is not supported") and the hooks run twice per layer, doubling every per-sample gradient of the
backbone. `unaliased` keeps each module under its first name only (the others become plain attributes,
the forward is unchanged), for every method alike. Opacus's ghost norm of an embedding also views its
ids as (B·T, 1), which fails on BERT's token-type and position ids (the (1, T) buffer expanded over
the batch): `build` makes embedding inputs contiguous (a pre-hook; B·T integers per call).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

import dp_step_cuda as gpu  # also puts the repository on sys.path (through common)
from common import interleaved
from dpviz import data, tasks
from dpviz.training import prepare
from dpviz.config import RunConfig
from dpviz.models import Classifier

REAL = {  # name: (label, task, inputs)
    "minilm": ("all-MiniLM-L6-v2", "real-text", ("tweets", "random")),
    "efficientnet_lite0": ("EfficientNet-Lite0", "real-vision", ("fashion-mnist",)),
}


def unaliased(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every module registered under its first name only (see the module docstring)."""
    seen = set()

    def walk(m):
        for name, child in list(m._modules.items()):
            if child is not None and id(child) in seen:
                del m._modules[name]
                object.__setattr__(m, name, child)
            elif child is not None:
                seen.add(id(child))
                walk(child)
    walk(model)
    return model


def task_batch(name: str, inputs: str, B: int, data_dir: str | None = None):
    """(x, y, bundle): the first B training examples of the backbone's real task (its files in ``data_dir``,
    or where the task finds them), or random token ids."""
    fields = {**tasks.task_fields(REAL[name][1]), **({"data_dir": data_dir} if data_dir else {})}
    cfg = RunConfig.from_dict(fields, reset_unread=True)  # no public_dataset here
    bundle = data.load(cfg)
    x, y = bundle.x_train[:B].clone(), bundle.y_train[:B].clone()
    if inputs == "random":  # every position a word (ids above the special tokens): nothing to cut or mask
        x = torch.randint(999, int(bundle.x_train.max()) + 1, (B, cfg.max_length),
                          generator=torch.Generator().manual_seed(0))
    return x, y, bundle


def build(name: str, classes: int) -> torch.nn.Module:
    """The pretrained backbone with a fresh head, every layer trainable but ``always_frozen``, train mode."""
    torch.manual_seed(0)
    if name == "minilm":
        from dpviz.models.text import build_minilm
        backbone = build_minilm()
    else:
        from dpviz.models.efficientnet import build_efficientnet_lite0
        backbone = build_efficientnet_lite0(channels=1, size=28)
    model = Classifier(backbone, classes)
    prepare.set_trainable(model, "all")
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding):  # after dpviz's own pre-hook, which expands (1, T) ids
            m.register_forward_pre_hook(_contiguous)
    return unaliased(model.train())


def _contiguous(module, args):
    return (args[0].contiguous(),) + args[1:]


def _hwm() -> int:
    return int(re.search(r"VmHWM:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def child_memory(name: str, inputs: str, B: int, method: str, steps: int = 3) -> int:
    """In a fresh process: peak RSS growth (bytes) of ``method`` over set-up, a first step and ``steps``."""
    x, y, bundle = task_batch(name, inputs, B)
    base = build(name, bundle.num_classes)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := the current resident set
    before = _hwm()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = gpu.make_step(method, base, x, y)
        for _ in range(1 + steps):
            step()
    return _hwm() - before


def peak_memory(name: str, inputs: str, B: int, method: str, base, x, y) -> int:
    if x.is_cuda:
        return gpu.peak_memory(method, base, x, y)
    out = subprocess.run([sys.executable, __file__, name, inputs, str(B), method], capture_output=True,
                         text=True)
    if out.returncode:
        raise RuntimeError(f"{name}/{method}: {out.stderr.strip().splitlines()[-1]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(name: str, inputs: str, B: int, device: str, methods=gpu.METHODS, rounds: int = 7,
            reps: int = 2, memory: bool = True, clock=time.perf_counter) -> dict:
    """{method: (seconds per step, peak bytes or None)}; a method that fails gets (None, its error)."""
    x, y, bundle = task_batch(name, inputs, B)
    x, y = x.to(device), y.to(device)
    base = build(name, bundle.num_classes).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out, steps = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus' secure-RNG and full-backward-hook notices
        for m in methods:
            try:
                steps[m] = gpu.make_step(m, base, x, y)
                steps[m]()
            except Exception as e:  # noqa: BLE001 (reported in the table: an Opacus refusal is a result)
                out[m] = (None, f"{type(e).__name__}: {e}")
                steps.pop(m, None)
        mem = {m: peak_memory(name, inputs, B, m, base, x, y) if memory else None for m in steps}
        t = interleaved(steps, rounds=rounds, reps=reps, sync=sync, clock=clock)
    return {**out, **{m: (t[m], mem[m]) for m in steps}}


def tokens(name: str, inputs: str, B: int) -> str:
    """The batch's shape as the step sees it (text: cut to its longest sequence; share of padding)."""
    x, _, bundle = task_batch(name, inputs, B)
    if bundle.modality != "text":
        return f"{B} × {x.shape[1]}×{x.shape[2]}×{x.shape[3]}"
    real = (x != bundle.pad_id).sum(1)
    return f"{B} × {int(real.max())} tokens ({1 - real.sum().item() / (B * int(real.max())):.0%} padding)"


COLUMNS = ["backbone", "input", "batch", "plain step", "dpviz", "Opacus hooks", "Opacus ghost clipping"]


def table(results: dict) -> list[list[str]]:
    """One row of cells per measured input (`COLUMNS`): the plain step's ms and MiB, then each DP method's
    (time; memory) ratio to it."""
    rows = []
    for (name, inputs, shape), r in results.items():
        t0, m0 = r["plain"]
        ratio = (lambda t, m: f"{t / t0:.2f}×; {m / m0:.2f}×") if m0 else (lambda t, m: f"{t / t0:.2f}×")
        cells = [("refused: " + r[m][1][:60] if r[m][0] is None else ratio(*r[m])) if m in r else "–"
                 for m in gpu.METHODS[1:]]
        plain = f"{t0 * 1e3:.0f} ms" + (f"; {m0 / 2**20:.0f} MiB" if m0 else "")
        rows.append([REAL[name][0], inputs, str(shape), plain, *cells])
    return rows


def markdown(rows: list[list[str]], header: bool = True) -> str:
    """``rows`` as a Markdown table, under `COLUMNS` when ``header``."""
    return gpu.markdown(rows, header, COLUMNS)


def profile(name: str, inputs: str, B: int, path: Path, device: str = "cpu", steps: int = 3) -> None:
    """torch.profiler tables of ``steps`` plain and dpviz steps, book-keeping's layers labelled."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    x, y, bundle = task_batch(name, inputs, B)
    x, y, base = x.to(device), y.to(device), build(name, bundle.num_classes).to(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    keys = ("cuda_time_total",) if device == "cuda" else ()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with open(path, "w") as f, gpu.annotated_bk():
        for method in ("plain", "dpviz"):
            step = gpu.make_step(method, base, x, y)
            step()
            sync()
            with torch_profile(activities=acts) as prof:
                for _ in range(steps):
                    step()
                sync()
            for key in keys + ("cpu_time_total", "self_cpu_time_total"):
                f.write(f"== {name} {inputs} B={B}: {method} step, {steps} steps, by {key}\n")
                f.write(prof.key_averages().table(sort_by=key, row_limit=45, max_name_column_width=60) + "\n\n")


if __name__ == "__main__":  # the memory child: name inputs B method
    print(json.dumps(child_memory(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])))
