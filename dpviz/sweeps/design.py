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

import optuna

from dpviz.config import RunConfig
from dpviz.errors import ConfigError
from dpviz.sweeps.journal import storage
from dpviz.sweeps.trials import _eps, point_key, recover

optuna.logging.set_verbosity(optuna.logging.WARNING)


def budget_grid(*, epsilons, fractions, seeds) -> dict:
    """The grid's search space; ε is kept as text so that "inf" survives JSON."""
    return {"epsilon": [str(e) for e in epsilons], "lp_fraction": [float(p) for p in fractions],
            "seed": [int(s) for s in seeds]}


def study_name(kind: str, base: RunConfig, space: dict) -> str:
    blob = json.dumps({"kind": kind, "base": base.to_json(hashed_only=True), "space": space}, sort_keys=True)
    return f"dpviz-{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def check_points(base: RunConfig, points) -> None:
    """Every point (a dict of the fields it sets) as a run of ``base``, in order: a `ConfigError` naming
    the first field a point cannot take, before anything is stored."""
    for p in points:
        RunConfig.from_dict({**base.to_dict(), **p})


def preview_points(base: RunConfig, points) -> None:
    """Every point as a run of ``base`` checked as a run would check it before training (`calibration.preview`:
    the data's δ ≤ 1/n, BandMF's b·q ≤ 1, a σ that reaches the point's ε…), in order: a `ConfigError` naming the
    first field a point cannot take, before any point trains (one point's budget is spent once it trains, so a
    grid that fails half-way has spent part of itself for no table). Points that differ in seeds and learning
    rates alone are one check: those set neither the schedule nor σ."""
    from dpviz.training import calibration

    for cfg in distinct_schedules(RunConfig.from_dict({**base.to_dict(), **p}) for p in points):
        calibration.preview(cfg)


def distinct_schedules(configs) -> list[RunConfig]:
    """``configs`` less those whose schedule and σ an earlier one has already (the same but for seed and rates)."""
    seen: dict[str, RunConfig] = {}
    for cfg in configs:
        key = {k: v for k, v in cfg.to_dict().items() if k not in ("seed", "lr_lp", "lr_ft")}
        seen.setdefault(json.dumps(key, sort_keys=True, default=str), cfg)
    return list(seen.values())


def create_grid_sweep(kind: str, base: RunConfig, points: list[dict], *, storage_url=None,
                      cache_dir=None) -> optuna.Study:
    """Create (or reopen) a study over explicit ``points`` (dicts of the fields that vary) and enqueue
    every point neither finished nor in flight; workers pop them atomically from the storage. The whole grid is
    checked first (`preview_points`): a point no run could take is refused before anything is written."""
    preview_points(base, points)
    space = {k: sorted({p[k] for p in points}, key=str) for k in sorted({k for p in points for k in p})}
    name = study_name(kind, base, {"points": points})
    st = storage(storage_url, cache_dir)
    study = optuna.create_study(study_name=name, storage=st, direction="maximize", load_if_exists=True,
                                sampler=optuna.samplers.RandomSampler(seed=0))  # never asked: points are enqueued
    study.set_user_attr("kind", kind)
    study.set_user_attr("base", base.to_dict())
    study.set_user_attr("space", space)
    study.set_user_attr("points", points)  # what `trials.recover` enqueues again after a kill
    recover(study)
    return study


def sparse_points(*, epsilons, sparsities, selections, seeds, fft: bool = True, lora_ranks=()) -> list[dict]:
    """Points of the sparse profile: row selections at every s, bias/norm once, DP-FFT (100 %) and
    DP-LoRA at each rank in ``lora_ranks``.

    Every point names the same fields (the study's space lists them all); a field a point's strategy
    does not read takes its default, which leaves the run's hash unchanged.
    """
    from dpviz.strategies.sparse import ROW_SELECTIONS

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


def noise_points(*, epsilons, band_counts, seeds, mechanism: str = "bandmf") -> list[dict]:
    """Points comparing the noise mechanisms at each ε and seed: DP-SGD where b = 1, the banded ``mechanism``
    (bandmf or bandmf-momentum, `dpviz.privacy.bandmf`) with b bands otherwise."""
    return [{"epsilon": str(e), "seed": int(seed), "mechanism": "dp-sgd" if int(b) == 1 else mechanism,
             "bands": int(b)} for e in epsilons for seed in seeds for b in band_counts]


