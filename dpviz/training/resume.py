"""Where a stopped run goes on from: a snapshot at every feature checkpoint, and putting it back.

At each feature checkpoint after the first, rank 0 stores ``runs/<id>/resume.pt`` (replaced each time):
the model's raw weights (LoRA's adapters unmerged), the optimizer's state, both generators (sampling and
noise), the step, the count of private steps and where in which phase the run stands. ``run --resume``
(`dpviz.training.execute`) reopens the newest stopped run of the same configuration and the loop goes on from
there: the same Poisson batches, the same noise, so the run ends where an uninterrupted one would, and
the accountant, which counts private steps of a fixed schedule, gives the same ε. The world size may
differ: sampling and noise are global (`dpviz.training.distributed`).

A strategy keeps what lives outside the weights through `Strategy.resume_state`: SPARTA its selection
epoch's sums and row scores (the mask is chosen again from them, as it was), continual where and why it
switched or, in its public phase, the automatic switch's decelerator history and probe generator.
"""

from __future__ import annotations

def snapshot(loop) -> dict:
    """What `restore` and the phase loop need to go on after the step the loop has just recorded."""
    phase, k, optimizer = loop.at
    extra = loop.strategy.resume_state(loop)
    if extra is None:  # the strategy cannot go on from here
        return None
    return {"strategy": extra, "step": loop.step, "private_steps": loop.private_steps, "phase": phase, "k": k,
            "model": cpu_once(loop.model.state_dict()),
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "gen_sample": loop.gen_sample.get_state(), "gen_noise": loop.gen_noise.get_state(),
            "last": {k: v for k, v in loop.last.items() if v is not None}, "overflows": loop.overflows,
            **({"noise_memory": loop.noise.state_dict()} if getattr(loop, "noise", None) is not None else {})}


def cpu_once(state: dict) -> dict:
    """A CPU copy of ``state`` in which tensors that share memory (a module registered under two names, tied
    weights) stay one tensor: `torch.save` writes it once (MiniLM's snapshot: 224 MB with copies each)."""
    copies: dict = {}
    out = {}
    for n, t in state.items():
        key = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
        if key not in copies:
            copies[key] = t.detach().to("cpu", copy=True)
        out[n] = copies[key]
    return out


def restore(loop, state: dict) -> None:
    """The loop's counters, generators and weights as ``state`` left them (weights a later phase adds, such
    as LoRA's adapters, are loaded again once the phase has made them: `load_phase`)."""
    loop.step, loop.private_steps = state["step"], state["private_steps"]
    loop.strategy.load_resume_state(state.get("strategy", {}))
    loop.last.update(state["last"])
    loop.overflows = state.get("overflows", 0)
    loop.gen_sample.set_state(state["gen_sample"])
    loop.gen_noise.set_state(state["gen_noise"].to(loop.gen_noise.get_state().device))
    loop.model.load_state_dict(state["model"], strict=False)


def load_phase(loop, state: dict, optimizer) -> None:
    """Inside the phase the run stopped in: every weight (strictly now), and the optimizer's state."""
    loop.model.load_state_dict({n: t.to(loop.dev) for n, t in state["model"].items()})
    if optimizer is not None and state["optimizer"] is not None:
        optimizer.load_state_dict(torch_optimizer_state(state["optimizer"], optimizer))


def torch_optimizer_state(doc: dict, optimizer) -> dict:
    """``doc`` as ``torch.optim``'s ``load_state_dict`` takes it. Snapshots written when dpviz had its own
    optimizers hold {"lr", "state": {index: {momentum_buffer | step, exp_avg, exp_avg_sq}}}: the same
    per-parameter tensors, with an integer step where torch keeps a float tensor."""
    if "param_groups" in doc:
        return doc
    import torch

    state = {i: {k: torch.tensor(float(v)) if k == "step" else v for k, v in st.items()}
             for i, st in doc["state"].items()}
    return {"state": state, "param_groups": optimizer.state_dict()["param_groups"]}


TAKE_OVER = "interrupted"
"""``run(resume=TAKE_OVER)``, the default: a request for a configuration whose run was interrupted (its process
stopped or died: killed, a server shut down) with a snapshot goes on with that run from its snapshot instead of
training a second one from step 0 — the same ε, one row. A cancelled or failed run is gone on with only when
asked (``resume=True``, ``--resume``); ``resume=False`` (``--fresh``) starts over."""
STOPPED = ("interrupted", "cancelled", "failed")


def stopped(store, config_hash: str, statuses: tuple[str, ...] = STOPPED):
    """(run id, snapshot) of the newest stopped run of ``config_hash`` (in one of ``statuses``) that can go on,
    or None."""
    runs = [r for r in store.list_runs(kind=None) if r["config_hash"] == config_hash
            and r["status"] in statuses]
    for r in sorted(runs, key=lambda r: r.get("created") or 0, reverse=True):
        state = store.load_resume(r["run_id"])
        if state is not None:
            return r["run_id"], state
    return None


def weights_base(store, run_id: str):
    """The full weights of the run's first checkpoint, which later ones store their changes against."""
    steps = store.weight_steps(run_id)
    return (steps[0], store.load_weights(run_id, steps[0])) if steps else None

