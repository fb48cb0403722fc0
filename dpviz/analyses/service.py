"""Analyses of stored checkpoints, cached in the store by (run, step, analysis, parameters)."""

from __future__ import annotations

import copy
import functools
import json

from dpviz.errors import ConfigError, StoreError
from dpviz.privacy import bandmf
from dpviz.store import Store
from dpviz.analyses import REGISTRY, layers, run_analysis

BACKGROUND = ("knn", "separability", "residual", "hessian")  # computed at every checkpoint as runs train


def resolve_step(store: Store, run_id: str, step: int | None) -> int:
    steps = store.feature_steps(store.get_run(run_id)["run_id"])
    if not steps:
        raise StoreError(f"run_id: run {run_id} has no feature checkpoints yet")
    if step is None:
        return steps[-1]
    if step not in steps:
        raise StoreError(f"step: run {run_id} has checkpoints at steps {steps}; got {step}")
    return step


def cache_key(store: Store, run_id: str, name: str, params: dict) -> str:
    """Canonical parameters of a result; the embedding's include the checkpoints it is fitted on."""
    if name not in REGISTRY:
        raise ConfigError("analysis", f"one of {', '.join(sorted(REGISTRY))}", name)
    keyed = {**REGISTRY[name].params, **params}
    if name == "embedding":
        keyed["reference_steps"] = store.feature_steps(run_id)
    return json.dumps(keyed, sort_keys=True)


def cached(store: Store, run_id: str, name: str, *, step: int | None = None, **params) -> dict | None:
    """The stored result, or None; never computes (pages call this)."""
    step = resolve_step(store, run_id, step)
    return store.get_analysis(run_id, step, name, cache_key(store, run_id, name, params))


def analyze(store: Store, run_id: str, name: str, *, step: int | None = None, **params) -> dict:
    """The result of analysis ``name`` on a checkpoint (the last one by default), computed once.

    A stored result whose JSON is garbled counts as missing (`Store.get_analysis` gives None): it is
    computed again and the new row replaces it, rather than failing on a cache entry."""
    step = resolve_step(store, run_id, step)
    key = cache_key(store, run_id, name, params)
    if (hit := store.get_analysis(run_id, step, name, key)) is not None:
        if name == "knn" and "k" in params:  # stores from before knn checked k may hold a result for a bad k
            from dpviz.analyses.knn import check_k

            check_k(params["k"], hit["n"])
        return hit
    context = {}
    if REGISTRY[name].kind == "model":
        keyed = json.loads(key)
        out = {"run_id": run_id, "step": step,
               **on_run_device(store, run_id, lambda: run_analysis(
                   name, model_checkpoint(store, run_id, step, keyed.get("batch", 256)), **params))}
        store.put_analysis(run_id, step, name, key, out)
        return out
    if name == "embedding":  # one fit per run, on all its checkpoints
        steps = json.loads(key)["reference_steps"]
        context["reference"] = [layers(store.load_features(run_id, s))[-1] for s in steps]
        if params.get("method") == "umap":  # one UMAP fit gives every checkpoint's map: store them all
            return _all_umap_maps(store, run_id, key, steps, context["reference"], step)
    out = {"run_id": run_id, "step": step,
           **run_analysis(name, store.load_features(run_id, step), context=context, **params)}
    store.put_analysis(run_id, step, name, key, out)
    return out


def on_run_device(store: Store, run_id: str, fn):
    """``fn()`` on the worker thread of the device the run's analyses compute on (`dpviz.training.devices`):
    a GPU's plans, built by the runs, serve the curvature passes too."""
    from dpviz.config import RunConfig
    from dpviz.training import devices, prepare

    device = prepare.resolve_device(RunConfig.from_dict(store.get_run(run_id)["config"], reset_unread=True).device)
    return devices.on_device(device, fn)


def plan_at(plans, step: int):
    """The phase plan of the update that follows ``step`` (the last plan at the run's end)."""
    end = 0
    for plan in plans:
        end += plan.steps
        if step < end:
            return plan
    return plans[-1]


@functools.lru_cache(maxsize=8)
def _prepared(cfg_json: str, root: str):
    """Data, model skeleton and calibrated phases of a run (σ calibration and loading done once)."""
    from dpviz.training import prepare
    from dpviz.config import RunConfig

    return prepare.prepare(RunConfig.from_dict(json.loads(cfg_json), reset_unread=True), cache_dir=root,
                          with_curve=False)