def create_budget_sweep(base: RunConfig, space: dict, *, storage_url=None, cache_dir=None) -> optuna.Study:
    """The (ε × LP fraction × seed) grid of `budget_grid` as a grid study."""
    points = [{"epsilon": e, "lp_fraction": p, "seed": s} for e in space["epsilon"] for p in space["lp_fraction"]
              for s in space["seed"]]
    return create_grid_sweep("budget", base, points, storage_url=storage_url, cache_dir=cache_dir)


TUNABLE = {"lr_lp": float, "lr_ft": float, "clip_norm": float, "batch_size": int, "epochs": int}


def check_space(space: dict) -> dict:
    """Validate search ranges {field: [low, high]} and cast them to the fields' types."""
    from dpviz.errors import ConfigError

    for k, (lo, hi) in space.items():
        if k not in TUNABLE:
            raise ConfigError(k, f"not tunable; tunable fields: {', '.join(TUNABLE)}")
        if not 0 < lo <= hi:
            raise ConfigError(k, "a range LOW HIGH with 0 < LOW <= HIGH", [lo, hi])
    return {k: [TUNABLE[k](lo), TUNABLE[k](hi)] for k, (lo, hi) in space.items()}


def check_ranges(base: RunConfig, ranges: dict) -> dict:
    """``ranges`` {field: (low, high)} of a search of ``base``, checked: each finite with 0 < low <= high
    (searched on a log scale), a learning rate only where ``base``'s strategy uses it, and each end of
    batch_size and epochs a value the field takes. Returns them unchanged; `ConfigError` naming the field."""
    from dpviz import strategies

    used = strategies.get(base.strategy).lr_fields
    for k, (lo, hi) in ranges.items():
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
            raise ConfigError(k, "a range LOW HIGH of finite numbers with 0 < LOW <= HIGH", f"{lo:g} {hi:g}")
        if k.startswith("lr_") and k not in used:
            raise ConfigError(k, f"no range: {base.strategy} trains with {' and '.join(used)} only", f"{lo:g} {hi:g}")
        if k in ("batch_size", "epochs"):  # each end must itself be a valid value
            for end in (lo, hi):
                RunConfig().replace(**{k: int(end)})
    return dict(ranges)


def preview_corners(configs, space: dict) -> None:
    """`calibration.preview` at every corner of the batch-size and epoch ranges (they set q, T and σ; the
    rest do not), on each dataset the study touches: B ≤ n, δ ≤ 1/n, a σ that exists."""
    from itertools import product

    from dpviz.training import calibration

    shaping = {k: v for k, v in space.items() if k in ("batch_size", "epochs")}
    for cfg in configs:
        calibration.preview(cfg)
        for ends in product(*shaping.values()):
            calibration.preview(cfg.replace(**{k: int(e) for k, e in zip(shaping, ends)}))


def proxy_base(base: RunConfig, proxy: str | None) -> RunConfig:
    """``base`` on the public ``proxy`` dataset (``base`` itself when None); a private proxy is refused."""
    if proxy is None:
        return base
    from dpviz.catalog import public_datasets

    PUBLIC = public_datasets()
    if proxy not in PUBLIC or proxy == base.dataset:
        raise ConfigError("proxy", f"a public dataset dpviz generates ({', '.join(PUBLIC)}), not the private one", proxy)
    return base.replace(dataset=proxy, data_dir=None)


def search_name(base: RunConfig, space: dict, proxy: str | None = None) -> str:
    """The name `create_search` gives the search of ``base`` over ``space`` on ``proxy``: found without
    creating the study, so a second resolution or a preview reopens the same one."""
    return _search_name(proxy_base(base, proxy), check_space(space), base.dataset)


def _search_name(proxied: RunConfig, space: dict, target: str) -> str:
    return study_name("tune", proxied, {**space, "target": target})


