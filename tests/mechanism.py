"""The mechanism harness: what each DP step of a real run actually did, measured from the step itself.

`Probe` wraps `dpviz.privacy.dpsgd.private_step` while a run trains (every strategy, per-sample path and
precision reaches its steps through it). At the private steps it is told to check, it replays the step on
copies of the noise generator, so the run itself goes on exactly as it would have:

- **sensitivity**: each of a few examples' contributions to the clipped sum, measured by removing it
  (the neighbouring batch: the same batch with that row dropped, the same noise draw). It must equal that
  example's own gradient clipped at C, computed here by plain autograd on the example alone, so it is ≤ C in
  norm, and some example sits at C (clipping is active);
- **noise**: the step replayed on an empty batch with fresh noise draws: the added noise's standard
  deviation must be σ·C within its sampling error;
- **scale**: both are read as (update × q·n), with q and n those the accountant was given for the phase, so
  an update divided by anything but the expected batch size fails them.

`check_epsilon` then composes the run's private steps with dp_accounting's PLD accountant, written out
here from the recorded (σ, q, steps), not through dpviz's accounting code.
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from dpviz.privacy import dpsgd, precision as prec
from dpviz.privacy.clipping import AUTO_S_GAMMA

EXAMPLES = 6  # examples removed one at a time per checked step
NOISE_DRAWS = 8  # fresh noise draws of the checked step on an empty batch
# Relative tolerance of a measured contribution against the example's own clipped gradient: float32
# arithmetic in two different orders (fp32, tf32 and the AMP precisions' FP32 accumulation of norms), or a
# bf16/fp16 forward and backward, whose own rounding differs between a batch and a lone example.
TOLERANCE = {"fp32": 2e-3, "tf32": 2e-2, "bf16": 6e-2, "fp16": 2e-2}


@dataclass
class StepRecord:
    """What one checked step did."""

    step: int
    clip_norm: float
    sigma: float  # σ the step was asked for
    expected_batch: float  # q·n the step divided by
    contributions: list[float] = field(default_factory=list)  # ‖measured contribution‖, per removed example
    errors: list[float] = field(default_factory=list)  # ‖measured − own clipped gradient‖ / C
    noise_std: float = 0.0  # measured std of (update × q·n) on an empty batch (BandMF: of the fresh draws in it)
    noise_entries: int = 0
    bands: int = 1


class Probe:
    """Wraps `dpsgd.private_step` (install with ``monkeypatch.setattr(dpsgd, "private_step", probe)``).

    Args:
        check: the private steps (0-based, counted over the run) to measure.
        rank: this process's rank in a distributed run (default: ``$RANK``, 0 alone); rank 0 reads the
            removed rows' contributions, every rank replays alike.
    """

    def __init__(self, check=(0, 3), rank: int | None = None):
        self.check = set(check)
        self.original = dpsgd.private_step
        self.records: list[StepRecord] = []
        self.calls = 0  # private steps seen
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else rank

    def __call__(self, stepper, x, y, *, clip_norm, noise_multiplier, expected_batch, generator,
                 clipping="abadi", canaries=None, reduce=None, mask=None, correlate=None):
        k, self.calls = self.calls, self.calls + 1
        if k in self.check:
            self.records.append(self.measure(k, stepper, x, y, clip_norm=clip_norm, sigma=noise_multiplier,
                                             expected_batch=expected_batch, generator=generator, clipping=clipping,
                                             reduce=reduce, mask=mask, correlate=correlate))
        return self.original(stepper, x, y, clip_norm=clip_norm, noise_multiplier=noise_multiplier,
                             expected_batch=expected_batch, generator=generator, clipping=clipping,
                             canaries=canaries, reduce=reduce, mask=mask,
                             **({"correlate": correlate} if correlate is not None else {}))

    # --- measuring ------------------------------------------------------------------------------------
    def _replay(self, stepper, parts, *, clip_norm, sigma, expected_batch, generator, clipping, reduce, correlate):
        """(update × q·n) as one flat vector, for the step on ``parts`` with a copy of ``generator`` (and of
        BandMF's noise memory, so the run's own is not advanced)."""
        gen = torch.Generator(device=generator.device)
        gen.set_state(generator.get_state())
        overflows = stepper.overflows
        xs, ys, ms = zip(*parts) if parts else ((), (), ())
        self.original(stepper, list(xs), list(ys), clip_norm=clip_norm, noise_multiplier=sigma,
                      expected_batch=expected_batch, generator=gen, clipping=clipping, reduce=reduce,
                      mask=list(ms) if any(m is not None for m in ms) else None,
                      **({"correlate": copy.deepcopy(correlate)} if correlate is not None else {}))
        stepper.overflows = overflows  # a replay's overflows are not the run's
        return torch.cat([p.grad.detach().reshape(-1).double() for p in stepper.params]) * expected_batch

    def measure(self, k, stepper, x, y, *, clip_norm, sigma, expected_batch, generator, clipping, reduce, mask,
                correlate=None):
        parts = dpsgd._parts(x, y, mask)
        rec = StepRecord(step=k, clip_norm=clip_norm, sigma=sigma, expected_batch=expected_batch)
        args = dict(clip_norm=clip_norm, sigma=sigma, expected_batch=expected_batch, generator=generator,
                    clipping=clipping, reduce=reduce, correlate=correlate)
        full = self._replay(stepper, parts, **args)
        rows = [(i, j) for i, (_, yc, mc) in enumerate(parts) for j in range(len(yc)) if mc is None or bool(mc[j])]
        # every rank replays as often (so a distributed run's collectives pair up); only rank 0's rows are read
        for r in range(EXAMPLES):
            if r >= len(rows) or self.rank != 0:  # only rank 0 removes a row: one example leaves the batch
                self._replay(stepper, parts, **args)
                continue
            i, j = rows[r]
            xc, yc, mc = parts[i]
            keep = torch.ones(len(yc), dtype=torch.bool, device=yc.device)
            keep[j] = False
            if mc is None:  # the neighbouring batch: the row dropped
                gone = (xc[keep], yc[keep], None)
            else:  # a padded batch keeps its shape: the row masked out, as padding is
                gone = (xc, yc, mc & keep)
            without = self._replay(stepper, parts[:i] + [gone] + parts[i + 1:], **args)
            measured = full - without
            if self.rank == 0:
                own = self.own_clipped(stepper, xc, yc, j, clip_norm, clipping)
                rec.contributions.append(float(measured.norm()))
                rec.errors.append(float((measured - own).norm()) / clip_norm)
        draws = []
        for d in range(NOISE_DRAWS):
            gen = torch.Generator(device=generator.device).manual_seed(10_000 + d)
            draws.append(self._replay(stepper, [], **{**args, "generator": gen}))
        if correlate is not None:  # BandMF: the fresh draw z_t = m_0·w_t + Σ m_k·w_{t−k}
            past = sum((mk * torch.cat([t.reshape(-1).double() for t in w])
                        for mk, w in zip(correlate.m[1:], correlate.memory)), torch.zeros(()))
            draws = [correlate.m[0] * w + past for w in draws]
            rec.bands = correlate.bands
        noise = torch.cat(draws)
        rec.noise_std, rec.noise_entries = float(noise.std()), noise.numel()
        for p in stepper.params:
            p.grad = None
        return rec

    def own_clipped(self, stepper, x, y, j, clip_norm, clipping) -> torch.Tensor:
        """Example ``j``'s own gradient, clipped at C as the papers define it: plain autograd of its loss alone,
        through the same batch's forward (the batch's arithmetic, so a ReLU at its kink falls the same way)."""
        module = stepper.module
        for p in stepper.params:
            p.grad = None
        with prec.autocast(stepper.precision, x.device.type):
            loss = F.cross_entropy(module(x)[j:j + 1], y[j:j + 1], reduction="sum")
        grads = torch.autograd.grad(loss.float() * prec.loss_scale(stepper.precision), stepper.params,
                                    allow_unused=True)
        for p in stepper.params:  # Opacus's hooks saw this backward too
            if hasattr(p, "grad_sample"):
                p.grad_sample = None
        g = torch.cat([(gr if gr is not None else torch.zeros_like(p)).reshape(-1).double()
                       for gr, p in zip(grads, stepper.params)]) / prec.loss_scale(stepper.precision)
        norm = g.norm()
        c = clip_norm / (norm + AUTO_S_GAMMA) if clipping == "auto-s" else min(1.0, clip_norm / (float(norm) + 1e-6))
        return g * c


def check_steps(records: list[StepRecord], *, phases, n: int, precision: str = "fp32") -> None:
    """Every checked step is the Gaussian mechanism the accountant was given: sensitivity C, noise σ·C,
    update divided by q·n. ``phases``: the run's phases as reported (dicts), the accountant's inputs."""
    assert records, "no private step was checked"
    private = [p for p in phases if p.get("noise_multiplier") is not None]
    tol = TOLERANCE[precision]
    for rec in records:
        phase = _phase_of(private, rec.step)
        C, sigma, qn = phase["clip_norm"], phase["noise_multiplier"], phase["sample_rate"] * n
        where = f"private step {rec.step} ({phase['name']})"
        assert math.isclose(rec.expected_batch, qn, rel_tol=1e-9), \
            f"{where}: the update is divided by {rec.expected_batch:g}, not the expected batch q·n = {qn:g}"
        assert rec.contributions, f"{where}: no example's contribution was measured"
        assert max(rec.contributions) <= C * (1 + tol), \
            f"{where}: an example contributes {max(rec.contributions):.6g} > C = {C:g} to the clipped sum"
        assert max(rec.errors) <= tol, \
            f"{where}: an example's contribution differs from its own gradient clipped at C by {max(rec.errors):.3g}·C"
        assert max(rec.contributions) >= C * (1 - tol), \
            f"{where}: no example reaches C ({max(rec.contributions):.4g} < {C:g}): clipping is not active"
        # the std of N Gaussian entries has relative standard error ≈ 1/√(2N); 5 of them is a generous band
        band = 5 / math.sqrt(2 * rec.noise_entries)
        assert abs(rec.noise_std / (sigma * C) - 1) <= band, \
            f"{where}: the noise's std is {rec.noise_std:.6g}, not σ·C = {sigma * C:.6g} (± {band:.2%})"


def _phase_of(private_phases: list[dict], step: int) -> dict:
    """The private phase that holds the run's private step ``step`` (0-based)."""
    for p in private_phases:
        if step < p["steps"]:
            return p
        step -= p["steps"]
    raise AssertionError(f"private step {step} is beyond the run's phases")