def model_checkpoint(store: Store, run_id: str, step: int, batch: int):
    """The run's model at ``step`` and a fixed batch of its private training data."""
    import torch

    from dpviz.config import RunConfig
    from dpviz.analyses.hessian import Checkpoint

    cfg = RunConfig.from_dict(store.get_run(run_id)["config"], reset_unread=True)
    state = weights_at(store, run_id, step, cfg.keep_weights)
    prep = _prepared(cfg.to_json(), str(store.root))  # once per run, not per checkpoint
    model = copy.deepcopy(prep.model).to(prep.device)
    model.load_state_dict(state)
    b = prep.bundle
    idx = torch.randperm(b.n, generator=torch.Generator().manual_seed(0))[:batch]  # fixed, seed-independent
    # one σ for every private phase; in a public or LP phase the decelerator is the one DP would impose
    sigma = prep.phases[0].noise_multiplier if cfg.private and prep.phases else 0.0
    return Checkpoint(model=model, x=b.x_train[idx].to(prep.device), y=b.y_train[idx].to(prep.device),
                      trainable=plan_at(prep.plans, step).trainable, noise_multiplier=sigma,
                      batch_size=cfg.batch_size, clip_norm=cfg.clip_norm, clipping=cfg.clipping,
                      noise_factor=bandmf.noise_factor(cfg.bands, momentum=bandmf.momentum(cfg.mechanism)))


def weights_at(store: Store, run_id: str, step: int, keep_weights: str) -> dict:
    """The model's state dict at ``step``: its checkpoint's weights, or at the last checkpoint the final model
    (all a run with keep_weights "final" keeps); otherwise a `StoreError` naming keep_weights and what to do."""
    if step in store.weight_steps(run_id):
        return store.load_weights(run_id, step)
    last = store.feature_steps(run_id)[-1]
    if step == last and keep_weights != "none" and store.get_run(run_id).get("status") == "finished":
        return store.load_model(run_id)["state_dict"]  # the last checkpoint is taken at the end, then saved
    how = {"final": f"keeps only its final model (keep_weights final), at step {last}: analyse that step, or "
                    "re-run it with --keep-weights checkpoints",
           "none": "keeps no weights (keep_weights none): re-run it with --keep-weights checkpoints (or final "
                   "for its last step)"}
    raise StoreError(f"keep_weights: run {run_id} has no weights at step {step}; it " + how.get(
        keep_weights, "was stored before dpviz kept them, or has not finished: re-run it"))


def _all_umap_maps(store: Store, run_id: str, key: str, steps: list[int], reference: list, step: int) -> dict:
    from dpviz.analyses import PRIVACY_NOTE
    from dpviz.analyses.embedding import umap_maps

    wanted = None
    for s, coords in zip(steps, umap_maps(reference)):
        labels = store.load_features(run_id, s)["labels"]
        out = {"run_id": run_id, "step": s, "analysis": "embedding", "params": json.loads(key),
               "private_data": True, "note": PRIVACY_NOTE, "method": "umap",
               "coords": coords.round(6).tolist(), "labels": labels.tolist(), "explained": []}
        store.put_analysis(run_id, s, "embedding", key, out)
        wanted = out if s == step else wanted
    return wanted


def unattended(store: Store, run_id: str) -> tuple[str, ...]:
    """The analyses computed for ``run_id`` with no one asking (while it trains, after a CLI run).

    Model analyses (curvature: Hessian-vector products through the whole network) run unattended only
    on dpviz's own small backbones. On a real pretrained one they take minutes per checkpoint and
    gigabytes (MiniLM, B = 256: ~11 GB and over 8 CPU-minutes without finishing the first of 11
    checkpoints), which would slow the user's next run; there the Curvature page or ``analyze hessian``
    computes them when asked.
    """
    from dpviz.catalog import BACKBONES

    entry = BACKBONES.get(store.get_run(run_id)["config"].get("backbone", "cnn"))
    return BACKGROUND if entry is None or entry.own else tuple(n for n in BACKGROUND
                                                                if REGISTRY[n].kind != "model")


def analyze_checkpoint(store: Store, run_id: str, step: int, kind: str | None = None,
                       unattended_only: bool = False) -> list[str]:
    """Compute and cache the background analyses (of one ``kind``, or all) for one checkpoint.

    Args:
        unattended_only: only those `unattended` allows (a run's new checkpoint, a CLI run's detached
            process: nobody asked); False when a page asks for them.

    Returns: the names computed now (those already stored, and model analyses of runs stored without
    weights, are skipped).
    """
    done, names = [], unattended(store, run_id) if unattended_only else BACKGROUND
    for name in (n for n in names if kind is None or REGISTRY[n].kind == kind):
        if cached(store, run_id, name, step=step) is not None:
            continue
        try:
            analyze(store, run_id, name, step=step)
        except StoreError:
            if REGISTRY[name].kind != "model":
                raise  # model analyses need saved weights, which runs stored before them lack
            continue
        done.append(name)
    return done


def analyze_missing(store: Store, run_id: str, *, before=None, unattended_only: bool = False) -> list[dict]:
    """Compute every background analysis of every checkpoint of ``run_id`` not stored yet.

    Args:
        before: called before each checkpoint's analyses (the detached process waits there while a
            run trains, `dpviz.training.idle`).
        unattended_only: skip what `unattended` leaves to be asked for (the detached process).

    Returns: [{step, analysis}] of what was computed.
    """
    run_id = store.get_run(run_id)["run_id"]
    done = []
    for step in store.feature_steps(run_id):
        if before is not None:
            before()
        done += [{"step": step, "analysis": name}
                 for name in analyze_checkpoint(store, run_id, step, unattended_only=unattended_only)]
    return done
