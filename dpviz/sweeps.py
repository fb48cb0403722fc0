"""Sweeps and searches as Optuna studies; every trial is an ordinary dpviz run.

* A **budget sweep** is a grid over (ε, LP fraction, seed): every grid point is
  enqueued as a waiting trial, so workers pop distinct points atomically from
  the storage and no point runs twice, however many workers share the study.
  (No `GridSampler`: nothing is sampled, and its bookkeeping fails on enqueued
  trials of a one-point grid, ``KeyError: 'grid_id'``.)
* A **tuning search** samples learning rates, clipping norm, batch size and
  epochs with TPE.

Storage: ``None`` means zero-setup journal storage in ``<cache>/optuna.journal``
(Optuna's file journal works across processes on one machine); any Optuna
storage URL (``postgresql://…``) scales to many machines, each running
``python -m dpviz worker --storage URL``. A trial's run summary is stored in
its user attributes, so one dashboard can follow trials run elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import math
import os

import optuna

from .config import RunConfig
from .errors import ConfigError
from .journal import storage
from .store import Store, process_token

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _eps(v) -> float:
    return math.inf if str(v).lower() in ("inf", "none") else float(v)


def budget_grid(*, epsilons, fractions, seeds) -> dict:
    """The grid's search space; ε is kept as text so that "inf" survives JSON."""
    return {"epsilon": [str(e) for e in epsilons], "lp_fraction": [float(p) for p in fractions],
            "seed": [int(s) for s in seeds]}


def study_name(kind: str, base: RunConfig, space: dict) -> str:
    blob = json.dumps({"kind": kind, "base": base.to_json(hashed_only=True), "space": space}, sort_keys=True)
    return f"dpviz-{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def create_grid_sweep(kind: str, base: RunConfig, points: list[dict], *, storage_url=None,
                      cache_dir=None) -> optuna.Study:
    """Create (or reopen) a study over explicit ``points`` (dicts of the fields that vary) and enqueue
    every point neither finished nor in flight; workers pop them atomically from the storage."""
    space = {k: sorted({p[k] for p in points}, key=str) for k in sorted({k for p in points for k in p})}
    name = study_name(kind, base, {"points": points})
    st = storage(storage_url, cache_dir)
    study = optuna.create_study(study_name=name, storage=st, direction="maximize", load_if_exists=True,
                                sampler=optuna.samplers.RandomSampler(seed=0))  # never asked: points are enqueued
    study.set_user_attr("kind", kind)
    study.set_user_attr("base", base.to_dict())
    study.set_user_attr("space", space)
    fail_stale(study)
    keys = sorted(space)
    taken = {_point(t.params or t.system_attrs.get("fixed_params", {}), keys) for t in study.get_trials(deepcopy=False)
             if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING,
                            optuna.trial.TrialState.WAITING)}
    for p in points:
        if _point(p, keys) not in taken:
            study.enqueue_trial(p)
            taken.add(_point(p, keys))
    return study


def sparse_points(*, epsilons, sparsities, selections, seeds, fft: bool = True, lora_ranks=()) -> list[dict]:
    """Points of the sparse profile: row selections at every s, bias/norm once, DP-FFT (100 %) and
    DP-LoRA at each rank in ``lora_ranks``.

    Every point names the same fields (the study's space lists them all); a field a point's strategy
    does not read takes its default, which leaves the run's hash unchanged.
    """
    from .sparse import ROW_SELECTIONS

    rest = {"selection": "sparta", "sparsity": 0.2}  # unused by fft and lora
    lora = {"lora_rank": 4} if lora_ranks else {}  # only when asked: older studies keep their names
    out = []
    for e in epsilons:
        for seed in seeds:
            base = {"epsilon": str(e), "seed": int(seed), "strategy": "sparse", **lora}
            for sel in selections:
                for s in (sparsities if sel in ROW_SELECTIONS else [0.2]):
                    out.append({**base, "selection": sel, "sparsity": float(s)})
            if fft:
                out.append({**base, "strategy": "fft", **rest})
            out += [{**base, "strategy": "lora", **rest, "lora_rank": int(r)} for r in lora_ranks]
    return out


def create_budget_sweep(base: RunConfig, space: dict, *, storage_url=None, cache_dir=None) -> optuna.Study:
    """The (ε × LP fraction × seed) grid of `budget_grid` as a grid study."""
    points = [{"epsilon": e, "lp_fraction": p, "seed": s} for e in space["epsilon"] for p in space["lp_fraction"]
              for s in space["seed"]]
    return create_grid_sweep("budget", base, points, storage_url=storage_url, cache_dir=cache_dir)