def independent_epsilon(history, delta: float) -> float:
    """ε of (σ, q, steps) entries: each a Poisson-sampled Gaussian composed ``steps`` times, all composed, by
    dp_accounting's PLD accountant (add-or-remove-one neighbours), on a fine grid."""
    from dp_accounting import dp_event
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    event = dp_event.ComposedDpEvent([dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), t) for s, q, t in history if t > 0])
    acc = PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def check_epsilon(summary: dict, probe: Probe, *, epsilon: float, delta: float, slack: float = 0.01) -> float:
    """The run's private steps, composed independently of dpviz's accounting, spend at most ε (within the
    PRV/PLD difference, ``slack`` relative): σ and q as the phases gave them to the steps, and as many steps
    as the probe saw."""
    private = [p for p in summary["phases"] if p.get("noise_multiplier") is not None]
    assert sum(p["steps"] for p in private) == probe.calls, \
        f"the run took {probe.calls} private steps, its phases account for {sum(p['steps'] for p in private)}"
    # BandMF's b bands with cyclic Poisson sampling: ⌈T/b⌉ DP-SGD steps at rate b·q (`dpviz.privacy.bandmf`)
    eps = independent_epsilon([(p["noise_multiplier"], min(1.0, p.get("bands", 1) * p["sample_rate"]),
                                -(-p["steps"] // p.get("bands", 1))) for p in private], delta)
    assert eps <= epsilon * (1 + slack), f"the run's steps spend ε = {eps:.4f} by PLD, over its budget {epsilon:g}"
    return eps
