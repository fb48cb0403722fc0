"""The privacy check every private run carries: evidence, read from the run's own steps, that each step was
the mechanism its accountant counted.

At a few private steps (`RunConfig.privacy_check` of them: the first of every private phase, then random
others) the check replays the step on copies of its state (the noise generator, BandMF's noise memory), so the
run goes on exactly as it would have, then reads the step's own release (the noisy mean it set, eager or replayed
from a CUDA graph), and measures, in units of the update times the accounted q·n:

- **sensitivity**: each of `EXAMPLES` examples' contribution to the clipped sum: the step's release less a
  replay of the same batch without that row, from the same noise draw. It must equal the example's own gradient clipped at C,
  computed by plain autograd on the example alone, so at most C. An update divided by anything but the
  accounted q·n fails here, as does a step clipping at more than C.
- **noise**: the step's release less a replay with another noise generator: the difference is pure noise
  (BandMF's memory cancels). Its standard deviation, over the strategy's column norm measured from a chain of
  released noise itself (regressing each release on the b − 1 before it: ‖m‖/m₀ without reading the product's
  coefficients), gives the noise multiplier the step really had. It must be σ within sampling error.
- **phase start** (BandMF): the first step of a phase releases noise that owes nothing to the previous
  phase (two fresh draws' sum and difference spread alike).

At every private step it reads the sampled indices, in memory only:

- **participation**: each record's participations are at least b steps apart (BandMF's cyclic parts);
- **rate**: the participations per record are those of the accounted rate (q a step; b·q in its part's steps)
  in total and in their spread over records;
- **batch sizes**: the drawn batch sizes spread as Poisson sampling's do (a fixed-size batch fails).

Then ε is recomputed from the observed schedule (σ passed to the steps, the rate checked above, the steps
counted) by a second code path: dp_accounting's PLD accountant on a grid of its own, composed here, not
through `dpviz.privacy.accounting`.

The outcome (verdicts and figures only, never an index or a noise draw, which would void what they check) goes
into the run's summary as ``privacy_check``. Each statistical test fails by chance with probability at most
`ALPHA`, so a correct run fails the whole check with probability under 10⁻⁵.
"""

from __future__ import annotations

import copy
import math
import random
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from dpviz.privacy import bandmf, dpsgd, precision as prec
from dpviz.privacy.clipping import AUTO_S_GAMMA

EXAMPLES = 2  # examples removed one at a time per checked step
MIN_NOISE_ENTRIES = 5_000  # noise entries a checked step reads at least (a small head replays more pairs)
MAX_PAIRS = 64
MAX_COORDS = 200_000  # coordinates of a large model's release that the noise figures read (a fixed sample)
ALPHA = 1e-6  # false-alarm probability of each statistical test
# Relative tolerance of a measured contribution against the example's own clipped gradient: float32
# arithmetic in two orders, or a bf16/fp16 forward and backward whose rounding differs between a batch and one row.
TOLERANCE = {"fp32": 2e-3, "tf32": 2e-2, "bf16": 6e-2, "fp16": 2e-2}
COARSE_GRID = 1e-3  # dp_accounting's PLD grid tried first (≈ 0.05 s for the default run; 1e-4 takes ≈ 0.25 s)
SLACK = 0.01  # ε recomputed by PLD may exceed the PRV/RDP-calibrated target by the accountants' discretisation


