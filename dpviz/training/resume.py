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

The configuration's hash names a data folder, not what it holds, so each snapshot also holds what it is valid
for (`fingerprint`): n, a digest of the training records, the bands and the accountant's schedule. A run is
gone on with only where they still hold (`mismatch`): otherwise q, σ and T would be recalibrated for another
n and BandMF's parts redrawn while the noise memory carries on, releasing more than ε covers.
"""

from __future__ import annotations

import math

from dpviz.errors import ConfigError


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
            **({"noise_memory": loop.noise.state_dict()} if getattr(loop, "noise", None) is not None else {}),
            # BandMF's parts: under secure randomness nothing else could draw them again
            **({"parts": loop.parts.cpu()} if getattr(loop, "parts", None) is not None else {}),
            **fingerprint(loop.prep)}


def fingerprint(prep) -> dict:
    """What a snapshot of ``prep``'s run holds for beyond its configuration: the private training set's size n,
    a digest of its records (`dpviz.data.bundle.digest`), BandMF's bands, and the schedule the accountant was
    given, [name, σ, q, T] per private phase."""
    from dpviz.data.bundle import digest  # here: this module is read without torch (`stopped`, the job manager)

    return {"n": prep.bundle.n, "data_digest": digest(prep.bundle), "bands": prep.cfg.bands,
            "schedule": [[p.name, p.noise_multiplier, p.sample_rate, p.steps] for p in prep.phases]}


def mismatch(state: dict, prep, run_id: str) -> ConfigError | None:
    """The one-line refusal to go on from ``state`` (run ``run_id``'s snapshot) with ``prep``, or None where its
    fingerprint still holds. A snapshot written before snapshots held one has none: nothing can be checked
    against it, so it goes on as it always did."""
    if "data_digest" not in state:
        return None
    now, remedy = fingerprint(prep), "rerun with --fresh (Python: resume=False) to start a new run"
    if (state["n"], state["data_digest"]) != (now["n"], now["data_digest"]):
        field, what = ("data_dir", "folder") if prep.cfg.data_dir else ("dataset", "dataset's files")
        return ConfigError(field, f"the training records changed since run {run_id} stopped (n {state['n']} → "
                                  f"{now['n']}, digest {state['data_digest'][:12]} → {now['data_digest'][:12]}); "
                                  f"{remedy}, or restore the {what}")
    if state["bands"] != now["bands"] or not _same_schedule(state["schedule"], now["schedule"]):
        return ConfigError("resume", f"the accountant's schedule changed since run {run_id} stopped (σ, q, T: "
                                     f"{_said(state)} → {_said(now)}); {remedy}")
    return None


def _same_schedule(a: list, b: list) -> bool:
    """Equal up to float rounding (a calibration run on another machine may differ in the last bits)."""
    return len(a) == len(b) and all(x[0] == y[0] and x[3] == y[3] and math.isclose(x[1], y[1], rel_tol=1e-9)
                                    and math.isclose(x[2], y[2], rel_tol=1e-9) for x, y in zip(a, b))


def _said(fp: dict) -> str:
    return f"bands {fp['bands']}, " + ", ".join(f"{n} {s:.6g}, {q:.6g}, {t}" for n, s, q, t in fp["schedule"])


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
    if state.get("parts") is not None and loop.parts is not None:
        loop.parts = state["parts"].to(loop.dev)


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


def stopped(store, config_hash: str, statuses: tuple[str, ...] = STOPPED, prep=None, *, waited_for: str | None = None,
            restart: bool = False):
    """(run id, snapshot) of the newest stopped run of ``config_hash`` (in one of ``statuses``) that can go on,
    or None. With ``prep`` (the run about to train), a snapshot goes on only where its `fingerprint` still
    holds; where none does, the newest one's `mismatch` is raised, before anything is stored or changed.

    ``waited_for``: the run the caller waited for (`dpviz.training.execute`): it goes on however it stopped
    (interrupted, cancelled by its own requester, failed), since the caller asked for its result and a second run
    would spend the budget again. ``restart``: where no snapshot goes on, the newest interrupted run (or the
    one waited for) without any comes back as (run id, None), to train again from step 0 as the same run rather
    than leave it stopped beside a new one; only for a configuration that `replays` its steps."""
    runs = [r for r in store.list_runs(kind=None) if r["config_hash"] == config_hash
            and (r["status"] in statuses or r["run_id"] == waited_for and r["status"] in STOPPED)]
    refused, bare = None, None
    for r in sorted(runs, key=lambda r: r.get("created") or 0, reverse=True):
        state = store.load_resume(r["run_id"])
        if state is None:
            if restart and bare is None and (r["status"] == TAKE_OVER or r["run_id"] == waited_for):
                bare = r["run_id"]
            continue
        why = mismatch(state, prep, r["run_id"]) if prep is not None else None
        if why is None:
            return r["run_id"], state
        refused = refused or why  # an older run may still fit: the data restored to what it trained on
    if refused is not None:
        raise refused
    return (bare, None) if bare else None


def replays(cfg) -> bool:
    """Whether training ``cfg`` again from step 0 takes the very steps a stopped run of it took: its sampling
    and noise come from its seed (or it adds none), so going on from step 0 releases nothing new and the run
    stays one run of one ε. Under secure randomness the draws cannot be taken again."""
    return cfg.randomness == "seeded" or not cfg.private


def weights_base(store, run_id: str):
    """The full weights of the run's first checkpoint, which later ones store their changes against."""
    steps = store.weight_steps(run_id)
    return (steps[0], store.load_weights(run_id, steps[0])) if steps else None

