"""Captured private steps: a phase's DP step replayed as one CUDA graph per physical batch size.

At the fixed batch sizes of `dpviz.training.shapes` a step launches the very kernels of the step before, and
on a GPU the host's launches, not the device, set the pace at the sizes dpviz trains (a plain ResNet-18 step at
B = 64 is mostly launch overhead on an H200). Replaying a captured CUDA graph launches them all at once. One
graph per physical size of the phase holds:

- the forward with book-keeping's hooks, the backward to the layers' outputs, the per-sample norms, the clip
  factors and the clipped sum (`dpviz.privacy.dpsgd.Stepper.clipped_sum`);
- the noise added and the division by the accounted q·n, as `dpsgd.private_step` does them;
- the step's statistics (read once after the replay: one host sync, as an eager step's);
- SGD's update, where it is momentum without dampening or nesterov (Adam and AdamW update eagerly after the
  replay: their step counters live on the host); a changed learning rate ends the phase's capture.

The noise itself is drawn eagerly, before the replay, by the same `dpsgd.gaussian_noise` calls an eager step
makes, from the run's generator and through BandMF's noise memory, into a buffer the graph reads. So every
step's draw is fresh by construction, and an eager and a replayed step from one generator state draw the same
numbers.

The last warm-up before a capture runs with CUDA's synchronisation check on and watches CUDA's default
generator: a step that reads the device from the host, or draws random numbers itself, is not captured.

A capture never changes what a step releases. Before its first replay, each graph is checked against the eager
step itself (`dpsgd.private_step` and SGD from the same generator state and noise memory, so the eager draw is
checked too) on the same batch (`TOLERANCE`); a mismatch, or an error while capturing, restores the
parameters and the optimizer's state, says so in the run's events, and the phase goes on eagerly. A phase that
cannot be captured at all (`why_eager`) steps eagerly and says why, once. ``DPVIZ_CAPTURE=off`` turns capture
off: the steps are the same, only their speed differs.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time

import torch
from torch import nn

from dpviz.privacy import dpsgd

ENV = "DPVIZ_CAPTURE"
WARMUP = 2  # eager runs of the step on a side stream before its capture (autograd's and cuBLAS's lazy set-up)
TOLERANCE = 1e-4  # a replayed update may differ from the eager one by this much of the eager update's largest entry
# (the same kernels, but cuDNN may choose another algorithm inside a capture)
KNOWN = ("torch", "dpviz", "timm", "transformers", "torchvision")  # packages whose layers' forwards dpviz runs captured


def why_eager(*, device: str, stepper, optimizer, strategy, padded: bool, canaries=None, world=None,
              precision: str = "fp32", environ=None) -> str | None:
    """None when a phase's private steps can run as captured CUDA graphs; otherwise the one line saying why not.

    Args:
        device: the run's device ("cuda", "cuda:1", "cpu").
        stepper: the phase's `dpsgd.Stepper`; optimizer: its optimizer; strategy: the run's `Strategy`.
        padded: whether the phase pads its batches to fixed sizes (``batch_shapes`` ≠ 0).
    """
    environ = os.environ if environ is None else environ
    if environ.get(ENV, "auto").lower() in ("off", "0", "false", "no"):
        return f"{ENV}=off"
    if torch.device(device).type != "cuda":
        return "CUDA graphs are CUDA's: this run is on a CPU"
    if not padded:
        return "batch_shapes 0: every step has a new batch size, and a graph one shape"
    if stepper.mode == "hooks":
        return "Opacus's hooks compute the per-sample gradients (grad_sample_mode hooks)"
    if stepper.mode == "head":
        return "a linear head on cached features: its step is a few kernels, nothing to gain"
    if precision == "fp16":
        return "fp16 counts overflowed examples on the host at every step"
    if canaries is not None:
        return "an audit's canaries enter each step from the host"
    if world is not None:
        return "a distributed run's collectives are not captured"
    if getattr(type(strategy), "after_step", None) is not _base_after_step():
        return f"the strategy {getattr(strategy, 'name', type(strategy).__name__)} reads each step's gradients"
    if any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 and m.training for m in stepper.module.modules()):
        return ("dropout in training mode: its masks would come from CUDA's generator inside the graph, which the "
                "check against the eager step cannot match")
    outside = sorted({type(m).__module__ for m in stepper.module.modules()
                      if type(m).__module__.split(".")[0] not in KNOWN})
    if outside:
        return f"layers from outside {', '.join(KNOWN)} ({', '.join(outside)}): their forwards may read the host"
    if not isinstance(optimizer, torch.optim.Optimizer):
        return "no optimizer of torch.optim"
    return None


def _base_after_step():
    from dpviz.strategies.base import Strategy  # the strategies import the training layer's neighbours

    return Strategy.after_step


class CapturedSteps:
    """One phase's private steps, replayed from CUDA graphs (one per physical batch size).

    ``graphs=False`` runs the same step eagerly, through the same buffers and in the same order (noise drawn
    first, then the step): the path a CPU test checks against `dpsgd.private_step`.
    """

    def __init__(self, stepper: dpsgd.Stepper, optimizer, generator: torch.Generator, *, clip_norm: float,
                 noise_multiplier: float, expected_batch: float, clipping: str = "abadi", correlate=None,
                 count_noise: float = 0.0, graphs: bool = True):
        self.stepper, self.optimizer, self.generator = stepper, optimizer, generator
        self.params: list[nn.Parameter] = stepper.params
        self.clip_norm, self.sigma, self.expected = clip_norm, noise_multiplier, expected_batch
        self.clipping, self.correlate, self.count_noise = clipping, correlate, count_noise
        self.graphs_on = graphs
        self.optimizes = _plain_sgd(optimizer)  # SGD's update has no host state: in the graph
        self.lrs = _lrs(optimizer)  # captured as numbers: a change sends the phase back to eager steps
        self.noise = [torch.zeros_like(p) for p in self.params]  # the eager draw the graph reads
        self.graphs: dict[int, tuple] = {}  # size: (graph, (x, y, mask) static, sums, grads)
        self.pool = None
        self.off: str | None = None  # why this phase went back to eager steps
        self.capture_s, self.capture_bytes, self.replays = 0.0, 0, 0

    def takes(self, x, y) -> bool:
        """Whether this step can replay: one padded physical batch (a split batch steps eagerly), the learning
        rate the graphs hold."""
        if self.off is None and self.optimizes and _lrs(self.optimizer) != self.lrs:
            self.off = "the learning rate changed, and a graph holds the one it was captured with"
        return self.off is None and isinstance(y, torch.Tensor)

    # --- one step --------------------------------------------------------------------------------------
    def step(self, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> dpsgd.StepStats:
        """Set ``p.grad`` to the noisy clipped mean, and update the parameters where `optimizes`."""
        entry = self.graphs.get(len(y)) if self.graphs_on else None
        fresh = entry is None and self.graphs_on and self.off is None
        before = self._streams() if fresh else None  # what the eager step would draw from, for the check
        self._draw()
        if entry is not None:
            graph, (sx, sy, sm), sums, grads = entry
            sx.copy_(x)
            sy.copy_(y)
            sm.copy_(mask)
            graph.replay()
            self.replays += 1
            for p, g in zip(self.params, grads):
                p.grad = g
        elif fresh and (sums := self._capture(x, y, mask, before)) is not None:
            pass  # captured, checked, and its first replay was this step
        else:
            sums, _ = self._body(x, y, mask)
        return self._stats(sums)

    def _draw(self) -> None:
        """This step's noise, drawn as `dpsgd.private_step` draws it (one call per parameter, then BandMF's memory)."""
        torch._foreach_copy_(self.noise, dpsgd.draw_noise(self.params, self.sigma * self.clip_norm, self.generator,
                                                          self.correlate))

    def _body(self, x, y, mask):
        """The step as the graph holds it: the clipped sum, plus the drawn noise, over q·n; SGD's update."""
        for p in self.params:
            p.grad = None
        out, loss_sum, norms = self.stepper.clipped_sum(x, y, self.clip_norm, self.clipping, mask)
        sums = torch.stack([t.to(torch.float64)
                            for t in dpsgd._batch_sums(out, y, mask, loss_sum, norms, self.clip_norm)])  # (5,)
        grads = dpsgd.noisy_mean(self.params, [p.grad if p.grad is not None else torch.zeros_like(p)
                                               for p in self.params], self.noise, self.expected)
        if self.optimizes:
            self.optimizer.step()
        return sums, grads

    def _stats(self, sums: torch.Tensor) -> dpsgd.StepStats:
        return dpsgd.released_stats(list(sums.unbind()), sums.device, count_noise=self.count_noise,
                                    generator=self.generator, expected_batch=self.expected)

    # --- capture -------------------------------------------------------------------------------------------
    def _streams(self) -> tuple:
        """The noise generator's state and a copy of BandMF's noise memory, before this step's draw."""
        return self.generator.get_state(), copy.deepcopy(self.correlate)

    def _capture(self, x, y, mask, before) -> torch.Tensor | None:
        """Capture the step at this batch size, check it against the eager step, and take this step by its first
        replay: its statistics (5,); None: the phase steps eagerly from here (`off` says why)."""
        t0, saved, allocated = time.perf_counter(), self._save(), 0
        static = (x.clone(), y.clone(), mask.clone())
        home = torch.cuda.current_stream(x.device) if x.is_cuda else None  # a failed capture leaves another current
        try:
            side = torch.cuda.Stream(x.device) if x.is_cuda else None  # (a CPU fails below, after the warm-up)
            if side is not None:
                allocated = torch.cuda.memory_allocated(x.device)
                side.wait_stream(home)
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                for w in range(WARMUP):
                    with _strict(x) if w == WARMUP - 1 else contextlib.nullcontext():
                        self._body(*static)
            if side is not None:
                home.wait_stream(side)
            self._restore(saved)
            graph = torch.cuda.CUDAGraph()
            self.pool = self.pool if self.pool is not None else torch.cuda.graph_pool_handle()
            with torch.cuda.graph(graph, pool=self.pool):
                sums, grads = self._body(*static)
            entry = (graph, static, sums, grads)
            eager_grads, eager_changes = self.eager_update(static, saved, before)
            graph.replay()
            self.replays += 1
            # the noisy gradients, over their noise-free part (the same noise cancels in the difference, and
            # would hide a wrong clipped sum beside it), and the parameters' changes where SGD is in the graph
            clipped = torch._foreach_sub(eager_grads, torch._foreach_div(self.noise, self.expected))
            gap = max(_gap(list(grads), eager_grads, clipped), _gap(self._changes(saved), eager_changes))
        except Exception as e:  # noqa: BLE001 — any failure to capture means eager steps, never a lost run
            if home is not None:
                torch.cuda.set_stream(home)
                torch.cuda.synchronize(x.device)
            self._restore(saved)
            self.off = f"capture failed at batch size {len(y)} ({type(e).__name__}: {' '.join(str(e).split())[:160]})"
            return None
        finally:
            self.capture_s += time.perf_counter() - t0
        if gap > TOLERANCE:
            self._restore(saved)
            self.off = f"the replayed step differed from the eager one by {gap:.2e} of its largest entry"
            return None
        self.capture_bytes += max(torch.cuda.memory_allocated(x.device) - allocated, 0)
        self.graphs[len(y)] = entry
        for p, g in zip(self.params, grads):
            p.grad = g
        return sums

    def eager_update(self, static, saved: dict, before: tuple) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The noisy gradients `dpsgd.private_step` sets on the batch ``static`` from the noise streams as they
        were ``before`` this step's draw (`_streams`), and the parameters' changes SGD then makes where it is in
        the graph: the eager step itself, its own draw included, against which a replay is checked. The state is
        put back after."""
        gen = torch.Generator(device=self.generator.device)
        gen.set_state(before[0])
        x, y, mask = static
        for p in self.params:
            p.grad = None
        dpsgd.private_step(self.stepper, x, y, clip_norm=self.clip_norm, noise_multiplier=self.sigma,
                           expected_batch=self.expected, generator=gen, clipping=self.clipping, mask=mask,
                           **({"correlate": before[1]} if before[1] is not None else {}))
        grads = [p.grad.detach().clone() for p in self.params]
        if self.optimizes:
            self.optimizer.step()
        changes = [c.clone() for c in self._changes(saved)]
        self._restore(saved)
        return grads, changes

    def _changes(self, saved: dict) -> list[torch.Tensor]:
        """Each parameter's change since ``saved`` where SGD updates in the graph (a change, not the parameter: a
        wrong update small beside the weights would pass unseen); nothing where the optimizer steps outside."""
        return [p.detach() - v for p, v in zip(self.params, saved["params"])] if self.optimizes else []

    def _save(self) -> dict:
        state = [self.optimizer.state.get(p, {}).get("momentum_buffer") for p in self.params]
        return {"params": [p.detach().clone() for p in self.params],
                "momentum": [b.clone() if b is not None else None for b in state]}

    def _restore(self, saved: dict) -> None:
        """Parameters and SGD's momentum back in place (the graph holds their addresses); a buffer that a
        warm-up created goes to 0, which SGD's next step treats as its first (no dampening: buf = grad)."""
        with torch.no_grad():
            for p, v, b in zip(self.params, saved["params"], saved["momentum"]):
                p.copy_(v)
                p.grad = None
                buf = self.optimizer.state.get(p, {}).get("momentum_buffer")
                if buf is not None:
                    buf.copy_(b) if b is not None else buf.zero_()

    def summary(self) -> dict:
        """What the run's summary says of its captured steps."""
        return {"graphs": len(self.graphs), "replays": self.replays, "capture_s": round(self.capture_s, 3),
                "capture_mib": round(self.capture_bytes / 2 ** 20, 1), **({"eager": self.off} if self.off else {})}