def _z(alpha: float = ALPHA) -> float:
    """The two-sided normal quantile of ``alpha``."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(1 - alpha / 2)


@dataclass
class StepFigures:
    """What one checked step measured."""

    step: int  # private step, 0-based over the run
    phase: str
    contributions: list[float] = field(default_factory=list)  # ‖contribution‖ / C, per removed example
    errors: list[float] = field(default_factory=list)  # ‖contribution − own clipped gradient‖ / C
    noise_ratio: float = 0.0  # measured noise multiplier / accounted σ
    noise_band: float = 0.0  # its allowed relative error
    noise_entries: int = 0
    strategy_norm: float | None = None  # BandMF: ‖m‖/m₀ measured from released noise
    memory_ratio: float | None = None  # BandMF phase start: std(sum)/std(difference) of two fresh releases
    memory_band: float = 0.0
    passed: bool = True
    problems: list[str] = field(default_factory=list)


class PhaseSchedule:
    """The sampled indices of one private phase, reduced to counts as they come (nothing else is kept)."""

    def __init__(self, name: str, n: int, q: float, bands: int, count_noise: float = 0.0):
        self.name, self.n, self.q, self.bands, self.count_noise = name, n, q, bands, count_noise
        self.last = torch.full((n,), -(10**9), dtype=torch.long)
        self.count = torch.zeros(n, dtype=torch.long)
        self.sizes: list[int] = []
        self.count_draws: list[float] = []  # a privatised clip fraction's noise (release − exact count), in records
        self.min_gap: int | None = None
        self.sigmas: set[float] = set()

    def add(self, idx: torch.Tensor) -> None:
        idx = idx.detach().to("cpu", torch.long)
        k = len(self.sizes)
        if len(idx):
            gap = int((k - self.last[idx]).min())
            self.min_gap = gap if self.min_gap is None else min(self.min_gap, gap)
        self.last[idx] = k
        self.count[idx] += 1
        self.sizes.append(len(idx))

    def tests(self) -> list[dict]:
        """participation, rate and batch-size verdicts of this phase ([] before two steps)."""
        T, b, q, n = len(self.sizes), self.bands, self.q, self.n
        if T < 2:
            return []
        out = []
        gap_ok = self.min_gap is None or self.min_gap >= b
        out.append(_verdict("participation", gap_ok, f"{self.name}: closest participations of a record "
                            f"{self.min_gap} steps apart (at least {b})" if self.min_gap is not None else
                            f"{self.name}: no record took part twice"))
        p = min(1.0, b * q)  # rate of a record in its part's steps
        total, mean, var = float(self.count.sum()), n * q * T, n * q * T * (1 - p)
        z = (total - mean) / math.sqrt(var) if var > 0 else 0.0
        rate = total / (n * T)
        c = self.count.double()
        # Binomial(e, b·q) per record, e its part's steps: ⌈T/b⌉ for a share f = (T mod b)/b of the parts, ⌊T/b⌋
        # for the rest (the spread of e adds p²·f(1 − f))
        f = (T % b) / b
        expected_var = c.mean() * (1 - p) + p * p * f * (1 - f)
        disp = float(((c - c.mean()) ** 2).sum() / expected_var) if expected_var > 0 else 0.0
        lo, hi = _chi2_band(n - 1)
        out.append(_verdict("rate", abs(z) <= _z() and lo <= disp <= hi,
                            f"{self.name}: {rate:.5f} participations per record and step against q = {q:.5f} "
                            f"(z = {z:+.2f}); spread over records {disp / (n - 1):.3f} of Binomial's "
                            f"(allowed {lo / (n - 1):.3f}–{hi / (n - 1):.3f})"))
        sizes = torch.tensor(self.sizes, dtype=torch.double)
        groups = [sizes[r::b] for r in range(b) if len(sizes[r::b]) >= 2]
        df = sum(len(g) - 1 for g in groups)
        if df >= 2:
            within = sum(float(((g - g.mean()) ** 2).sum()) for g in groups)
            m = float(sizes.mean())
            stat = within / (m * (1 - p)) if m * (1 - p) > 0 else 0.0
            lo, hi = _chi2_band(df)
            out.append(_verdict("batch sizes", lo <= stat <= hi,
                                f"{self.name}: drawn batch sizes {m:.1f} ± {math.sqrt(within / df):.1f}, spread "
                                f"{stat / df:.3f} of Poisson sampling's (allowed {lo / df:.3f}–{hi / df:.3f})"))
        if self.count_noise and len(self.count_draws) >= 2:
            k = len(self.count_draws)
            stat = sum(d * d for d in self.count_draws) / self.count_noise ** 2
            lo, hi = _chi2_band(k)
            out.append(_verdict("count noise", lo <= stat <= hi,
                                f"{self.name}: the privatised clip fraction's noise {math.sqrt(stat / k):.3f}·σ_b "
                                f"over {k} steps (allowed {math.sqrt(lo / k):.3f}–{math.sqrt(hi / k):.3f})"))
        return out


def _chi2_band(df: int) -> tuple[float, float]:
    """The two-sided `ALPHA` band of a χ² statistic with ``df`` degrees of freedom: its quantiles ALPHA/2 and
    1 − ALPHA/2, by the inverse survival function scipy.stats' χ² takes them from (scipy.special's, a fraction
    of scipy.stats' import time: every stored run calls this)."""
    from scipy.special import chdtri

    return float(chdtri(df, 1 - ALPHA / 2)), float(chdtri(df, ALPHA / 2))


