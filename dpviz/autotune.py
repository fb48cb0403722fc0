"""Learning rates that follow ε and spend no privacy: ``lr_* = "auto"`` resolved on public data only.

A config whose learning rates are "auto" (the default) is resolved before it runs, from the first
of these that applies:

1. **shipped**: the grid `autotune_grid.json` that `scripts/build_auto_grid.py` computed for the
   built-in backbones × strategies × ε on the default task, interpolated in log ε (and linearly in
   a strategy's `auto_axes`, e.g. the LP share of lp-fft) — instant;
2. **search**: a small TPE search (`sweeps.create_search`) over the auto fields, every trial an
   ordinary DP run of the *same* configuration — ε, δ, B, epochs, strategy and its fields,
   clipping, C, optimizer, backbone — on a public dataset dpviz generates instead of the private
   one. The study is named by its inputs, so a second resolution reopens it and trains nothing;
3. **default**: where dpviz has no public stand-in for the dataset, the fixed defaults, said so.

No step reads a private record, so resolving costs no privacy — unlike tuning on the private data,
whose cost no run's ε includes. The proxy must look like the private data to the backbone: glyphs
(generated digit glyphs, 16×16 grey, n = 1 500 vs 1 437) stand in for the embedded digits.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from . import catalog
from .config import AUTO_FIELDS, LR_DEFAULTS, RunConfig, switched_off

GRID_PATH = Path(__file__).with_name("autotune_grid.json")
RANGES = {"lr_lp": (0.05, 5.0), "lr_ft": (0.001, 0.3)}
"""Log-scale search range per auto field (the Tuning page's defaults too); the head tolerates far larger
steps than the backbone."""


def proxy_for(dataset: str) -> str | None:
    """The public stand-in a search can use for ``dataset`` (its catalogue entry's ``proxy``), or None."""
    entry = catalog.DATASETS.get(dataset)
    return entry.proxy if entry else None


TRIALS_PER_FIELD = 6
DEFAULTS = LR_DEFAULTS
"""The fixed rates (set for ε ≈ 1 on the default task) that "auto" falls back to without a proxy."""
# fields that do not change which learning rate suits a run (or are the axes / the answer itself)
_NOT_KEY = ("epsilon", "seed", "device", "eval_every", "checkpoint_every", "eval_subset", "grad_sample_mode",
            *AUTO_FIELDS)


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """What "auto" became, and from where.

    Attributes:
        values: auto field → resolved value (fields the strategy does not read keep their defaults).
        source: "shipped", "search", "default", "unused" (the strategy reads none of them) or
            "pending" (a search is needed and has not run: `resolve(..., search=False)`).
        proxy: the public dataset behind the values (None for defaults).
        study: the Optuna study that holds the trials (a shipped point names the builder's study).
        trials: finished proxy trials behind the choice.
        proxy_accuracy: the best trial's test accuracy on the proxy.
        note: one line for people: where the values came from.
    """

    values: dict
    source: str
    proxy: str | None = None
    study: str | None = None
    trials: int = 0
    proxy_accuracy: float | None = None
    note: str = ""

    def as_dict(self) -> dict:
        return {"resolved": dict(self.values), "source": self.source, "proxy": self.proxy, "study": self.study,
                "trials": self.trials, "proxy_accuracy": self.proxy_accuracy, "note": self.note,
                "privacy_spent_on_tuning": 0.0}


def used_fields(cfg: RunConfig) -> tuple[str, ...]:
    """The auto fields ``cfg``'s strategy reads."""
    from . import strategies

    return tuple(f for f in cfg.auto if f in strategies.get(cfg.strategy).lr_fields)


def key_of(cfg: RunConfig) -> str:
    """The shipped grid's key: every field that shapes training but ε, the seed, the auto fields and the
    strategy's interpolation axes; fields of other strategies are left out."""
    from . import strategies

    cls = strategies.get(cfg.strategy)
    others = {f for n in strategies.names() for f in strategies.get(n).fields()} - set(cls.fields())
    d = {k: v for k, v in cfg.to_dict().items()
         if k not in _NOT_KEY and k not in others and k not in cls.auto_axes}
    return json.dumps(d, sort_keys=True)


@functools.lru_cache(maxsize=4)
def _grid(path: str, mtime: float) -> dict[str, dict]:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    return {json.dumps(e["key"], sort_keys=True): smooth(e) for e in doc.get("entries", [])}


def power_law(eps: list[float], values: list[float]) -> tuple[float, float]:
    """Least-squares (a, b) of log value = a · log ε + b: one straight line in log-log per rate."""
    xs, ys = [math.log(e) for e in eps], [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return a, my - a * mx


def smooth(entry: dict) -> dict:
    """``entry`` with each finite-ε rate replaced by a power law in ε fitted over its axis group.

    One short search per grid point ranks a few rates on one seed of the proxy, so neighbouring ε often
    tie on the same start-grid value and the step between them lands at the wrong ε (FFT's optimum
    stays at 0.0115 from ε = 1 to 2, then jumps ×5 by ε = 4). The optimum of DP-SGD's rate grows
    smoothly with the signal-to-noise ratio, so a line in (log ε, log lr) through all of a group's
    points keeps their trend and drops the ties' noise. The raw optima stay under "searched".
    """
    axes = tuple(entry.get("axes", ()))
    groups: dict[tuple, list[dict]] = {}
    for p in entry["points"]:
        if math.isfinite(float(p["epsilon"])):
            groups.setdefault(tuple(p[a] for a in axes), []).append(p)
    points = [p for p in entry["points"] if not math.isfinite(float(p["epsilon"]))]
    for group in groups.values():
        eps = [float(p["epsilon"]) for p in group]
        fits = {f: power_law(eps, [p["values"][f] for p in group]) for f in group[0]["values"]}
        for p, e in zip(group, eps):
            values = {f: min(max(math.exp(a * math.log(e) + b), RANGES[f][0]), RANGES[f][1])
                      for f, (a, b) in fits.items()} if len(set(eps)) >= 3 else p["values"]
            points.append({**p, "values": values, "searched": p["values"]})
    return {**entry, "points": points}


def shipped() -> dict[str, dict]:
    """key → entry ({key, axes, points: [{epsilon, <axes>…, values, proxy_accuracy, study}]}) of the grid."""
    p = GRID_PATH
    return _grid(str(p), p.stat().st_mtime if p.exists() else 0.0)


def _bracket(coords: list[float], x: float) -> list[tuple[float, float]]:
    """[(coordinate, weight)] of the grid values around ``x`` (clamped at the ends) for linear interpolation."""
    if x <= coords[0]:
        return [(coords[0], 1.0)]
    if x >= coords[-1]:
        return [(coords[-1], 1.0)]
    hi = next(i for i, c in enumerate(coords) if c >= x)
    lo, up = coords[hi - 1], coords[hi]
    w = (x - lo) / (up - lo)
    return [(lo, 1.0 - w), (up, w)]


def interpolate(points: list[dict], query: dict, axes: tuple[str, ...], fields) -> dict:
    """Multilinear interpolation of log values over (log ε, *axes) on a rectangular grid of ``points``.

    ε = inf is a grid of its own (no privacy is not a limit of small noise here); outside the grid the
    nearest edge is used.
    """
    private = math.isfinite(query["epsilon"])
    pts = [p for p in points if math.isfinite(float(p["epsilon"])) == private]
    coord = {"epsilon": (lambda v: math.log(float(v))) if private else (lambda v: 0.0)}
    names = ("epsilon", *axes)
    table = {tuple(coord.get(a, float)(p[a]) for a in names): p["values"] for p in pts}
    corners = [((), 1.0)]
    for i, a in enumerate(names):
        cs = sorted({k[i] for k in table})
        corners = [(c + (v,), w * wv) for c, w in corners for v, wv in _bracket(cs, coord.get(a, float)(query[a]))]
    return {f: math.exp(sum(w * math.log(table[c][f]) for c, w in corners if w > 0)) for f in fields}


def lookup(cfg: RunConfig, fields) -> tuple[dict, dict] | None:
    """Interpolated shipped values of ``fields`` for ``cfg`` and the entry they came from, or None."""
    from . import strategies

    entry = shipped().get(key_of(cfg))
    if entry is None or not all(f in entry["points"][0]["values"] for f in fields):
        return None
    if not any(math.isfinite(float(p["epsilon"])) == cfg.private for p in entry["points"]):
        return None
    axes = strategies.get(cfg.strategy).auto_axes
    query = {"epsilon": cfg.epsilon, **{a: getattr(cfg, a) for a in axes}}
    return interpolate(entry["points"], query, axes, fields), entry


def search_base(cfg: RunConfig) -> RunConfig:
    """The config a search tunes: auto fields at their defaults, seed 0, evaluated at the end only."""
    return cfg.fixed_rates().replace(seed=0, checkpoint_every=0, eval_every=10**6, device="auto")


def trials_for(fields) -> int:
    return 2 + TRIALS_PER_FIELD * len(fields)


def _space(fields) -> dict:
    return {f: list(RANGES[f]) for f in fields}


def study_name(cfg: RunConfig, fields) -> str:
    """The name `search` gives (or gave) the study for ``cfg``'s ``fields``, found without creating it."""
    from . import sweeps

    base = search_base(cfg).replace(dataset=proxy_for(cfg.dataset), data_dir=None)
    return sweeps.study_name("tune", base, {**sweeps.check_space(_space(fields)), "target": cfg.dataset})


def start_points(fields, trials: int) -> list[dict]:
    """The first trials of a search: one field, ``trials`` log-spaced values over its range; two or more,
    a 3-per-field log grid (TPE takes over after it)."""
    k = trials if len(fields) == 1 else 3
    qs = [(i + 0.5) / k for i in range(k)] if len(fields) > 1 else [i / (k - 1) for i in range(k)]

    def at(f, q):
        lo, hi = RANGES[f]
        return lo * (hi / lo) ** q

    grid = [{}]
    for f in fields:
        grid = [{**g, f: at(f, q)} for g in grid for q in qs]
    return grid[:trials]


def search(cfg: RunConfig, fields, *, cache_dir=None, trials: int | None = None, seed: int = 0, run: bool = True):
    """The proxy search for ``cfg``'s ``fields``: (study, finished trials); with ``run=False`` nothing trains."""
    from . import execute, sweeps

    trials = trials or trials_for(fields)
    study = sweeps.create_search(search_base(cfg), _space(fields), trials=trials, seed=seed,
                                 proxy=proxy_for(cfg.dataset), cache_dir=cache_dir)
    if not study.get_trials(deepcopy=False):  # start from an even log grid, not TPE's random start-up
        for point in start_points(fields, trials):
            study.enqueue_trial(point)
    study.set_user_attr("auto", True)
    if run:
        sweeps.work(study, run=execute.run, cache_dir=cache_dir)  # trials are concrete configs
    done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and t.value is not None]
    return study, done


def best_trial(done: list):
    """The best finished trial; ties go to the earliest."""
    return max(done, key=lambda t: (t.value, -t.number))


def _finished_search(cfg: RunConfig, fields, cache_dir, trials, seed) -> tuple | None:
    """(study, finished trials) of ``cfg``'s search if it has run to its budget, else None (creates nothing)."""
    import optuna

    from . import sweeps

    if study_name(cfg, fields) not in optuna.get_all_study_names(sweeps.storage(None, cache_dir)):
        return None
    study, done = search(cfg, fields, cache_dir=cache_dir, trials=trials, seed=seed, run=False)
    return (study, done) if len(done) >= study.user_attrs["n_trials"] else None


def resolve(cfg: RunConfig, *, cache_dir=None, trials: int | None = None, seed: int = 0,
            search_ok: bool = True, validate=None) -> tuple[RunConfig, Resolution]:
    """``cfg`` with its "auto" fields replaced, and how they were chosen (see the module docstring).

    Args:
        cfg: a config, possibly with "auto" fields.
        cache_dir: the store whose Optuna journal keeps searches (and whose runs are the trials).
        trials: a search's trial budget (default: 2 + 6 per searched field).
        seed: TPE's seed; resolution is deterministic given it.
        search_ok: False returns source "pending" (``cfg`` unchanged) where a search would have to train.
        validate: called with ``cfg`` before a search trains (the runner passes `engine.preview`, which
            checks δ against the private data's size; resolving itself reads no private data).

    ``DPVIZ_AUTO_SEARCH=off`` never trains a search: configs off the shipped grid without a finished
    search take the fixed defaults (source "default"), e.g. for batch jobs that must not wait.

    The Optuna journal (``<cache>/optuna.journal``) is read only for rates that are neither explicit,
    nor shipped, nor of a dataset without a proxy, so a damaged journal blocks no such run. Where it
    must be read it is a `StoreError` naming the file, ``DPVIZ_AUTO_SEARCH=off`` or not: the defaults
    or a new search would silently give the run other rates than the finished search it cannot read.
    Once the file is moved away, a new search's trials are answered from the store where they match
    runs the old one made.
    """
    if not cfg.auto:
        return cfg, Resolution(values={}, source="explicit")
    from . import strategies

    stand_in = strategies.get(cfg.strategy).auto_as
    if stand_in:  # e.g. continual takes DP-FFT's rates: the same private schedule and σ
        out, res = resolve(cfg.replace(strategy=stand_in), cache_dir=cache_dir, trials=trials, seed=seed,
                           search_ok=search_ok, validate=validate)
        if out.auto:
            return cfg, res
        values = {f: getattr(out, f) for f in cfg.auto}
        return cfg.replace(**values), replace(res, values=values, note=f"{stand_in}'s rates, {res.note}")
    fields = used_fields(cfg)
    defaults = {f: DEFAULTS[f] for f in cfg.auto}
    if not fields:
        return cfg.replace(**defaults), Resolution(values=defaults, source="unused",
                                                   note=f"{cfg.strategy} reads none of {', '.join(cfg.auto)}")
    hit = lookup(cfg, fields)
    if hit is not None:
        vals, entry = hit
        values = {**defaults, **{f: float(f"{vals[f]:.4g}") for f in fields}}
        return cfg.replace(**values), Resolution(
            values=values, source="shipped", proxy=entry["proxy"], study=entry.get("study"),
            trials=entry.get("trials", 0), note=f"shipped grid (tuned on {entry['proxy']}, a power law in ε, interpolated)")
    proxy = proxy_for(cfg.dataset)
    if proxy is None:
        return cfg.replace(**defaults), Resolution(
            values=defaults, source="default",
            note=f"fixed defaults: dpviz has no public stand-in for {cfg.dataset} (set the rates to tune them)")
    found = _finished_search(cfg, fields, cache_dir, trials, seed)
    if found is None:  # a search would have to train
        if switched_off("DPVIZ_AUTO_SEARCH"):
            return cfg.replace(**defaults), Resolution(
                values=defaults, source="default", note="fixed defaults: DPVIZ_AUTO_SEARCH=off and no shipped point")
        if not search_ok:
            return cfg, Resolution(values={}, source="pending", proxy=proxy, study=study_name(cfg, fields),
                                   note=f"searched at launch: {trials or trials_for(fields)} short DP runs on "
                                        f"{proxy}, no private data")
        if validate is not None:
            validate(cfg)  # bad input is a one-line error before any proxy run
        found = search(cfg, fields, cache_dir=cache_dir, trials=trials, seed=seed)
    study, done = found
    best = best_trial(done)
    values = {**defaults, **{f: float(f"{best.params[f]:.4g}") for f in fields}}
    return cfg.replace(**values), Resolution(values=values, source="search", proxy=proxy, study=study.study_name,
                                             trials=len(done), proxy_accuracy=best.value,
                                             note=f"searched on {proxy}: {len(done)} runs, no private data")