TUNABLE = {"lr_lp": float, "lr_ft": float, "clip_norm": float, "batch_size": int, "epochs": int}


def check_space(space: dict) -> dict:
    """Validate search ranges {field: [low, high]} and cast them to the fields' types."""
    from .errors import ConfigError

    for k, (lo, hi) in space.items():
        if k not in TUNABLE:
            raise ConfigError(k, f"not tunable; tunable fields: {', '.join(TUNABLE)}")
        if not 0 < lo <= hi:
            raise ConfigError(k, "a range LOW HIGH with 0 < LOW <= HIGH", [lo, hi])
    return {k: [TUNABLE[k](lo), TUNABLE[k](hi)] for k, (lo, hi) in space.items()}


def create_search(base: RunConfig, space: dict, *, trials: int = 20, storage_url=None, cache_dir=None,
                  seed: int = 0, proxy: str | None = None) -> optuna.Study:
    """Create (or reopen) a TPE search over ``space`` = {field: [low, high]} (log scale).

    Args:
        base: the run to tune; its ``dataset`` is the private target.
        space: ranges of `TUNABLE` fields.
        trials: the study's budget: workers stop once that many trials are finished or running.
        seed: TPE's seed.
        proxy: a public dataset (one of `config.PUBLIC_DATASETS`) to run the trials on instead of the private one, under the
            same ε so the hyperparameters suit the same noise. ``None`` tunes on the private data: every
            trial then spends privacy that no single run's ε includes.
    """
    target = base
    if proxy is not None:
        from .config import PUBLIC_DATASETS as PUBLIC
        from .errors import ConfigError

        if proxy not in PUBLIC or proxy == base.dataset:
            raise ConfigError("proxy", f"a public dataset dpviz generates ({', '.join(PUBLIC)}), "
                              f"not the private one", proxy)
        base = base.replace(dataset=proxy, data_dir=None)
    space = check_space(space)
    name = study_name("tune", base, {**space, "target": target.dataset})
    study = optuna.create_study(study_name=name, storage=storage(storage_url, cache_dir), direction="maximize",
                                load_if_exists=True, sampler=optuna.samplers.TPESampler(seed=seed))
    study.set_user_attr("kind", "tune")
    study.set_user_attr("target", target.to_dict())
    study.set_user_attr("proxy", proxy)
    study.set_user_attr("n_trials", max(int(trials), int(study.user_attrs.get("n_trials", 0))))
    study.set_user_attr("base", base.to_dict())
    study.set_user_attr("space", space)
    fail_stale(study)
    return study


def _point(params: dict, keys) -> tuple:
    return tuple(str(params.get(k)) for k in keys)


def fail_stale(study: optuna.Study) -> int:
    """Mark RUNNING trials whose worker process (on this host) is gone as FAIL, so they run again."""
    from .store import owner_alive

    n = 0
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        owner = t.user_attrs.get("owner")
        if owner and not owner_alive(owner):
            study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
            n += 1
    return n


def config_of(study: optuna.Study, trial: optuna.Trial) -> RunConfig:
    base = RunConfig.from_dict(study.user_attrs["base"])
    space = study.user_attrs["space"]
    if study.user_attrs["kind"] != "tune":  # grid studies: every trial is an enqueued point
        values = {k: trial.suggest_categorical(k, v) for k, v in space.items()}
        return base.replace(**{k: (_eps(v) if k == "epsilon" else v) for k, v in values.items()})
    return base.replace(**{k: _suggest(trial, k, v) for k, v in space.items()})


def _suggest(trial: optuna.Trial, name: str, spec: list):
    lo, hi = spec
    if isinstance(lo, int) and isinstance(hi, int):
        return trial.suggest_int(name, lo, hi, log=hi / max(lo, 1) > 8)
    return trial.suggest_float(name, lo, hi, log=True)


