"""Resolving "auto" learning rates in one pass (the sources and their order: `dpviz.autotune`).

The config is read once into a frozen `Query` (the strategy whose rates it takes, the fields that strategy
reads, the grid's key and point, the proxy, the ranges, the search's study name); the sources are tried
in order on that query — the shipped grid, the fixed defaults where no proxy exists, a finished search,
a new search — and the answer is applied with one `replace` at the end.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from dpviz.autotune import grid, proxy
from dpviz.config import LR_DEFAULTS, RunConfig, switched_off

DEFAULTS = LR_DEFAULTS
"""The fixed rates (set for ε ≈ 1 on the default task) that "auto" falls back to without a proxy."""


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """What "auto" became, and from where.

    Attributes:
        values: auto field → resolved value (fields the strategy does not read keep their defaults).
        source: "shipped", "nearest" (the nearest shipped entry, asked for), "search", "default", "unused" (the
            strategy reads none of them) or
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


@dataclass(frozen=True)
class Query:
    """What resolving reads from a config and the strategy registry, read once.

    Attributes:
        asked: the config as given, "auto" fields included.
        tuned: the config whose rates are looked up or searched: ``asked``, or ``asked`` with the strategy
            whose rates it takes (`Strategy.auto_as`: continual takes DP-FFT's, the same schedule and σ).
        stand_in: that strategy's name, or None.
        fields: the auto fields the tuned strategy reads.
        key: the shipped grid's key of ``tuned`` (`grid.key_of`).
        point: where the grid is read: {"epsilon": ε, <the strategy's auto axes>: value}.
        axes: the strategy's auto axes.
        proxy: the public stand-in of the private dataset, or None.
        ranges: the log-scale range a search covers per field.
    """

    asked: RunConfig
    tuned: RunConfig
    stand_in: str | None
    fields: tuple[str, ...]
    key: str
    point: dict
    axes: tuple[str, ...]
    proxy: str | None
    ranges: dict

    @property
    def defaults(self) -> dict:
        return {f: DEFAULTS[f] for f in self.asked.auto}

    @functools.cached_property
    def study(self) -> str:
        """The name of the search's study (found without creating it); worked out only where a search is asked."""
        return proxy.proxy_study_name(self.tuned, self.fields)

    def answer(self, res: Resolution) -> tuple[RunConfig, Resolution]:
        """The one `replace`: ``asked`` with the resolved values (unchanged while a search is pending)."""
        if self.stand_in and res.source not in ("pending", "explicit"):
            res = replace(res, note=f"{self.stand_in}'s rates, {res.note}")
        return (self.asked.replace(**res.values) if res.values else self.asked), res


def query(cfg: RunConfig) -> Query:
    """``cfg`` read once: one registry look-up (two for a strategy that takes another's rates)."""
    from dpviz import strategies

    cls = strategies.get(cfg.strategy)
    tuned, stand_in = cfg, cls.auto_as
    if stand_in:
        cls = strategies.get(stand_in)
        tuned = cfg.replace(strategy=stand_in)
    fields = tuple(f for f in tuned.auto if f in cls.lr_fields)
    return Query(asked=cfg, tuned=tuned, stand_in=stand_in, fields=fields, key=grid.key_of(tuned, cls),
                 point={"epsilon": tuned.epsilon, **{a: getattr(tuned, a) for a in cls.auto_axes}},
                 axes=cls.auto_axes, proxy=proxy.proxy_for(tuned.dataset),
                 ranges=proxy.space_of(fields, tuned.private))


def used_fields(cfg: RunConfig) -> tuple[str, ...]:
    """The auto fields ``cfg``'s strategy reads."""
    from dpviz import strategies

    return tuple(f for f in cfg.auto if f in strategies.get(cfg.strategy).lr_fields)


def _values(q: Query, found: dict) -> dict:
    """Every auto field: the found rates of the fields the strategy reads (4 significant digits), defaults elsewhere."""
    return {**q.defaults, **{f: float(f"{found[f]:.4g}") for f in q.fields}}


def _unused(q: Query, **_) -> Resolution | None:
    if q.fields:
        return None
    return Resolution(values=q.defaults, source="unused",
                      note=f"{q.tuned.strategy} reads none of {', '.join(q.asked.auto)}")


def _shipped(q: Query, **_) -> Resolution | None:
    hit = grid.lookup_key(q.key, q.point, q.axes, q.fields)
    if hit is None:
        return None
    found, entry = hit
    values = _values(q, found)
    return Resolution(
        values=values, source="shipped", proxy=entry["proxy"], study=entry.get("study"),
        trials=entry.get("trials", 0), note=f"shipped grid (tuned on {entry['proxy']}, a power law in ε, interpolated)",
        warning=proxy.edge_warning(values, q.ranges, proxy.at_edges(values, q.ranges), extended=False,
                                   how="which the shipped grid's searches did not extend"))


