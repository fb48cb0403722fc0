"""The training loop: phases of Poisson-sampled DP-SGD, recorded step by step."""

from __future__ import annotations

import threading
import time
from typing import Callable

import torch

from . import engine
from .engine import Cancelled, Prepared
from .privacy import accounting, dpsgd

FLUSH_EVERY = 10  # steps between metric writes (the dashboard reads them live)


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

    def evaluate(self) -> None:
        acc, loss = engine.evaluate(self.model, self.prep.bundle.x_test, self.prep.bundle.y_test, self.dev)
        self.last.update(test_accuracy=acc, test_loss=loss)
        self.rec.add(self.step, test_accuracy=acc, test_loss=loss)
        self.rec.flush(self.step)

    def checkpoint(self) -> None:
        feats = engine.layer_features(self.model, self.ev_x, self.ev_y, self.dev)
        self.store.save_features(self.run_id, self.step, feats)
        if self.on_checkpoint:
            self.on_checkpoint(self.run_id, self.step)

    def _inputs(self, trainable: str) -> tuple[torch.nn.Module, torch.Tensor]:
        if trainable == "head":  # frozen backbone: features once, not a forward per step
            return self.model.head, engine.backbone_features(self.model, self.x, self.dev)
        return self.model, self.x

    def run_phase(self, plan, phase) -> None:
        engine.set_trainable(self.model, plan.trainable)
        module, inputs = self._inputs(plan.trainable)
        private = self.cfg.private
        stepper = dpsgd.Stepper(module, self.cfg.grad_sample_mode) if private else module
        opt = engine.make_optimizer([p for p in module.parameters() if p.requires_grad], self.cfg, plan.lr)
        n, q = len(self.y), phase.sample_rate
        for k in range(plan.steps):
            if self.cancel is not None and self.cancel.is_set():
                raise Cancelled()
            idx = (torch.rand(n, generator=self.gen_sample) < q).nonzero().squeeze(1).to(self.dev)
            opt.zero_grad(set_to_none=True)
            if private:
                st = dpsgd.private_step(stepper, inputs[idx], self.y[idx], clip_norm=phase.clip_norm,
                                        noise_multiplier=phase.noise_multiplier, expected_batch=q * n,
                                        generator=self.gen_noise)
            else:
                st = dpsgd.plain_step(stepper, inputs[idx], self.y[idx])
            opt.step()
            self.step += 1
            self.record(st, plan.lr, final=k == plan.steps - 1)
        if private:
            stepper.close()

    def record(self, st: dpsgd.StepStats, lr: float, final: bool) -> None:
        eps = accounting.spent_at(self.prep.eps_curve, self.step) if self.cfg.private else None
        self.last.update(loss=st.loss, epsilon=eps)
        self.rec.add(self.step, loss=st.loss, train_accuracy=st.train_accuracy, epsilon=eps,
                     clip_fraction=st.clip_fraction, grad_norm=st.grad_norm, lr=lr, batch_size=st.batch_size)
        if final or self.step % self.cfg.eval_every == 0:
            self.evaluate()
        elif self.step % FLUSH_EVERY == 0:
            self.rec.flush(self.step)
        ce = self.cfg.checkpoint_every
        if ce and self.step % ce == 0:
            self.checkpoint()
        if self.progress:
            self.progress(self.step, self.prep.total_steps, dict(self.last))


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
    for plan, phase in zip(prep.plans, prep.phases):
        store.event(run_id, "phase", f"{plan.name}: {plan.steps} steps")
        loop.run_phase(plan, phase)
    if not prep.cfg.checkpoint_every or loop.step % prep.cfg.checkpoint_every:
        loop.checkpoint()
    path = store.run_dir(run_id) / "model.pt"
    state = {k: v.cpu() for k, v in loop.model.state_dict().items()}
    from .store import write_atomic
    write_atomic(path, lambda p: torch.save({"state_dict": state, "config": prep.cfg.to_dict()}, p))
    return summarize(prep, run_id, loop.last, time.perf_counter() - t0)


def summarize(prep: Prepared, run_id: str, last: dict, wall: float) -> dict:
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
        "phases": [p.to_dict() for p in prep.phases], "total_steps": prep.total_steps,
        "n_train": prep.bundle.n, "device": prep.device, "wall_time_s": round(wall, 3),
    }
