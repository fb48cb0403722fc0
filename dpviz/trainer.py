"""The training loop: phases of Poisson-sampled DP-SGD, recorded step by step."""

from __future__ import annotations

import json
import threading
import time
from typing import Callable

import torch

from . import engine, sparse
from .engine import Cancelled, Prepared
from .privacy import accounting, dpsgd
from .store import write_atomic

FLUSH_EVERY = 10  # steps between metric writes (the dashboard reads them live)
SWITCH_CHECK_EVERY = 10  # public steps between decelerator checks of the automatic switch


class Recorder:
    """Buffers (step, name, value) rows and writes them to the store in batches."""

    def __init__(self, store, run_id: str):
        self.store, self.run_id, self.rows = store, run_id, []

    def add(self, step: int, **values) -> None:
        self.rows += [(step, k, None if v is None else float(v)) for k, v in values.items()]

    def flush(self, step: int | None = None) -> None:
        self.store.log_metrics(self.run_id, self.rows)
        self.rows = []
        if step is not None:
            self.store.update_run(self.run_id, step=step)


class Loop:
    """State of one run while it trains."""

    def __init__(self, prep: Prepared, store, run_id: str, progress: Callable | None,
                 cancel: threading.Event | None, on_checkpoint: Callable | None = None):
        self.prep, self.cfg, self.store, self.run_id = prep, prep.cfg, store, run_id
        self.on_checkpoint = on_checkpoint
        self.progress, self.cancel = progress, cancel
        self.dev = prep.device
        self.model = prep.model.to(self.dev)
        b = prep.bundle
        self.x, self.y = b.x_train.to(self.dev), b.y_train.to(self.dev)
        self.ev_x, self.ev_y = b.eval_subset(self.cfg.eval_subset)
        self.rec = Recorder(store, run_id)
        self.gen_sample = torch.Generator().manual_seed(self.cfg.seed)
        self.gen_noise = torch.Generator(device=self.dev).manual_seed(self.cfg.seed + 1)
        self.step, self.last = 0, {}
        self.private_steps = 0  # steps that touched private data: the ε curve is indexed by these
        self.carried = None  # the public phase's optimizer, continued into the private phase
        self.switch: dict | None = None
        self.scores = None  # sparse: row scores from the selection epoch's noisy releases
        self.extra: dict = {}  # strategy facts for the summary (sparse: mask statistics)
        self._t: float | None = None  # end of the previous step's bookkeeping (None: phase start)

    def evaluate(self) -> None:
        acc, loss = engine.evaluate(self.model, self.prep.bundle.x_test, self.prep.bundle.y_test, self.dev)
        self.last.update(test_accuracy=acc, test_loss=loss)
        self.rec.add(self.step, test_accuracy=acc, test_loss=loss)
        self.rec.flush(self.step)

    def checkpoint(self) -> None:
        feats = engine.layer_features(self.model, self.ev_x, self.ev_y, self.dev)
        self.store.save_features(self.run_id, self.step, feats)
        self.store.save_weights(self.run_id, self.step, sparse.folded_state_dict(self.model))
        if self.on_checkpoint:
            self.on_checkpoint(self.run_id, self.step)

    def _inputs(self, trainable: str) -> tuple[torch.nn.Module, torch.Tensor]:
        if trainable == "head":  # frozen backbone: features once, not a forward per step
            return self.model.head, engine.backbone_features(self.model, self.x, self.dev)
        return self.model, self.x

    def run_phase(self, plan, phase) -> None:
        if plan.trainable == "select":
            return self.run_selection(plan, phase)
        if plan.trainable == "mask":
            self.enter_mask()
        else:
            engine.set_trainable(self.model, plan.trainable)
        module, inputs = self._inputs(plan.trainable)
        private = self.cfg.private
        stepper = dpsgd.Stepper(module, self.cfg.grad_sample_mode) if private else module
        opt = self._optimizer(module, plan.lr)
        self._t = time.perf_counter()
        for k in range(plan.steps):
            idx = self._sample(len(self.y), phase.sample_rate)
            opt.zero_grad(set_to_none=True)
            st = self._step(stepper, inputs, idx, phase)
            opt.step()
            self.step += 1
            self.private_steps += 1
            self.record(st, plan.lr, final=k == plan.steps - 1)
        if private:
            stepper.close()
        if plan.trainable == "mask":
            sparse.fold(self.model.backbone)  # W₀ + scatter(ΔW) back into plain layers

    def _sample(self, n: int, q: float) -> torch.Tensor:
        """Indices of a Poisson batch (each example with probability q); stops here if cancelled."""
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled()
        return (torch.rand(n, generator=self.gen_sample) < q).nonzero().squeeze(1).to(self.dev)

    def _step(self, stepper, inputs: torch.Tensor, idx: torch.Tensor, phase) -> dpsgd.StepStats:
        """Set the gradients of one step on private batch ``idx``: DP-SGD, or plain without privacy."""
        if not self.cfg.private:
            return dpsgd.plain_step(stepper, inputs[idx], self.y[idx])
        return dpsgd.private_step(stepper, inputs[idx], self.y[idx], clip_norm=phase.clip_norm,
                                  noise_multiplier=phase.noise_multiplier, expected_batch=phase.sample_rate * len(self.y),
                                  generator=self.gen_noise, clipping=self.cfg.clipping)

    def run_selection(self, plan, phase) -> None:
        """SPARTA's selection epoch: ordinary DP-SGD releases g̃ of every weight, no update;
        v = Σ |g̃| per row layer. Only these noisy releases reach the row choice."""
        engine.set_trainable(self.model, "all")
        layers = sparse.row_layers(self.model.backbone)
        v = {n: torch.zeros_like(m.weight) for n, m in layers.items()}
        private = self.cfg.private
        stepper = dpsgd.Stepper(self.model, self.cfg.grad_sample_mode) if private else self.model
        self._t = time.perf_counter()
        for k in range(plan.steps):
            idx = self._sample(len(self.y), phase.sample_rate)
            self.model.zero_grad(set_to_none=True)
            st = self._step(stepper, self.x, idx, phase)
            for name, m in layers.items():
                v[name] += m.weight.grad.abs()
            self.step += 1
            self.private_steps += 1
            self.record(st, 0.0, final=k == plan.steps - 1)
        if private:
            stepper.close()
        self.model.zero_grad(set_to_none=True)
        self.scores = sparse.row_scores(v)

    def enter_mask(self) -> None:
        """Choose the rows (selection), wrap the masked layers, record the mask."""
        cfg, bb = self.cfg, self.model.backbone
        if cfg.selection == "sparta":
            mask = sparse.select_rows(self.scores, cfg.sparsity)
        elif cfg.selection == "magnitude":  # the backbone still holds the public weights W₀ here
            mask = sparse.magnitude_mask(bb, cfg.sparsity)
        elif cfg.selection == "random":
            mask = sparse.random_mask(bb, cfg.sparsity, cfg.seed)
        else:
            mask = {}
        rows_per_layer = {n: int(m.weight.shape[0]) for n, m in sparse.row_layers(bb).items()}  # before wrapping
        fractions = {n: len(rows) / rows_per_layer[n] for n, rows in mask.items()}
        sparse.apply_mask(bb, mask)
        sparse.set_masked_trainable(self.model, cfg.selection)
        self.extra = {"selection": cfg.selection, "sparsity": cfg.sparsity,
                      "trainable_fraction": sparse.trainable_fraction(self.model), "mask_layers": fractions}
        write_atomic(self.store.run_dir(self.run_id) / "mask.json",
                     lambda p: open(p, "w").write(json.dumps({
                         "step": self.step, "selection": cfg.selection, "sparsity": cfg.sparsity, "mask": mask,
                         "rows_per_layer": rows_per_layer})))
        self.store.event(self.run_id, "mask", f"{cfg.selection}: {self.extra['trainable_fraction']:.4f} of the "
                         f"backbone's weights train")

    def _optimizer(self, module: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
        """A fresh optimizer per phase, except after a public phase: Adam(W) keeps its second moment
        and restarts its first (seed 004: stale public momentum would point away from the private data)."""
        params = [p for p in module.parameters() if p.requires_grad]
        opt, self.carried = self.carried, None
        if opt is None or self.cfg.optimizer == "sgd":
            return engine.make_optimizer(params, self.cfg, lr)
        for st in opt.state.values():
            if "exp_avg" in st:
                st["exp_avg"].zero_()
        return opt

    def run_public_phase(self, plan) -> None:
        """Non-private steps on the public dataset only; with switch_step = -1 stop once the
        decelerator (measured on public data) has fallen to switch_threshold of its first value."""
        from .curvature import DeceleratorMonitor

        engine.set_trainable(self.model, plan.trainable)
        pub = self.prep.public
        px, py = pub.x_train.to(self.dev), pub.y_train.to(self.dev)
        opt = engine.make_optimizer([p for p in self.model.parameters() if p.requires_grad], self.cfg, plan.lr)
        mon = None
        if self.cfg.switch_step < 0 and self.cfg.private:
            mon = DeceleratorMonitor(px, py, noise_multiplier=self.prep.phases[0].noise_multiplier,
                                     batch_size=self.cfg.batch_size, clip_norm=self.cfg.clip_norm,
                                     clipping=self.cfg.clipping, threshold=self.cfg.switch_threshold,
                                     seed=self.cfg.seed)
        q, reason = min(1.0, self.cfg.batch_size / len(py)), "step"
        self._t = time.perf_counter()
        for k in range(plan.steps):
            if mon is not None and k % SWITCH_CHECK_EVERY == 0:
                self.rec.add(self.step, decelerator_public=mon.measure(self.model))
                if mon.should_switch():
                    reason = "decelerator"
                    break
            idx = self._sample(len(py), q)
            opt.zero_grad(set_to_none=True)
            st = dpsgd.plain_step(self.model, px[idx], py[idx])
            opt.step()
            self.step += 1
            self.record(st, plan.lr, final=k == plan.steps - 1)
        else:
            reason = "step" if self.cfg.switch_step >= 0 else "public step cap"
        self.carried = opt
        self.switch = {"step": self.step, "reason": reason, "public_dataset": self.cfg.public_dataset,
                       "decelerator_public": mon.history if mon else None}
        self.store.event(self.run_id, "switch", f"public → private at step {self.step} ({reason})")
        self.evaluate()

    def record(self, st: dpsgd.StepStats, lr: float, final: bool) -> None:
        eps = accounting.spent_at(self.prep.eps_curve, self.private_steps) if self.cfg.private else None
        self.last.update(loss=st.loss, epsilon=eps)
        now = time.perf_counter()  # step time: since the previous step's bookkeeping ended
        step_ms = (now - self._t) * 1e3 if self._t is not None else None
        self.rec.add(self.step, loss=st.loss, train_accuracy=st.train_accuracy, epsilon=eps,
                     clip_fraction=st.clip_fraction, grad_norm=st.grad_norm, lr=lr, batch_size=st.batch_size,
                     step_ms=step_ms)
        if final or self.step % self.cfg.eval_every == 0:
            self.evaluate()
        elif self.step % FLUSH_EVERY == 0:
            self.rec.flush(self.step)
        ce = self.cfg.checkpoint_every
        if ce and self.step % ce == 0:
            self.checkpoint()
        if self.progress:
            self.progress(self.step, self.prep.total_steps, dict(self.last))
        self._t = time.perf_counter()


def train(prep: Prepared, *, store, run_id: str, progress: Callable | None = None,
          cancel: threading.Event | None = None, on_checkpoint: Callable | None = None) -> dict:
    """Train all phases of ``prep`` and return the run's summary.

    ``on_checkpoint(run_id, step)`` is called after each feature checkpoint is
    stored (the job manager queues the background analyses there).
    """
    t0 = time.perf_counter()
    loop = Loop(prep, store, run_id, progress, cancel, on_checkpoint)
    loop.evaluate()
    loop.checkpoint()
    phases = iter(prep.phases)  # the accountant's phases: the private plans, in order
    for plan in prep.plans:
        store.event(run_id, "phase", f"{plan.name}: {plan.steps} steps")
        if plan.public:
            loop.run_public_phase(plan)
            store.update_run(run_id, total_steps=loop.step + sum(p.steps for p in prep.phases))
        else:
            loop.run_phase(plan, next(phases))
    if not prep.cfg.checkpoint_every or loop.step % prep.cfg.checkpoint_every:
        loop.checkpoint()
    path = store.run_dir(run_id) / "model.pt"
    state = {k: v.cpu() for k, v in loop.model.state_dict().items()}
    write_atomic(path, lambda p: torch.save({"state_dict": state, "config": prep.cfg.to_dict()}, p))
    return summarize(prep, run_id, loop.last, time.perf_counter() - t0, switch=loop.switch, extra=loop.extra)


def summarize(prep: Prepared, run_id: str, last: dict, wall: float, switch: dict | None = None,
              extra: dict | None = None) -> dict:
    """The JSON summary: enough to recompute ε with any accountant from ``phases``."""
    cfg = prep.cfg
    spent = None
    if cfg.private:
        spent = accounting.epsilon(phases=prep.phases, delta=cfg.delta, accountant=cfg.accountant)
        if spent > cfg.epsilon + 1e-9:  # calibration guarantees this never happens
            raise RuntimeError(f"privacy accounting error: spent {spent} > target {cfg.epsilon}")
    return {
        "run_id": run_id, "config": cfg.to_dict(), "config_hash": cfg.hash(),
        "strategy": cfg.strategy, "dataset": cfg.dataset, "backbone": cfg.backbone,
        "test_accuracy": last.get("test_accuracy"), "test_loss": last.get("test_loss"),
        "epsilon": cfg.epsilon if cfg.private else None, "epsilon_spent": spent,
        "delta": cfg.delta, "accountant": cfg.accountant, "private": cfg.private,
        "phases": [p.to_dict() for p in prep.phases],
        "total_steps": prep.total_steps if switch is None else switch["step"] + sum(p.steps for p in prep.phases),
        **({"public_phase": switch} if switch else {}), **(extra or {}),
        "n_train": prep.bundle.n, "device": prep.device, "wall_time_s": round(wall, 3),
    }
