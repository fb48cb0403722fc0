"""Learning rates that follow ε and spend no privacy: ``lr_* = "auto"`` resolved on public data only.

A config whose learning rates are "auto" (the default) is resolved before it runs, from the first
of these that applies:

1. **shipped**: the grid `dpviz/autotune/grid.json` that `scripts/build_auto_grid.py` computed for the
   built-in backbones × strategies × ε on the default task, interpolated in log ε (and linearly in
   a strategy's `auto_axes`, e.g. the LP share of lp-fft) — instant;
2. **search**: a small TPE search (`sweeps.create_search`) over the auto fields, every trial an
   ordinary DP run of the *same* configuration — ε, δ, B, epochs, strategy and its fields,
   clipping, C, optimizer, backbone — on a public dataset dpviz generates instead of the private
   one. The study is named by its inputs, so a second resolution reopens it and trains nothing.
   Where the best trial sits at an end of its range, 3 more trials cover the decade beyond that end;
   a best still at the (new) end is said in the resolution's ``warning``;
3. **default**: where dpviz has no public stand-in for the dataset, the fixed defaults, said so.

No step reads a private record, so resolving costs no privacy — unlike tuning on the private data,
whose cost no run's ε includes. The proxy must look like the private data to the backbone: glyphs
(generated digit glyphs, 16×16 grey, n = 1 500 vs 1 437) stand in for the embedded digits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dpviz.config import LR_DEFAULTS, RunConfig, switched_off
from dpviz.autotune.proxy import (  # noqa: F401  (the search, run when neither the grid nor a finished search answers)
    EDGE, EXTEND_TRIALS, TRIALS_PER_FIELD, edge_warning, finished_search, space_of, at_edges, best_trial,
    chance_warning, extension, proxy_for, search, search_base, start_points, study_name, trials_for)
from dpviz.autotune.grid import (  # noqa: F401  (the shipped grid, read here first; its names stay reachable here)
    GRID_PATH, PLAIN_RANGES, RANGES, interpolate, key_of, lookup, power_law, shipped, smooth)



DEFAULTS = LR_DEFAULTS
"""The fixed rates (set for ε ≈ 1 on the default task) that "auto" falls back to without a proxy."""


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
        warning: one line when a searched value is still at an end of its range after the range was
            extended one decade beyond it, or a shipped value sits at an end of the range the grid's searches
            covered (the best rate may lie further out), else "".
    """

    values: dict
    source: str
    proxy: str | None = None
    study: str | None = None
    trials: int = 0
    proxy_accuracy: float | None = None
    note: str = ""
    warning: str = ""

    def as_dict(self) -> dict:
        return {"resolved": dict(self.values), "source": self.source, "proxy": self.proxy, "study": self.study,
                "trials": self.trials, "proxy_accuracy": self.proxy_accuracy, "note": self.note,
                "warning": self.warning, "privacy_spent_on_tuning": 0.0}


def used_fields(cfg: RunConfig) -> tuple[str, ...]:
    """The auto fields ``cfg``'s strategy reads."""
    from dpviz import strategies

    return tuple(f for f in cfg.auto if f in strategies.get(cfg.strategy).lr_fields)


def resolve(cfg: RunConfig, *, cache_dir=None, trials: int | None = None, seed: int = 0,
            search_ok: bool = True, validate=None, progress=None, cancel=None) -> tuple[RunConfig, Resolution]:
    """``cfg`` with its "auto" fields replaced, and how they were chosen (see the module docstring).

    Args:
        cfg: a config, possibly with "auto" fields.
        cache_dir: the store whose Optuna journal keeps searches (and whose runs are the trials).
        trials: a search's trial budget (default: 2 + 6 per searched field).
        seed: TPE's seed; resolution is deterministic given it.
        search_ok: False returns source "pending" (``cfg`` unchanged) where a search would have to train.
        validate: called with ``cfg`` before a search trains (the runner passes `calibration.preview`, which
            checks δ against the private data's size; resolving itself reads no private data).
        progress: a search's ``progress(k, n)``, called before trial k of n (`search`).
        cancel: a search's cancel event (`search`).

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
    from dpviz import strategies

    stand_in = strategies.get(cfg.strategy).auto_as
    if stand_in:  # e.g. continual takes DP-FFT's rates: the same private schedule and σ
        out, res = resolve(cfg.replace(strategy=stand_in), cache_dir=cache_dir, trials=trials, seed=seed,
                           search_ok=search_ok, validate=validate, progress=progress, cancel=cancel)
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
        ranges = space_of(fields)  # the range the grid's searches covered, as a search at launch does
        return cfg.replace(**values), Resolution(
            values=values, source="shipped", proxy=entry["proxy"], study=entry.get("study"),
            trials=entry.get("trials", 0), note=f"shipped grid (tuned on {entry['proxy']}, a power law in ε, interpolated)",
            warning=edge_warning(values, ranges, at_edges(values, ranges), extended=False,
                                 how="which the shipped grid's searches did not extend"))
    proxy = proxy_for(cfg.dataset)
    if proxy is None:
        return cfg.replace(**defaults), Resolution(
            values=defaults, source="default",
            note=f"fixed defaults: dpviz has no public stand-in for {cfg.dataset} (set the rates to tune them)")
    found = finished_search(cfg, fields, cache_dir, trials, seed)
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
        found = search(cfg, fields, cache_dir=cache_dir, trials=trials, seed=seed, progress=progress, cancel=cancel)
    study, done = found
    best = best_trial(done)
    params, accuracy, ranges, beyond = dict(best.params), best.value, space_of(fields, cfg.private), []
    sides = at_edges(params, ranges)
    ext = extension(cfg, fields, done, cache_dir=cache_dir, seed=seed, run=False) if sides else None
    if ext is not None and len(ext[1]) < EXTEND_TRIALS and not switched_off("DPVIZ_AUTO_SEARCH"):
        if not search_ok:
            return cfg, Resolution(values={}, source="pending", proxy=proxy, study=study.study_name,
                                   note=f"searched at launch: {EXTEND_TRIALS} more short DP runs on {proxy} beyond "
                                        "the end of the range the best rate sits at, no private data")
        ext = extension(cfg, fields, done, cache_dir=cache_dir, seed=seed)
    if ext is not None and ext[0] is not None and len(ext[1]) >= EXTEND_TRIALS:  # extended beyond the end it reached
        beyond = ext[1]
        ranges = {f: ([min(lo, ext[0].user_attrs["space"][f][0]), max(hi, ext[0].user_attrs["space"][f][1])]
                      if f in sides else [lo, hi]) for f, (lo, hi) in ranges.items()}
        out = best_trial(beyond)
        if out.value > accuracy:
            params, accuracy = {**params, **out.params}, out.value
    values = {**defaults, **{f: float(f"{params[f]:.4g}") for f in fields}}
    more = f" + {len(beyond)} beyond the end of the range" if beyond else ""
    return cfg.replace(**values), Resolution(
        values=values, source="search", proxy=proxy, study=study.study_name, trials=len(done) + len(beyond),
        proxy_accuracy=accuracy, note=f"searched on {proxy}: {len(done)} runs{more}, no private data",
        warning=chance_warning(proxy, accuracy) or edge_warning(params, ranges, sides, extended=bool(beyond)))