def _nearest(q: Query, *, rates: str = "search", **_) -> Resolution | None:
    """With ``rates="grid"``: the nearest shipped grid entry's rates instead of a search (none: the defaults)."""
    if rates != "grid":
        return None
    near = grid.nearest_key(q.key)
    hit = grid.lookup_key(near[0], q.point, q.axes, q.fields) if near else None
    if hit is None:
        return Resolution(values=q.defaults, source="default",
                          note=f"fixed defaults: --rates grid, and the shipped grid has no {q.tuned.strategy} on "
                               f"{q.tuned.dataset} with {q.tuned.backbone}")
    found, entry = hit
    apart = ", ".join(f"{f} {g} (asked {a})" for f, (a, g) in near[1].items())
    if "mechanism" in near[1] or "bands" in near[1]:  # only the rates are taken: the run's noise is its own
        apart += f"; the run keeps its own noise ({_noise_words(q.tuned)})"
    return Resolution(values=_values(q, found), source="nearest", proxy=entry["proxy"], study=entry.get("study"),
                      trials=entry.get("trials", 0),
                      note=f"nearest shipped grid point (tuned on {entry['proxy']}), no search: {apart}")


def _noise_words(cfg: RunConfig) -> str:
    return f"{cfg.mechanism}, b = {cfg.bands}" if cfg.mechanism != "dp-sgd" else "DP-SGD"


def _no_proxy(q: Query, **_) -> Resolution | None:
    if q.proxy is not None:
        return None
    return Resolution(values=q.defaults, source="default",
                      note=f"fixed defaults: dpviz has no public stand-in for {q.tuned.dataset} (set the rates to tune them)")


def _searched(q: Query, *, cache_dir, trials, seed, search_ok, validate, progress, cancel, **_) -> Resolution:
    """A finished search's answer, or a new search's (trained here unless ``search_ok`` is False)."""
    cfg, fields = q.tuned, q.fields
    found = proxy.finished_search(cfg, fields, cache_dir, trials, seed, name=q.study)
    if found is None:  # a search would have to train
        if switched_off("DPVIZ_AUTO_SEARCH"):
            return Resolution(values=q.defaults, source="default",
                              note="fixed defaults: DPVIZ_AUTO_SEARCH=off and no shipped point")
        if not search_ok:
            return Resolution(values={}, source="pending", proxy=q.proxy, study=q.study,
                              note=f"searched at launch: {trials or proxy.trials_for(fields)} short DP runs on "
                                   f"{q.proxy}, no private data")
        if validate is not None:
            validate(cfg)  # bad input is a one-line error before any proxy run
        found = proxy.search(cfg, fields, cache_dir=cache_dir, trials=trials, seed=seed, progress=progress,
                             cancel=cancel)
    study, done = found
    best = proxy.best_trial(done)
    params, accuracy, ranges, beyond = dict(best.params), best.value, dict(q.ranges), []
    sides = proxy.at_edges(params, ranges)
    ext = proxy.extension(cfg, fields, done, cache_dir=cache_dir, seed=seed, run=False) if sides else None
    if ext is not None and len(ext[1]) < proxy.EXTEND_TRIALS and not switched_off("DPVIZ_AUTO_SEARCH"):
        if not search_ok:
            return Resolution(values={}, source="pending", proxy=q.proxy, study=study.study_name,
                              note=f"searched at launch: {proxy.EXTEND_TRIALS} more short DP runs on {q.proxy} "
                                   "beyond the end of the range the best rate sits at, no private data")
        ext = proxy.extension(cfg, fields, done, cache_dir=cache_dir, seed=seed)
    if ext is not None and ext[0] is not None and len(ext[1]) >= proxy.EXTEND_TRIALS:  # extended beyond its end
        beyond = ext[1]
        ranges = {f: ([min(lo, ext[0].user_attrs["space"][f][0]), max(hi, ext[0].user_attrs["space"][f][1])]
                      if f in sides else [lo, hi]) for f, (lo, hi) in ranges.items()}
        out = proxy.best_trial(beyond)
        if out.value > accuracy:
            params, accuracy = {**params, **out.params}, out.value
    more = f" + {len(beyond)} beyond the end of the range" if beyond else ""
    return Resolution(
        values=_values(q, params), source="search", proxy=q.proxy, study=study.study_name,
        trials=len(done) + len(beyond), proxy_accuracy=accuracy,
        note=f"searched on {q.proxy}: {len(done)} runs{more}, no private data",
        warning=proxy.chance_warning(q.proxy, accuracy) or proxy.edge_warning(params, ranges, sides, extended=bool(beyond)))


SOURCES = (_unused, _shipped, _nearest, _no_proxy, _searched)
"""Tried in order on the query; the first that answers decides (`_searched` always answers)."""


def resolve(cfg: RunConfig, *, cache_dir=None, trials: int | None = None, seed: int = 0,
            search_ok: bool = True, validate=None, progress=None, cancel=None,
            rates: str = "search") -> tuple[RunConfig, Resolution]:
    """``cfg`` with its "auto" fields replaced, and how they were chosen (see `dpviz.autotune`).

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
        rates: "search" (a setting off the shipped grid is searched) or "grid" (it takes the nearest shipped grid
            entry's rates, source "nearest", and its note says how far that entry is from the setting).

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
    q = query(cfg)
    ctx = dict(cache_dir=cache_dir, trials=trials, seed=seed, search_ok=search_ok, validate=validate,
               progress=progress, cancel=cancel, rates=rates)
    return q.answer(next(r for source in SOURCES if (r := source(q, **ctx)) is not None))
