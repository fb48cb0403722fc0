"""The training loop: phases of Poisson-sampled steps, recorded step by step.

One phase loop serves every strategy: the run's `Strategy` (from the registry)
says what each phase trains and on which data (`enter_phase`), may end a phase
early (`before_step`), reads a step's gradients (`after_step`), finishes a phase
(`leave_phase`), says which weights a checkpoint stores and what the summary
adds. This module names no strategy.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import numpy as np
import torch

from dpviz import strategies
from dpviz.training import capture, distributed
from dpviz.training import prepare
from dpviz.training import resume
from dpviz.training import shapes
from dpviz.training.prepare import Cancelled, Prepared
from dpviz.privacy import accounting, bandmf, check, dpsgd, randomness
from dpviz.strategies.base import PhasePlan, PhaseSetup

FLUSH_EVERY = 10  # steps between metric writes (the dashboard reads them live)
AUTO_CHECKPOINTS = 10  # checkpoint_every = 0: about this many feature checkpoints after the one at step 0


def checkpoint_steps(checkpoint_every: int, total_steps: int, auto: bool = True) -> int | frozenset:
    """When a run stores feature checkpoints besides step 0 and the end: every that many steps (an int),
    or at these steps (a set; empty: the start and the end only).

    ``checkpoint_every`` > 0 is the interval; 0 is automatic: steps round(i·T/10), i = 1 … 10, i.e. 11
    checkpoints with step 0 for a run of T ≥ 10 steps (T + 1 below), or the start and the end only where
    ``auto`` is False (a proxy search's trials, which nobody looks at); < 0 is the start and the end only."""
    if checkpoint_every > 0:
        return checkpoint_every
    if checkpoint_every == 0 and auto:
        return frozenset(round(i * total_steps / AUTO_CHECKPOINTS) for i in range(1, AUTO_CHECKPOINTS + 1))
    return frozenset()


def _due(when: int | frozenset, step: int) -> bool:
    return step % when == 0 if isinstance(when, int) else step in when


class Recorder:
    """Buffers (step, name, value) rows and writes them to the store in batches."""

    def __init__(self, store, run_id: str):
        self.store, self.run_id, self.rows = store, run_id, []

    def add(self, step: int, **values) -> None:
        self.rows += [(step, k, None if v is None else float(v)) for k, v in values.items()]

    def flush(self, step: int | None = None) -> None:
        if self.store is None:  # an unstored run (an audit's): its metrics are not kept
            self.rows = []
            return
        self.store.log_metrics(self.run_id, self.rows)
        self.rows = []
        if step is not None:
            self.store.update_run(self.run_id, step=step)


class Loop:
    """State of one run while it trains, and the helpers strategies call from their hooks."""

    def __init__(self, prep: Prepared, store, run_id: str, progress: Callable | None,
                 cancel: threading.Event | None, on_checkpoint: Callable | None = None, auto_checkpoints: bool = True):
        self.prep, self.cfg, self.store, self.run_id = prep, prep.cfg, store, run_id
        self.strategy = strategies.get(self.cfg.strategy)(self.cfg)
        self.on_checkpoint, self.progress, self.cancel = on_checkpoint, progress, cancel
        self.dev = prep.device
        self.model = prep.model.to(self.dev)
        self.world = distributed.current()  # None: one process
        if self.world is not None:
            self.world.broadcast(self.model)
        b = prep.bundle
        self.x, self.y = b.x_train.to(self.dev), b.y_train.to(self.dev)  # (n, C, H, W), (n,)
        self.ev_x, self.ev_y = b.eval_subset(self.cfg.eval_subset)
        self.rec = Recorder(store, run_id)
        # the private streams (`dpviz.privacy.randomness`): from the seed, or from OS entropy kept only here
        seeds = randomness.seeds(randomness=self.cfg.randomness, seed=self.cfg.seed, world=self.world)
        self.gen_sample = torch.Generator().manual_seed(seeds["sampling"])
        self.gen_noise = torch.Generator(device=self.dev).manual_seed(seeds["noise"])
        # "plan": every phase's (name, steps), so a progress reader prices the phases ahead (`dpviz.jobs.eta`)
        self.step, self.last = 0, {"plan": [(p.name, p.steps) for p in prep.plans]}
        self.when = checkpoint_steps(self.cfg.checkpoint_every, prep.total_steps, auto_checkpoints)
        self.private_steps = 0  # steps that touched private data: the ε curve is indexed by these
        self._t: float | None = None  # end of the previous step's bookkeeping (None: phase start)
        self.first_step_done: float | None = None  # when the current phase's first step ended (`phase_timing`)
        self.overflows = 0  # fp16: examples with an overflow, set to 0 in their clipped contribution
        self.at: tuple | None = None  # (phase index, next step in it, its optimizer): where a resume goes on
        self._weights_base: tuple[int, dict] | None = None  # the first checkpoint's weights, kept in full
        self.count = shapes.shape_count(self.cfg.batch_shapes, self.dev)  # fixed batch sizes a phase (0: drawn)
        # read-only passes in padded chunks of the private phase's largest size (0: unpadded), reusing its plans
        self.fixed = shapes.pass_chunk(-(-len(self.y) // (self.world.size if self.world else 1)),
                                       prep.sample_rate, self.count)
        self.padder: shapes.Padder | None = None  # the current phase's (`run_phase`)
        # BandMF (`dpviz.privacy.bandmf`): b fixed parts of the private records, sampled cyclically, and each
        # private phase's noise memory; b = 1 is DP-SGD (no parts, no memory: the very same draws). A validated
        # config has bands 1 unless its mechanism is banded (bandmf, bandmf-momentum).
        self.bands = self.cfg.bands
        self.parts = (bandmf.parts(len(self.y), self.bands, seeds["parts"], self.cfg.parts).to(self.dev)
                      if self.bands > 1 else None)
        self.noise: bandmf.BandedNoise | None = None
        self.check: check.PrivacyCheck | None = None  # the run's privacy check (`enable_check`)
        self.captured: capture.CapturedSteps | None = None  # the current private phase's graphs (`_capture`)
        self.optimized = False  # whether the step just taken also updated the parameters (a captured SGD step)
        self.capture_notes: list[dict] = []  # each captured phase's figures, and why a CUDA run's steps were not

    def enable_check(self) -> None:
        """Carry the privacy check (`dpviz.privacy.check`) through this run's private steps."""
        starts, at = [], 0
        for p in self.prep.phases:
            starts.append(at)
            at += p.steps
        seed = self.cfg.seed if self.cfg.randomness == "seeded" else randomness.entropy_seed()
        if self.world is not None:  # every rank replays the same steps (their collectives pair up)
            seed = self.world.share(seed)
        self.check = check.PrivacyCheck(steps=self.cfg.privacy_check, phase_starts=starts, total=at, seed=seed,
                                        rank=self.world.rank if self.world is not None else 0)
        check.prefetch()  # the check's end imports dp_accounting: done beside the training steps instead

    # --- helpers for strategies ----------------------------------------------
    def set_trainable(self, trainable: str) -> None:
        prepare.set_trainable(self.model, trainable)

    def head_features(self) -> torch.Tensor:
        """Penultimate features (n, d) of the private training set under the frozen backbone."""
        return prepare.backbone_features(self.model, self.x, self.dev, fixed=self.fixed,
                                         on_chunk=self._pass("features of the training set"))

    def _pass(self, what: str):
        """``on_chunk`` of a pass over data before or between steps: reports it to ``progress`` as ``last["pass"]``
        = [what, rows done, rows in all, seconds so far], so a page counts it (a real backbone's pass over
        thousands of texts takes minutes on a CPU)."""
        if self.progress is None:
            return None
        t0 = time.perf_counter()

        def report(done: int, total: int) -> None:
            self.progress(self.step, self.prep.total_steps,
                          {**self.last, "pass": [what, done, total, time.perf_counter() - t0]})
        return report

    def setup(self, *, module, inputs=None, labels=None, sample_rate: float | None = None,
              private: bool | None = None, update: bool = True, optimizer=None) -> PhaseSetup:
        """A phase on the private training set (DP when the run is private) unless told otherwise."""
        return PhaseSetup(module=module, inputs=self.x if inputs is None else inputs,
                          labels=self.y if labels is None else labels,
                          sample_rate=self.prep.sample_rate if sample_rate is None else sample_rate,
                          private=self.cfg.private if private is None else private, update=update,
                          optimizer=optimizer)

    def event(self, kind: str, message: str) -> None:
        if self.store is not None:
            self.store.event(self.run_id, kind, message)

    def update_run(self, **fields) -> None:
        """Update the stored run's row (e.g. a schedule that changed its total)."""
        if self.store is not None:
            self.store.update_run(self.run_id, **fields)

    def save_mask(self, mask: dict) -> None:
        if self.store is not None:
            self.store.save_mask(self.run_id, mask)

    def evaluate(self) -> None:
        if self.world is not None and self.world.rank:  # rank 0 evaluates and records; no collective here
            return
        # the head on the test split's features: computed again only when the backbone changed, so a run
        # whose backbone is frozen (LP) forwards the test split once, not at every evaluation
        acc, loss = prepare.evaluate(self.model.head, self._test_features(), self.prep.bundle.y_test, self.dev,
                                     fixed=self.fixed)
        self.last.update(test_accuracy=acc, test_loss=loss)
        self.rec.add(self.step, test_accuracy=acc, test_loss=loss)
        self.rec.flush(self.step)

    def _backbone_state(self) -> tuple:
        """Changes whenever a backbone weight does (each in-place update bumps a parameter's version)."""
        return tuple((id(p), p._version) for p in self.model.backbone.parameters())

    def _test_features(self) -> torch.Tensor:
        """Penultimate features (M, d) of the test split, cached while the backbone's weights are unchanged."""
        if getattr(self, "_test_key", None) != self._backbone_state():
            self._test_feats = prepare.backbone_features(self.model, self.prep.bundle.x_test, self.dev,
                                                         fixed=self.fixed, on_chunk=self._pass("test split"))
            self._test_key = self._backbone_state()
        return self._test_feats

    def _layer_features(self) -> dict:
        """Per-layer features of the evaluation subset, cached as `_test_features` is (LP checkpoints)."""
        if getattr(self, "_layer_key", None) != self._backbone_state():
            self._layer_feats = prepare.layer_features(self.model, self.ev_x, self.ev_y, self.dev, fixed=self.fixed,
                                                       on_chunk=self._pass("features of the evaluation subset"))
            self._layer_key = self._backbone_state()
        return dict(self._layer_feats)

    def checkpoint(self) -> None:
        if self.store is None:  # nothing to keep them in, and nothing reads them
            return
        feats = self._layer_features()
        texts = self.prep.bundle.eval_texts(self.cfg.eval_subset)
        if texts is not None:  # text: the embedding maps' hover (private data, as the features are)
            feats["texts"] = np.array(texts, dtype=str)
        if self.prep.bundle.classes:
            feats["class_names"] = np.array(self.prep.bundle.classes, dtype=str)
        self.store.save_features(self.run_id, self.step, feats)
        if self.cfg.keep_weights == "checkpoints":
            state = self.strategy.state_dict(self.model)
            self.store.save_weights(self.run_id, self.step, state, base=self._weights_base)
            if self._weights_base is None:  # later checkpoints store what changed since (a frozen backbone once)
                self._weights_base = (self.step, resume.cpu_once(state))
        if self.at is not None and not self._at_end() and (snap := resume.snapshot(self)) is not None:
            self.store.save_resume(self.run_id, snap)
        if self.on_checkpoint:
            self.on_checkpoint(self.run_id, self.step)

    # --- the phase loop ---------------------------------------------------------
    def run_phase(self, plan: PhasePlan, phase: accounting.Phase | None, index: int = 0, start: int = 0,
                  state: dict | None = None) -> None:
        """Run phase ``index`` from its step ``start``; ``phase`` is its accountant entry (None for a public
        phase); ``state``: the snapshot a resumed run goes on from (`dpviz.training.resume`), in this phase."""
        s = self.strategy.enter_phase(self, plan)
        stepper = dpsgd.Stepper(s.module, self.cfg.grad_sample_mode, self.cfg.precision) if s.private else s.module
        if s.update and s.optimizer is None:
            s.optimizer = prepare.make_optimizer([p for p in s.module.parameters() if p.requires_grad],
                                                self.cfg, plan.lr)
        if state is not None:
            resume.load_phase(self, state, s.optimizer)
        self.padder = self._padder(s, stepper)
        # a new phase is a new BandMF mechanism: its noise memory starts empty (its parameters may differ)
        beta = bandmf.momentum(self.cfg.mechanism)  # the coefficients' β: 0 for bandmf, SGD's for bandmf-momentum
        self.noise = bandmf.BandedNoise(self.bands, beta) if s.private and self.bands > 1 else None
        if state is not None and self.noise is not None and state.get("noise_memory"):
            self.noise.load_state_dict(state["noise_memory"], self.dev)
        if self.check is not None and phase is not None and s.private:
            self.check.enter_phase(name=plan.name, n=len(s.labels), q=phase.sample_rate, bands=self.bands,
                                   count_noise=phase.count_noise)
        if getattr(self.prep.canaries, "virtual", False):  # an audit's white-box canaries follow the mechanism
            self.prep.canaries.enter_phase(self.bands if self.noise is not None else 1, beta)
        self.captured = self._capture(s, stepper, plan, phase) if s.private and phase is not None else None
        self._t = time.perf_counter()
        try:
            for k in range(start, plan.steps):
                if not self._agreed(self.strategy.before_step(self, plan, k)):
                    break
                idx = self._sample(len(s.labels), s.sample_rate, k if self.noise is not None else None)
                if self.check is not None and phase is not None and s.private:
                    self.check.sampled(idx, phase.grad_noise_multiplier)
                s.module.zero_grad(set_to_none=True)
                st = self._step(stepper, s, idx, phase)
                self.strategy.after_step(self, plan, s)
                if s.update and not self.optimized:
                    s.optimizer.step()
                self.step += 1
                if self.world is not None and self.step % distributed.CHECK_EVERY == 0:
                    self.world.check(self.model, self.step)
                self.private_steps += not plan.public
                self.at = (index, k + 1, s.optimizer)
                self.record(st, plan.lr, final=k == plan.steps - 1)
        finally:
            if s.private:
                self.overflows += stepper.overflows
                stepper.close()
            if self.captured is not None:
                self._captured_phase(plan.name)
        self.strategy.leave_phase(self, plan, s)

    def _capture(self, s: PhaseSetup, stepper, plan: PhasePlan, phase) -> capture.CapturedSteps | None:
        """The phase's captured steps (`dpviz.training.capture`), or None; a CUDA run says once why not."""
        why = capture.why_eager(device=self.dev, stepper=stepper, optimizer=s.optimizer if s.update else None,
                                strategy=self.strategy, padded=self.padder is not None, canaries=self.prep.canaries,
                                world=self.world, precision=self.cfg.precision)
        if why is None:
            return capture.CapturedSteps(stepper, s.optimizer, self.gen_noise, clip_norm=phase.clip_norm,
                                         noise_multiplier=phase.grad_noise_multiplier,
                                         expected_batch=phase.sample_rate * len(s.labels), clipping=self.cfg.clipping,
                                         correlate=self.noise, count_noise=phase.count_noise)
        if torch.device(self.dev).type == "cuda" and not self.capture_notes:
            self.capture_notes.append({"phase": plan.name, "eager": why})
            self.event("capture", f"{plan.name}: steps not captured: {why}")
        return None

    def _captured_phase(self, name: str) -> None:
        """A captured phase's figures into the summary; its graphs freed; a fall back to eager said."""
        note = {"phase": name, **self.captured.summary()}
        self.capture_notes.append(note)
        if "eager" in note:
            self.event("capture", f"{name}: eager steps: {note['eager']}")
        self.captured = None

    def _at_end(self) -> bool:
        """Whether the last phase has taken its last step (a snapshot there would be dropped at once)."""
        phase, k, _ = self.at
        return phase == len(self.prep.plans) - 1 and k >= self.prep.plans[phase].steps

    def _agreed(self, go: bool) -> bool:
        """A strategy's decision to go on (continual's switch), rank 0's on every rank of a distributed run."""
        if self.world is None:
            return go
        flag = torch.tensor([int(go)])
        torch.distributed.broadcast(flag, 0)
        return bool(flag.item())

    def _sample(self, n: int, q: float, k: int | None = None) -> torch.Tensor:
        """Indices of a Poisson batch (each example with probability q); stops here if cancelled. ``k``: a BandMF
        phase's step, whose batch is part k mod b of the records, each with probability b·q (cyclic Poisson)."""
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled()
        u = torch.rand(n, generator=self.gen_sample)
        if k is None:
            return (u < q).nonzero().squeeze(1).to(self.dev)
        chosen = (u.to(self.dev) < self.bands * q) & (self.parts == k % self.bands)
        return chosen.nonzero().squeeze(1)

    def _padder(self, s: PhaseSetup, stepper) -> shapes.Padder | None:
        """The phase's fixed physical batch sizes (`dpviz.training.shapes`; None: the drawn sizes as they are).
        A distributed run's rank pads its shard: about n/W records sampled at q."""
        if not self.count:
            return None
        ranks = self.world.size if self.world is not None and getattr(stepper, "mode", None) != "head" else 1
        return shapes.padder(-(-len(s.labels) // ranks), s.sample_rate, self.count)

    def _step(self, stepper, s: PhaseSetup, idx: torch.Tensor, phase) -> dpsgd.StepStats:
        """Set the gradients of one step on batch ``idx``: DP-SGD, or a plain step."""
        batch, reduce = len(idx), None
        if self.world is not None and getattr(stepper, "mode", None) != "head":  # LP on cached features:
            idx, reduce = self.world.shard(idx), self.world.all_reduce  # every rank steps alike, unsharded
        if self.padder is None:
            x, y, mask = s.inputs[idx], s.labels[idx], None
        else:  # padded to the phase's sizes; a batch above the largest is split, its parts listed
            parts = self.padder.split(idx)
            x, y, mask = ([s.inputs[i] for i, _ in parts], [s.labels[i] for i, _ in parts], [m for _, m in parts])
            if len(parts) == 1:
                x, y, mask = x[0], y[0], mask[0]
        can = self.prep.canaries if phase is not None else None  # canaries are private records only
        # white-box canaries are records of n without an image: they count in the expected batch q·n
        expected = phase.sample_rate * (len(s.labels) + (can.virtual_records if can else 0)) if phase else 0
        self.optimized = False
        if not s.private:
            st = dpsgd.plain_step(stepper, x, y, self.cfg.precision, batch=batch, reduce=reduce, mask=mask)
            if can is not None and can.virtual:  # ε = ∞: canaries enter unclipped and noiseless
                params = [p for p in stepper.parameters() if p.requires_grad]
                can.add(params, clip_norm=None, scale=1 / expected)
                can.observe(params, scale=expected, noise_std=0.0, clip_norm=None)
            return st
        if self.check is not None:  # replays this step on copies first, if it is one the check measures
            self.check.before_step(self.private_steps, stepper, x, y, mask, clip_norm=phase.clip_norm,
                                   sigma=phase.grad_noise_multiplier, accounted_batch=expected,
                                   generator=self.gen_noise, clipping=self.cfg.clipping, reduce=reduce,
                                   correlate=self.noise, precision=self.cfg.precision)
        if self.captured is not None and self.captured.takes(x, y):  # the same step, replayed from its graph
            st, self.optimized = self.captured.step(x, y, mask), self.captured.optimizes
        else:
            st = dpsgd.private_step(stepper, x, y, clip_norm=phase.clip_norm,
                                    noise_multiplier=phase.grad_noise_multiplier, expected_batch=expected,
                                    generator=self.gen_noise, clipping=self.cfg.clipping,
                                    canaries=can if can is not None and can.virtual else None, reduce=reduce,
                                    mask=mask, **({"correlate": self.noise} if self.noise is not None else {}),
                                    **({"count_noise": phase.count_noise} if phase.count_noise else {}))
        if self.check is not None:  # a checked step's figures read its own release, before any optimizer uses it
            self.check.after_step(self.private_steps, stepper)
        if self.check is not None and st.clip_fraction_dp is not None:  # the count's noise, read off its release
            self.check.count_released(st.clip_fraction_dp * expected - round(st.clip_fraction * st.batch_size))
        return st

    def record(self, st: dpsgd.StepStats, lr: float, final: bool) -> None:
        eps = accounting.spent_at(self.prep.eps_curve, self.private_steps) if self.cfg.private else None
        self.last.update(loss=st.loss, epsilon=eps)
        now = time.perf_counter()  # step time: since the previous step's bookkeeping ended
        step_ms = (now - self._t) * 1e3 if self._t is not None else None
        self.rec.add(self.step, loss=st.loss, train_accuracy=st.train_accuracy, epsilon=eps,
                     clip_fraction=st.clip_fraction, grad_norm=st.grad_norm, lr=lr, batch_size=st.batch_size,
                     step_ms=step_ms, **({"clip_fraction_dp": st.clip_fraction_dp} if st.clip_fraction_dp is not None
                                         else {}))
        if final or self.step % self.cfg.eval_every == 0:
            self.evaluate()
        elif self.step % FLUSH_EVERY == 0:
            self.rec.flush(self.step)
        if _due(self.when, self.step):
            self.checkpoint()
        if self.progress:
            self.progress(self.step, self.prep.total_steps, dict(self.last))
        self._t = time.perf_counter()
        if self.first_step_done is None:
            self.first_step_done = self._t


def train(prep: Prepared, *, store, run_id: str, progress: Callable | None = None,
          cancel: threading.Event | None = None, on_checkpoint: Callable | None = None,
          auto_checkpoints: bool = True, state: dict | None = None, check_privacy: bool | None = None) -> dict:
    """Train all phases of ``prep`` and return the run's summary.

    ``state``: a stopped run's snapshot (`dpviz.training.resume`): training goes on from it instead of step 0.

    ``store``: where metrics, events, checkpoints and the final model go; None trains an unstored run
    (an audit's: only the summary and the trained ``prep.model`` remain).
    ``on_checkpoint(run_id, step)`` is called after each feature checkpoint is
    stored (the job manager queues the background analyses there). ``auto_checkpoints``: False keeps
    ``checkpoint_every = 0`` to the start and the end (`checkpoint_steps`). ``check_privacy``: whether the run
    carries its privacy check (`dpviz.privacy.check`; None: a stored or distributed private run with
    ``privacy_check`` > 0; an audit's unstored runs leave it out).
    """
    t0 = time.perf_counter()
    loop = Loop(prep, store, run_id, progress, cancel, on_checkpoint, auto_checkpoints)
    if check_privacy is None:  # every rank of a distributed run alike (the check's replays hold collectives)
        check_privacy = store is not None or loop.world is not None
    if check_privacy and prep.cfg.private and prep.cfg.privacy_check > 0:
        loop.enable_check()
    if state is None:
        loop.evaluate()
        loop.checkpoint()
    else:  # a stopped run goes on (`dpviz.training.resume`)
        resume.restore(loop, state)
        loop._weights_base = resume.weights_base(store, run_id) if store is not None else None
    phases = iter(prep.phases)  # the accountant's phases: the private plans, in order
    timing = []  # each phase's wall time here, evaluations included: how a later run's time left is priced
    for i, plan in enumerate(prep.plans):
        phase = None if plan.public else next(phases)
        if state is not None and i < state["phase"]:
            continue
        here = state if state is not None and i == state["phase"] else None
        loop.event("phase", f"{plan.name}: {plan.steps} steps" + (f", from step {here['k']}" if here else ""))
        began, first, loop.first_step_done = time.perf_counter(), loop.step, None
        loop.run_phase(plan, phase, i, here["k"] if here else 0, here)
        timing.append(phase_timing(plan.name, loop.step - first, began, loop.first_step_done))
    if not _due(loop.when, loop.step):
        loop.checkpoint()
    if store is not None and prep.cfg.keep_weights != "none":
        store.save_model(run_id, loop.strategy.state_dict(loop.model), prep.cfg.to_dict())  # it takes them to the CPU
    extra = {**loop.strategy.summary(loop), **holdout_count(loop), "phase_timing": timing}
    if loop.cfg.precision == "fp16":  # examples whose overflowed entries were set to 0 (`privacy.precision`)
        extra = {**extra, "fp16_overflows": loop.overflows}
    if prep.bundle.skipped:  # an image folder's entries that are no images: left out, and said so
        extra = {**extra, "skipped_files": prep.bundle.skipped}
    if loop.check is not None:
        extra = {**extra, "privacy_check": privacy_check(loop)}
    if loop.capture_notes:  # a CUDA run's captured phases (`dpviz.training.capture`), or why it had none
        extra = {**extra, "capture": loop.capture_notes}
    if loop._t is not None:  # from the last step to here: what a time left adds after the last step
        timing.append({"name": "wrap-up", "steps": 0, "seconds": round(time.perf_counter() - loop._t, 3)})
    return summarize(prep, run_id, loop.last, time.perf_counter() - t0, extra=extra)


def phase_timing(name: str, steps: int, began: float, first_done: float | None) -> dict:
    """A phase's wall time as trained here: ``start_s`` up to the end of its first step (a feature pass, the
    privacy check's replays), then ``seconds`` for its other ``steps`` − 1, evaluations and checkpoints included."""
    first_done = first_done if first_done is not None else time.perf_counter()
    return {"name": name, "steps": steps, "start_s": round(first_done - began, 3),
            "seconds": round(time.perf_counter() - first_done, 3)}


def privacy_check(loop: Loop) -> dict:
    """The privacy check's outcome (`dpviz.privacy.check`), said as an event too when it failed."""
    cfg = loop.cfg
    out = loop.check.result(phases=loop.prep.phases, epsilon=cfg.epsilon, delta=cfg.delta, randomness=cfg.randomness)
    if out["verdict"] != "passed":
        loop.event("privacy-check", out["line"])
    return out


def holdout_count(loop: Loop) -> dict:
    """Correct predictions of the final model on the held-out training examples (`RunConfig.holdout`), the
    exact count a private search noises before it compares trials; {} when nothing is held out."""
    b = loop.prep.bundle
    if b.y_holdout is None or (loop.world is not None and loop.world.rank):
        return {}
    acc, _ = prepare.evaluate(loop.model, b.x_holdout, b.y_holdout, loop.dev)
    return {"holdout_correct": round(acc * len(b.y_holdout)), "holdout_size": len(b.y_holdout)}


def summarize(prep: Prepared, run_id: str, last: dict, wall: float, extra: dict | None = None) -> dict:
    """The JSON summary: enough to recompute ε with any accountant from ``phases``."""
    cfg = prep.cfg
    spent, approx = None, {}
    if cfg.private:
        bound = accounting.bound_by(cfg.accountant)
        # the curve's last point is this very composition (`epsilon_curve` always includes the end)
        spent = prep.eps_curve.get(sum(p.steps for p in prep.phases))
        if spent is None:
            spent = accounting.epsilon(phases=prep.phases, delta=cfg.delta, accountant=bound)
        if spent > cfg.epsilon + 1e-9:  # calibration guarantees this never happens
            raise RuntimeError(f"privacy accounting error: spent {spent} > target {cfg.epsilon}")
        if bound != cfg.accountant:  # GDP: its approximate figure beside the bound
            approx = {"epsilon_spent_bound_by": bound, f"epsilon_{cfg.accountant}_approx":
                      accounting.epsilon(phases=prep.phases, delta=cfg.delta, accountant=cfg.accountant)}
    return {
        "run_id": run_id, "config": cfg.to_dict(), "config_hash": cfg.hash(),
        "strategy": cfg.strategy, "dataset": cfg.dataset, "backbone": cfg.backbone,
        "test_accuracy": last.get("test_accuracy"), "test_loss": last.get("test_loss"),
        "epsilon": cfg.epsilon if cfg.private else None, "epsilon_spent": spent, **approx,
        "delta": cfg.delta, "accountant": cfg.accountant, "private": cfg.private,
        "randomness": cfg.randomness, "neighbours": bandmf.neighbours(bands=cfg.bands, parts=cfg.parts),
        "phases": [p.to_dict() for p in prep.phases], "total_steps": prep.total_steps,
        **(extra or {}), "n_train": prep.bundle.n, "device": prep.device, "wall_time_s": round(wall, 3),
    }
