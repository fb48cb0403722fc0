"""The shipped grid of tuned learning rates (`grid.json`): read, smoothed and interpolated.

`scripts/build_auto_grid.py` tuned every built-in backbone × strategy × ε of the default task on the
public proxy; each entry's rates are smoothed by a power law in ε and interpolated in log ε (and
linearly in a strategy's `auto_axes`, e.g. the LP share of lp-fft). `dpviz.autotune` asks `lookup`
first: a shipped answer is instant and trains nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

from dpviz.config import AUTO_FIELDS, RunConfig

GRID_PATH = Path(__file__).with_name("grid.json")
RANGES = {"lr_lp": (0.05, 5.0), "lr_ft": (0.001, 0.3)}
"""Log-scale search range per auto field (the Tuning page's defaults too); the head tolerates far larger
steps than the backbone."""
PLAIN_RANGES = {"lr_lp": (1e-4, 1.0), "lr_ft": (1e-4, 0.3)}
"""The same for a non-private run (ε = ∞): its step is the raw mean gradient, not a sum of per-example
gradients clipped to norm C, so a safe rate scales with 1/‖features‖² (≈ 1/4000 on EfficientNet-Lite0's
features, where every rate of `RANGES` diverges)."""
# fields that do not change which learning rate suits a run (or are the axes / the answer itself)
_NOT_KEY = ("epsilon", "seed", "device", "batch_shapes", "eval_every", "checkpoint_every", "eval_subset", "grad_sample_mode",
            "precision", "keep_weights", "holdout", "randomness", "privacy_check", *AUTO_FIELDS)  # precision: the rates tuned in FP32 serve a
# bf16 run; holdout: a private search's trials train on n − k examples (k ≤ n/5 by default), the rate of n


def key_of(cfg: RunConfig, cls=None) -> str:
    """The shipped grid's key: every field that shapes training but ε, the seed, the auto fields and the
    strategy's interpolation axes; fields of other strategies are left out. ``cls``: ``cfg``'s strategy
    class, where the caller has it already."""
    from dpviz import strategies

    cls = cls or strategies.get(cfg.strategy)
    others = strategies.strategy_fields() - set(cls.fields())
    d = {k: v for k, v in cfg.to_dict().items()
         if k not in _NOT_KEY and k not in others and k not in cls.auto_axes}
    hashed = json.loads(cfg.to_json(hashed_only=True))  # fields added later count only where they are hashed
    for k in ("max_length", "train_size", "mechanism", "bands", "parts", "clip_fraction_noise"):
        if k not in hashed:
            d.pop(k, None)
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


SAME = ("strategy", "dataset", "backbone")  # a nearest grid point must share these: rates do not carry across


def nearest_key(key: str) -> tuple[str, dict[str, tuple]] | None:
    """The shipped grid's key closest to ``key`` (a `key_of`), and its differences {field: (asked, grid's)}; None
    where no entry shares ``key``'s strategy, dataset and backbone. Closest: an entry of the asked noise mechanism
    first (BandMF's rates are tuned under its own noise, which reaches the weights κ times DP-SGD's), then one
    of its family (banded or not), then the fewest differing fields, then the smallest Σ |log(asked / grid's)|
    over the numeric ones."""
    asked = json.loads(key)
    # a field a grid key leaves out is at its default (`key_of` drops fields added later where not hashed)
    defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)}

    def full(k: dict) -> dict:
        return {**{f: defaults.get(f) for f in asked if f not in k}, **k}

    def distance(k: dict) -> tuple[int, int, float]:
        k = full(k)
        diff = [f for f in set(asked) | set(k) if asked.get(f) != k.get(f)]
        spread = sum(abs(math.log(asked[f] / k[f])) for f in diff if isinstance(asked.get(f), (int, float))
                     and isinstance(k.get(f), (int, float)) and asked[f] > 0 and k[f] > 0)
        return _mechanism_apart(asked.get("mechanism"), k.get("mechanism")), len(diff), spread

    near = [(distance(k), s) for s, k in ((s, json.loads(s)) for s in shipped())
            if all(k.get(f) == asked.get(f) for f in SAME)]
    if not near:
        return None
    best = min(near)[1]
    grid = full(json.loads(best))
    return best, {f: (asked.get(f), grid.get(f)) for f in sorted(set(asked) | set(grid)) if asked.get(f) != grid.get(f)}


def _mechanism_apart(asked: str | None, grid: str | None) -> int:
    """0: the same noise mechanism; 1: the same family (both banded, or neither); 2: the other family."""
    if asked == grid:
        return 0
    banded = [str(m or "dp-sgd").startswith("bandmf") for m in (asked, grid)]
    return 1 if banded[0] == banded[1] else 2


def lookup_key(key: str, point: dict, axes: tuple[str, ...], fields) -> tuple[dict, dict] | None:
    """Interpolated shipped values of ``fields`` at ``point`` ({"epsilon": ε, axis: value}) of the entry
    under ``key``, and that entry; None where the grid has no such entry or no point of ε's kind."""
    entry = shipped().get(key)
    if entry is None or not all(f in entry["points"][0]["values"] for f in fields):
        return None
    private = math.isfinite(point["epsilon"])
    if not any(math.isfinite(float(p["epsilon"])) == private for p in entry["points"]):
        return None
    return interpolate(entry["points"], point, axes, fields), entry


def lookup(cfg: RunConfig, fields) -> tuple[dict, dict] | None:
    """Interpolated shipped values of ``fields`` for ``cfg`` and the entry they came from, or None."""
    from dpviz import strategies

    cls = strategies.get(cfg.strategy)
    return lookup_key(key_of(cfg, cls), {"epsilon": cfg.epsilon, **{a: getattr(cfg, a) for a in cls.auto_axes}},
                      cls.auto_axes, fields)