def _gap(a: list[torch.Tensor], b: list[torch.Tensor], scale: list[torch.Tensor] | None = None) -> float:
    """max |a − b| over max |scale| (default: b); the difference itself where the scale is all zero."""
    top = max((float(t.abs().max()) for t in (b if scale is None else scale) if t.numel()), default=0.0)
    diff = max((float((s - t).abs().max()) for s, t in zip(a, b) if t.numel()), default=0.0)
    return diff / top if top > 0 else diff


def _plain_sgd(optimizer) -> bool:
    """SGD whose update the graph may hold: momentum without dampening, nesterov or maximize (`_restore` zeroes
    a new momentum buffer, which is SGD's first step only without dampening; nesterov changes ``p.grad``)."""
    return isinstance(optimizer, torch.optim.SGD) and all(
        not g.get("dampening") and not g.get("nesterov") and not g.get("maximize") for g in optimizer.param_groups)


def _lrs(optimizer) -> list:
    return [g.get("lr") for g in optimizer.param_groups] if optimizer is not None else []


@contextlib.contextmanager
def _strict(x: torch.Tensor):
    """The last warm-up: a host read of the device raises (a graph cannot hold one), and random numbers drawn by
    the step from CUDA's default generator (dropout, stochastic depth) are refused (the check could not match them).
    Nothing on a CPU."""
    if not x.is_cuda:
        yield
        return
    gen = torch.cuda.default_generators[x.device.index if x.device.index is not None else torch.cuda.current_device()]
    mode, offset = torch.cuda.get_sync_debug_mode(), gen.get_offset()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(mode)
    if gen.get_offset() != offset:
        raise RuntimeError("the step draws random numbers from CUDA's default generator (dropout, stochastic depth)")