def work(study: optuna.Study, *, cache_dir=None, max_trials: int | None = None) -> list[dict]:
    """Run trials of ``study`` in this process until none is waiting (or ``max_trials``)."""
    store = Store(cache_dir)
    done = []
    while max_trials is None or len(done) < max_trials:
        grid = study.user_attrs["kind"] != "tune"
        if grid and not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            break
        if study.user_attrs["kind"] == "tune" and len(study.get_trials(deepcopy=False, states=(
                optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING))) >= study.user_attrs["n_trials"]:
            break  # the search's trial budget is spent (shared by all workers)
        trial = study.ask()
        fixed = "fixed_params" in study._storage.get_trial_system_attrs(trial._trial_id)
        if grid and not fixed:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)  # another worker took the last point
            break
        trial.set_user_attr("owner", process_token())
        try:
            s = _run(config_of(study, trial), store)
        except Exception as e:
            trial.set_user_attr("error", f"{type(e).__name__}: {e}")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        trial.set_user_attr("summary", {k: s.get(k) for k in ("run_id", "test_accuracy", "test_loss", "epsilon_spent",
                                                              "cached", "trainable_fraction")})
        study.tell(trial, s["test_accuracy"])
        done.append(s)
    return done


def _run(cfg: RunConfig, store: Store) -> dict:
    from .runner import run

    return run(cfg, store=store)


def table(study: optuna.Study) -> list[dict]:
    """One row per finished trial: run_id, the varying fields, test accuracy, ε spent."""
    rows = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        s = t.user_attrs["summary"]
        params = {k: (_eps(v) if k == "epsilon" else v) for k, v in t.params.items()}
        rows.append({"run_id": s["run_id"], **{k: (None if isinstance(v, float) and math.isinf(v) else v)
                                              for k, v in params.items()},
                     "test_accuracy": s["test_accuracy"], "test_loss": s.get("test_loss"),
                     "epsilon_spent": s["epsilon_spent"],
                     **({"trainable_fraction": s["trainable_fraction"]} if s.get("trainable_fraction") is not None
                        else {})})
    return rows


def best_config(study: optuna.Study) -> RunConfig:
    """The private target run with the best trial's hyperparameters (tuned on a proxy or not)."""
    best = study.best_trial  # raises ValueError while no trial is complete
    target = RunConfig.from_dict(study.user_attrs.get("target", study.user_attrs["base"]))
    return target.replace(**best.params)


def private_trials(study: optuna.Study) -> int:
    """Trials that trained on private data (their privacy cost is not in any run's ε)."""
    if study.user_attrs.get("kind") != "tune" or study.user_attrs.get("proxy"):
        return 0
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                        optuna.trial.TrialState.RUNNING)))


def threads_per_worker(workers: int) -> int:
    """torch threads per worker so that threads × workers ≤ cores."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def studies(url: str | None = None, cache_dir=None, kind: str | None = None) -> list[optuna.Study]:
    """dpviz studies in a storage (newest first), optionally of one kind."""
    st = storage(url, cache_dir)
    out = []
    for s in reversed(optuna.get_all_study_summaries(st)):
        if s.study_name.startswith("dpviz-") and (kind is None or s.user_attrs.get("kind") == kind):
            out.append(optuna.load_study(study_name=s.study_name, storage=st))
    return out


def start_workers(study: optuna.Study, *, workers: int, cache_dir=None, storage_url=None,
                  threads: int | None = None) -> list:
    """Worker processes for ``study`` (threads × workers ≤ cores); returns the Popen objects."""
    import subprocess
    import sys

    threads = str(threads or threads_per_worker(workers))
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    cmd = [sys.executable, "-m", "dpviz"] + (["--cache-dir", str(cache_dir)] if cache_dir else []) + [
        "worker", "--study", study.study_name, "--threads", threads] + (["--storage", storage_url] if storage_url else [])
    return [subprocess.Popen(cmd, env=env) for _ in range(workers)]


def run_local(study: optuna.Study, *, workers: int, cache_dir=None, storage_url=None) -> int:
    """Run ``study`` here with ``workers`` processes: this one plus workers − 1 started ones.

    The calling process works too, so a sweep pays one process start-up fewer (≈ 3 s of imports, a
    large share of the default's 2–5 s runs). Returns how many started workers failed.
    """
    import torch

    procs = (start_workers(study, workers=workers - 1, cache_dir=cache_dir, storage_url=storage_url,
                           threads=threads_per_worker(workers)) if workers > 1 else [])
    torch.set_num_threads(threads_per_worker(workers))
    failed_here = 0
    try:
        work(study, cache_dir=cache_dir)
    except Exception:  # noqa: BLE001 - the trial is marked failed in the study; a relaunch resumes it
        failed_here = 1
    return failed_here + sum(1 for p in procs if p.wait())