def _verdict(name: str, passed: bool, detail: str) -> dict:
    return {"name": name, "passed": bool(passed), "detail": detail}


class PrivacyCheck:
    """The check of one run (`dpviz.training.loop.Loop` calls it).

    Args:
        steps: how many private steps to replay (the first of each private phase first).
        phase_starts: the private step (0-based over the run) where each private phase starts.
        total: the run's private steps.
        seed: where the random choice of the other checked steps comes from (None: the OS's entropy).
        rank: this process's rank (rank 0 removes rows; every rank replays alike, so collectives pair up).
    """

    def __init__(self, *, steps: int, phase_starts: list[int], total: int, seed: int | None, rank: int = 0):
        rng = random.Random(seed) if seed is not None else random.SystemRandom()
        chosen = list(dict.fromkeys(s for s in phase_starts if s < total))[:steps]
        rest = [s for s in range(total) if s not in chosen]
        self.due = set(chosen) | set(rng.sample(rest, min(len(rest), steps - len(chosen))))
        self.phase_starts, self.rank, self.rng = set(phase_starts), rank, rng
        self.figures: list[StepFigures] = []
        self.phases: list[PhaseSchedule] = []
        self.first_step: int | None = None  # the first private step this process saw (a resumed run: later)
        self.seconds = 0.0  # time spent checking: replays and reading the sampled indices
        self._pending: dict | None = None  # a due step's replays, until `after_step` reads its release

    # --- the loop's hooks ------------------------------------------------------------------------------
    def enter_phase(self, *, name: str, n: int, q: float, bands: int, count_noise: float = 0.0) -> None:
        self.phases.append(PhaseSchedule(name, n, q, bands, count_noise))

    def count_released(self, noise: float) -> None:
        """A step's privatised clipped count minus the exact one: its noise, which must be N(0, σ_b²)."""
        self.phases[-1].count_draws.append(float(noise))

    def sampled(self, idx: torch.Tensor, sigma: float) -> None:
        t0 = time.perf_counter()
        self.phases[-1].add(idx)
        self.phases[-1].sigmas.add(float(sigma))
        self.seconds += time.perf_counter() - t0

    def before_step(self, k: int, stepper, x, y, mask, *, clip_norm: float, sigma: float, accounted_batch: float,
                    generator, clipping: str, reduce, correlate, precision: str) -> None:
        """Measure private step ``k`` (0-based over the run) if it is due: the replays on copies run here, before
        the step; `after_step` reads the step's own release and finishes the figures."""
        if self.first_step is None:
            self.first_step = k
        self._pending = None
        if k not in self.due:
            return
        t0 = time.perf_counter()
        state = _rng_states()
        try:
            self._pending = self._replays(k, stepper, dpsgd._parts(x, y, mask), clip_norm=clip_norm, sigma=sigma,
                                          accounted=accounted_batch, generator=generator, clipping=clipping,
                                          reduce=reduce, correlate=correlate, precision=precision)
        finally:
            _set_rng_states(state)
            for p in stepper.params:
                p.grad = None
        self.seconds += time.perf_counter() - t0

    def after_step(self, k: int, stepper) -> None:
        """Finish the measurement of step ``k`` from what the step itself released: ``p.grad``, the noisy mean it
        set (eager, or replayed from a CUDA graph: `dpviz.training.capture`), before any optimizer reads it."""
        pending, self._pending = self._pending, None
        if pending is None or pending["k"] != k:
            return
        t0 = time.perf_counter()
        self.figures.append(self._finish(_release(stepper, pending["accounted"]), pending))
        self.seconds += time.perf_counter() - t0

    # --- measuring -----------------------------------------------------------------------------------
    def _replay(self, stepper, parts, *, generator, correlate, copy_memory=True, **args) -> torch.Tensor:
        """(update × accounted q·n) as one flat float64 vector, for the step on ``parts`` with a copy of
        ``generator`` (and of the noise memory unless ``copy_memory`` is False: a chain goes on in it)."""
        gen = torch.Generator(device=generator.device)
        gen.set_state(generator.get_state())
        overflows = stepper.overflows
        xs, ys, ms = zip(*parts) if parts else ((), (), ())
        mem = copy.deepcopy(correlate) if correlate is not None and copy_memory else correlate
        dpsgd.private_step(stepper, list(xs), list(ys), clip_norm=args["clip_norm"], noise_multiplier=args["sigma"],
                           expected_batch=args["accounted"], generator=gen, clipping=args["clipping"],
                           reduce=args["reduce"], mask=list(ms) if any(m is not None for m in ms) else None,
                           **({"correlate": mem} if mem is not None else {}))
        stepper.overflows = overflows  # a replay's overflows are not the run's
        return _release(stepper, args["accounted"])

    def _replays(self, k, stepper, parts, *, precision, **args) -> dict:
        """Everything step ``k``'s figures need but its own release: the replays without one example, with fresh
        noise, BandMF's chains, and the removed examples' own clipped gradients."""
        C, correlate = args["clip_norm"], args["correlate"]
        rows = [(i, j) for i, (_, yc, mc) in enumerate(parts) for j in range(len(yc)) if mc is None or bool(mc[j])]
        picked = self.rng.sample(rows, min(EXAMPLES, len(rows)))
        gone = []  # (chunk, row, release without that row)
        for r in range(EXAMPLES):  # every rank replays as often; only rank 0 removes a row
            if r >= len(picked) or self.rank != 0:
                self._replay(stepper, parts, **args)
                continue
            i, j = picked[r]
            xc, yc, mc = parts[i]
            keep = torch.ones(len(yc), dtype=torch.bool, device=yc.device)
            keep[j] = False
            without = (xc[keep], yc[keep], None) if mc is None else (xc, yc, mc & keep)
            gone.append((i, j, self._replay(stepper, parts[:i] + [without] + parts[i + 1:], **args)))
        owns = {}
        for i in sorted({i for i, _, _ in gone}):  # one forward of each chunk for its removed rows' own gradients
            js = [j for c, j, _ in gone if c == i]
            owns.update({(i, j): own for j, own in zip(js, own_clipped(stepper, parts[i][0], parts[i][1], js, C,
                                                                        args["clipping"]))})
        coords = _coords(sum(p.numel() for p in stepper.params), self.rng)
        fresh = self._replay(stepper, parts, **{**args, "generator": _fresh(args["generator"], 0)})[coords]
        pairs = min(MAX_PAIRS, -(-MIN_NOISE_ENTRIES // len(coords)))
        diffs = []
        for d in range(1, pairs):  # a small model: more pairs, each of two fresh draws on the same batch
            a = self._replay(stepper, parts, **{**args, "generator": _fresh(args["generator"], 2 * d)})
            b = self._replay(stepper, parts, **{**args, "generator": _fresh(args["generator"], 2 * d + 1)})
            diffs.append((a - b)[coords])
        out = {"k": k, "accounted": args["accounted"], "C": C, "sigma": args["sigma"], "precision": precision,
               "gone": gone, "owns": owns, "coords": coords, "fresh": fresh, "diffs": diffs,
               "banded": correlate is not None and correlate.bands > 1, "ratio_m": 1.0, "band_m": 0.0,
               "memory_ratio": None}
        if out["banded"]:
            out["ratio_m"], out["band_m"] = self._strategy_norm(stepper, coords, correlate.bands, **args)
            if k in self.phase_starts:
                out["memory_ratio"] = self._memory_ratio(stepper, coords, **args)
        return out

    def _finish(self, full: torch.Tensor, m: dict) -> StepFigures:
        """Step figures from the step's release ``full`` (update × accounted q·n, flat) and its replays ``m``."""
        C, k = m["C"], m["k"]
        fig = StepFigures(step=k, phase=self.phases[-1].name if self.phases else "?")
        for i, j, without in m["gone"]:
            measured = full - without  # the same noise draw: what example j of chunk i added
            fig.contributions.append(float(measured.norm()) / C)
            fig.errors.append(float((measured - m["owns"][(i, j)]).norm()) / C)
        diff = torch.cat([full[m["coords"]] - m["fresh"], *m["diffs"]])
        s0 = float(diff.std()) / math.sqrt(2)  # std of one release's noise: σ_z / m₀
        fig.noise_entries = diff.numel()
        if m["banded"]:
            fig.strategy_norm = m["ratio_m"]
        if m["memory_ratio"] is not None:
            fig.memory_ratio = m["memory_ratio"]
            fig.memory_band = _z() / math.sqrt(len(m["coords"]))
        fig.noise_ratio = s0 / m["ratio_m"] / (m["sigma"] * C)
        fig.noise_band = _z() / math.sqrt(2 * fig.noise_entries) + m["band_m"]
        self._judge(fig, TOLERANCE[m["precision"]], C)
        return fig

    def _strategy_norm(self, stepper, coords, bands, **args) -> tuple[float, float]:
        """‖m‖/m₀ read from a chain of 2b released noise vectors (empty batches, fresh draws): each is
        z/m₀ − Σ_k (m_k/m₀)·(the k-th before it), so regressing it on the b − 1 before gives the ratios."""
        mem = copy.deepcopy(args["correlate"])
        chain = [self._replay(stepper, [], **{**args, "generator": _fresh(args["generator"], 1000 + t),
                                              "correlate": mem}, copy_memory=False)[coords]
                 for t in range(2 * bands)]
        ys = torch.cat([chain[t] for t in range(bands - 1, 2 * bands)])
        xs = torch.stack([torch.cat([chain[t - j] for t in range(bands - 1, 2 * bands)]) for j in range(1, bands)], 1)
        beta = torch.linalg.lstsq(xs, ys.unsqueeze(1)).solution.squeeze(1)
        return math.sqrt(1 + float((beta ** 2).sum())), _z() * math.sqrt(bands / len(ys))

    def _memory_ratio(self, stepper, coords, **args) -> float:
        e1 = self._replay(stepper, [], **{**args, "generator": _fresh(args["generator"], 5000)})[coords]
        e2 = self._replay(stepper, [], **{**args, "generator": _fresh(args["generator"], 5001)})[coords]
        return float((e1 + e2).std() / (e1 - e2).std())

    def _judge(self, fig: StepFigures, tol: float, C: float) -> None:
        where = f"private step {fig.step} ({fig.phase})"
        if fig.contributions and max(fig.contributions) > 1 + tol:
            fig.problems.append(f"{where}: an example contributes {max(fig.contributions):.4f}·C > C")
        if fig.errors and max(fig.errors) > tol:
            fig.problems.append(f"{where}: an example's contribution differs from its own gradient clipped at C by "
                                f"{max(fig.errors):.3g}·C")
        if abs(fig.noise_ratio - 1) > fig.noise_band:
            fig.problems.append(f"{where}: the noise is {fig.noise_ratio:.4f}·σC per unit of sensitivity, not σC "
                                f"(± {fig.noise_band:.2%})")
        if fig.memory_ratio is not None and abs(fig.memory_ratio - 1) > fig.memory_band:
            fig.problems.append(f"{where}: the phase's first noise owes {fig.memory_ratio:.3f}× its spread to an "
                                "earlier phase's noise memory")
        fig.passed = not fig.problems

    # --- the outcome ----------------------------------------------------------------------------------
    def result(self, *, phases, epsilon: float, delta: float, randomness: str) -> dict:
        """The verdicts and figures stored with the run's summary. ``phases``: the accountant's phases."""
        checks = self._step_checks() + [t for ph in self.phases for t in ph.tests()]
        eps, by, eps_check = self._epsilon(phases, epsilon=epsilon, delta=delta)
        checks.append(eps_check)
        ok = all(c["passed"] for c in checks)
        head = (f"mechanism checked at {len(self.figures)} step{'s' * (len(self.figures) != 1)}" if ok else
                "privacy check FAILED: " + "; ".join(f"{c['name']}" for c in checks if not c["passed"]))
        eps_text = (f"ε {eps:.3f} {'≤' if eps <= epsilon else '>'} {epsilon:g} recomputed independently"
                    if eps is not None else "ε not recomputed")
        return {"verdict": "passed" if ok else "failed", "line": f"{head} · {eps_text} · {randomness}",
                "checked_steps": len(self.figures), "checks": checks, "epsilon_recomputed": eps, "epsilon_by": by,
                "steps": [_rounded(asdict(f)) for f in self.figures], "seconds": round(self.seconds, 3),
                **({"from_private_step": self.first_step} if self.first_step else {})}

    def _step_checks(self) -> list[dict]:
        figs = self.figures
        if not figs:
            return [_verdict("sensitivity", False, "no private step was checked")]
        bad = [p for f in figs for p in f.problems]
        contrib = [c for f in figs for c in f.contributions]
        ratios = [f.noise_ratio for f in figs]
        sens = [p for p in bad if "contribut" in p]
        noise = [p for p in bad if p not in sens]
        return [
            _verdict("sensitivity", not sens, "; ".join(sens) or f"{len(contrib)} removed examples contribute at most "
                     f"{max(contrib, default=0):.4f}·C, each its own gradient clipped at C, divided by q·n"),
            _verdict("noise", not noise, "; ".join(noise) or "noise multiplier measured "
                     f"{min(ratios):.4f}–{max(ratios):.4f} × σ at {len(figs)} steps"
                     + ("; BandMF's ‖m‖/m₀ measured from released noise" if any(f.strategy_norm for f in figs)
                        else "")),
        ]

    def _epsilon(self, phases, *, epsilon: float, delta: float):
        """ε of the observed schedule by dp_accounting's PLD: σ as passed to the steps, the accounted rate (the
        rate test read it), the steps counted (a resumed run: the steps before it as its phases say)."""
        history, seen = [], list(self.phases)
        before = self.first_step or 0
        for ph in phases:
            steps = ph.steps
            if before >= steps:  # wholly before a resume: as accounted
                before -= steps
                history.append((ph.noise_multiplier, ph.sample_rate, steps, ph.bands))
                continue
            obs = seen.pop(0) if seen else None
            # the gradient's σ_g as the steps were given it (the smallest, were there several), with the count's σ_b
            sigma = min(obs.sigmas, default=ph.grad_noise_multiplier) if obs else ph.grad_noise_multiplier
            if ph.count_noise:
                sigma = 1 / math.sqrt(sigma ** -2 + ph.count_noise ** -2)
            history.append((sigma, ph.sample_rate, before + (len(obs.sizes) if obs else 0), ph.bands))
            before = 0
        t0 = time.perf_counter()
        try:  # a coarse grid first (its ε is pessimistic: it only falls on a finer one), the fine one if it must
            eps = independent_epsilon(history, delta, COARSE_GRID)
            if eps > epsilon:
                eps = independent_epsilon(history, delta)
        except ImportError:
            return None, None, _verdict("epsilon", True, "not recomputed: dp_accounting is not installed")
        self.seconds += time.perf_counter() - t0
        ok = eps <= epsilon * (1 + SLACK)
        return eps, "dp_accounting PLD", _verdict(
            "epsilon", ok, f"ε {eps:.4f} of {sum(h[2] for h in history)} observed private steps by dp_accounting's "
            f"PLD against the budget {epsilon:g}" + ("" if ok else " (over budget)"))


def _release(stepper, accounted: float) -> torch.Tensor:
    """What a step set as ``p.grad`` (its noisy mean), times the accounted q·n, as one flat float64 vector."""
    return torch.cat([p.grad.detach().reshape(-1).double() for p in stepper.params]) * accounted


_ENDING = ("dp_accounting.dp_event", "dp_accounting.pld.pld_privacy_accountant", "scipy.special")
_prefetching: threading.Thread | None = None


def prefetch() -> None:
    """Start importing what the check's end needs (`independent_epsilon`'s dp_accounting PLD accountant, the χ²
    band's scipy.special: ≈ 1 s on a CPU) in a daemon thread, while the run trains. A training step's kernels
    release the GIL, so the imports go on beside them and the check's end finds them done; they run under
    `dpviz.runtime.imports.IMPORTS`, as the other imports that threads share."""
    global _prefetching
    if _prefetching is None and not all(m in sys.modules for m in _ENDING):
        _prefetching = threading.Thread(target=_import_ending, name="dpviz-check-imports", daemon=True)
        _prefetching.start()


def _import_ending() -> None:
    import importlib

    from dpviz.runtime.imports import IMPORTS

    with IMPORTS:
        for name in _ENDING:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 — the check's end imports them itself, and says what failed there
                return


def independent_epsilon(history, delta: float, interval: float = 1e-4) -> float:
    """ε of (σ, q, T, b) entries composed by dp_accounting's PLD accountant (add-or-remove neighbours, its own
    grid of ``interval``): each T BandMF steps over b parts as ⌈T/b⌉ Poisson-sampled Gaussians at rate b·q."""
    from dp_accounting import dp_event
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    events = []
    for sigma, q, steps, bands in history:
        s, p, t = bandmf.dpsgd_equivalent(sigma=sigma, sample_rate=q, steps=steps, bands=bands)
        if t > 0:
            events.append(dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(p, dp_event.GaussianDpEvent(s)), t))
    acc = PLDAccountant(value_discretization_interval=interval)
    acc.compose(dp_event.ComposedDpEvent(events))
    return float(acc.get_epsilon(delta))


def own_clipped(stepper, x, y, rows: list[int], clip_norm, clipping) -> list[torch.Tensor]:
    """Each of ``rows``' own gradient clipped at C as the papers define it: plain autograd of its loss alone,
    through one forward of the batch (the batch's arithmetic, so a ReLU at its kink falls the same way)."""
    for p in stepper.params:
        p.grad = None
    scale = prec.loss_scale(stepper.precision)
    # Opacus's hooks take one backward per forward (they pop the forward's activations): a forward per row there
    shared = stepper.mode != "hooks"
    out = _forward(stepper, x) if shared else None
    owns = []
    for k, j in enumerate(rows):
        row_out = out if shared else _forward(stepper, x)
        loss = F.cross_entropy(row_out[j:j + 1].float(), y[j:j + 1], reduction="sum")
        grads = torch.autograd.grad(loss * scale, stepper.params, allow_unused=True,
                                    retain_graph=shared and k < len(rows) - 1)
        g = torch.cat([(gr if gr is not None else torch.zeros_like(p)).reshape(-1).double()
                       for gr, p in zip(grads, stepper.params)]) / scale
        norm = float(g.norm())
        c = clip_norm / (norm + AUTO_S_GAMMA) if clipping == "auto-s" else min(1.0, clip_norm / (norm + 1e-6))
        owns.append(g * c)
    for p in stepper.params:  # Opacus's hooks saw these backwards too
        if hasattr(p, "grad_sample"):
            p.grad_sample = None
    return owns


def _forward(stepper, x: torch.Tensor) -> torch.Tensor:
    with prec.autocast(stepper.precision, x.device.type):
        return stepper.module(x)


def _fresh(like: torch.Generator, i: int) -> torch.Generator:
    """A generator on ``like``'s device, seeded apart from any run's (the replays' own draws)."""
    return torch.Generator(device=like.device).manual_seed(0x5EED_0000 + i)


def _coords(numel: int, rng) -> torch.Tensor:
    """The coordinates the noise figures read: all, or a fixed random `MAX_COORDS` of a large model's."""
    if numel <= MAX_COORDS:
        return torch.arange(numel)
    g = torch.Generator().manual_seed(rng.randrange(2**62))
    return torch.randperm(numel, generator=g)[:MAX_COORDS]


def _rng_states():
    return torch.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None)


def _set_rng_states(state) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def _rounded(d: dict) -> dict:
    return {k: (round(v, 6) if isinstance(v, float) else [round(x, 6) for x in v] if isinstance(v, list)
                and v and isinstance(v[0], float) else v) for k, v in d.items()}