def create_search(base: RunConfig, space: dict, *, trials: int = 20, storage_url=None, cache_dir=None,
                  seed: int = 0, proxy: str | None = None) -> optuna.Study:
    """Create (or reopen) a TPE search over ``space`` = {field: [low, high]} (log scale).

    Args:
        base: the run to tune; its ``dataset`` is the private target.
        space: ranges of `TUNABLE` fields.
        trials: the study's budget: workers stop once that many trials are finished or running.
        seed: TPE's seed.
        proxy: a public dataset (`catalog.public_datasets()`) to run the trials on instead of the private one, under the
            same ε so the hyperparameters suit the same noise. ``None`` tunes on the private data: every
            trial then spends privacy that no single run's ε includes.
    """
    target, base = base, proxy_base(base, proxy)
    space = check_space(space)
    name = _search_name(base, space, target.dataset)
    study = optuna.create_study(study_name=name, storage=storage(storage_url, cache_dir), direction="maximize",
                                load_if_exists=True, sampler=optuna.samplers.TPESampler(seed=seed))
    study.set_user_attr("kind", "tune")
    study.set_user_attr("target", target.to_dict())
    study.set_user_attr("proxy", proxy)
    study.set_user_attr("n_trials", max(int(trials), int(study.user_attrs.get("n_trials", 0))))
    study.set_user_attr("base", base.to_dict())
    study.set_user_attr("space", space)
    recover(study)
    return study


def table(study: optuna.Study) -> list[dict]:
    """One row per finished trial: run_id, the varying fields, test accuracy, ε spent. A grid point
    finished twice (two relaunches enqueued it at once) is one row: the first trial's."""
    rows, seen = [], set()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        key = point_key(t.params, sorted(t.params))
        if study.user_attrs.get("kind") != "tune" and key in seen:
            continue
        seen.add(key)
        rows.append(_row(t))
    return rows


def _row(t: optuna.trial.FrozenTrial) -> dict:
    s = t.user_attrs["summary"]
    params = {k: (_eps(v) if k == "epsilon" else v) for k, v in t.params.items()}
    return {"run_id": s["run_id"], **{k: (None if isinstance(v, float) and math.isinf(v) else v)
                                      for k, v in params.items()},
            "test_accuracy": s["test_accuracy"], "test_loss": s.get("test_loss"), "epsilon_spent": s["epsilon_spent"],
            **({"trainable_fraction": s["trainable_fraction"]} if s.get("trainable_fraction") is not None else {})}


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


def search_cost(study: optuna.Study) -> dict | None:
    """What an ordinary search on the private data actually cost (None for one on a public proxy, or
    before a trial finished): its finished trials composed, as if every one were released (the TPE sampler
    chose each from the others' results, and the table shows them all), by the PLD accountant; beside it
    what a search of a random number of trials of the same mean would cost (Papernot & Steinke, Poisson
    and geometric), had its trials been scored privately (`dpviz.sweeps.private`)."""
    from dpviz.privacy import selection
    from dpviz.privacy.accounting import Phase

    if study.user_attrs.get("kind") != "tune" or study.user_attrs.get("proxy") or not selection.available():
        return None
    done = [t.user_attrs["summary"] for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.user_attrs.get("summary", {}).get("private") and t.user_attrs["summary"].get("phases")]
    if not done:
        return None
    delta = done[0]["delta"]
    trials = [[Phase.from_dict(p) for p in s["phases"]] for s in done]
    # the costliest trial stands for every trial of the random-count search (one ε(λ) must bound them all)
    worst = max(trials, key=lambda ph: selection.fixed_count_epsilon(trials=[ph], delta=delta))
    k = len(trials)
    random = {d: (selection.search_epsilon(phases=worst, score_sigma=None, delta=delta, mean_trials=k, distribution=d)
                  if k >= 1 else None) for d in selection.DISTRIBUTIONS}
    return {"trials": k, "delta": delta, "per_trial_epsilon": [s["epsilon_spent"] for s in done],
            "composed_epsilon": selection.fixed_count_epsilon(trials=trials, delta=delta),
            "random_count_epsilon": random, "accountant": "pld (composed); rdp (random count)"}


def studies(url: str | None = None, cache_dir=None, kind: str | None = None, *,
            auto: bool = True) -> list[optuna.Study]:
    """dpviz studies in a storage (newest first), optionally of one kind; without the proxy searches that
    resolved "auto" learning rates unless ``auto`` (nobody launched those: pages do not offer them)."""
    st = storage(url, cache_dir)
    out = []
    for s in reversed(optuna.get_all_study_summaries(st)):
        if not auto and s.user_attrs.get("auto"):
            continue
        if s.study_name.startswith("dpviz-") and (kind is None or s.user_attrs.get("kind") == kind):
            out.append(optuna.load_study(study_name=s.study_name, storage=st))
    return out
