"""What each `RunConfig` field may hold: the choices, the ranges, reading numbers from text and files,
and the checks that need no data (`dpviz.training.calibration` checks what needs n and the backbone).

`dpviz.config` builds a `RunConfig` and calls `coerce` and `validate` on it; this module sits below it
and reads a config's fields by name only, so neither imports the other in a circle. The strategy's own
rules come from `dpviz.strategies`, the dataset's and backbone's from `dpviz.catalog`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math

from dpviz import catalog, strategies
from dpviz.errors import ConfigError, missing_package
from dpviz.privacy import accountants
from dpviz.privacy.bandmf import BANDED, MAX_BANDS, MECHANISMS, PARTS
from dpviz.privacy.randomness import RANDOMNESS

OPTIMIZERS = ("sgd", "adam", "adamw")
CLIPPINGS = ("abadi", "auto-s")
AUTO = "auto"
AUTO_FIELDS = ("lr_lp", "lr_ft")  # may be "auto": chosen on a public proxy, no privacy spent
# The fixed rates (set for ε ≈ 1 on the default task) that "auto" falls back to without a proxy, and
# what "auto" becomes for a rate the strategy does not read.
LR_DEFAULTS = {"lr_lp": 0.5, "lr_ft": 0.01}
GRAD_SAMPLE_MODES = ("auto", "bk", "hooks")
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")  # `dpviz.privacy.precision`
KEEP_WEIGHTS = ("checkpoints", "final", "none")  # what the store keeps of a run's model
MAX_EPSILON = 100.0  # beyond it ε bounds nothing (e^ε ≈ 10^43), and PRV's domain overflows near 709
# Upper ends that keep a run finite on any machine (T = epochs · n / B accountant steps, torch's seeds).
_INT_RANGES = {"batch_size": (1, 10**7), "epochs": (1, 10**5), "eval_every": (1, 10**9),
               "checkpoint_every": (-1, 10**9), "eval_subset": (10, 10**6), "seed": (0, 2**63 - 1),
               "max_length": (8, 512), "train_size": (0, 10**7), "holdout": (0, 10**6),
               "batch_shapes": (-1, 16), "bands": (1, MAX_BANDS), "privacy_check": (0, 64)}
_TEXT_FIELDS = ("data_dir", "weights")  # a path or nothing
TEXT_ONLY_FIELDS = ("max_length",)  # read only by text datasets (the tokenizer's truncation)

# The longest schedule one run may have: every step is a DP step (≥ 2 ms even for the built-in CNN at
# B = 1 on a 2-core CPU, measured), the run stores metrics every eval_every steps and the accountant's
# curve grows with T, so 100,000 steps is already minutes to hours; beyond it a run is refused up front.
MAX_STEPS = 100_000
STEP_FLOOR_S = 0.002


def total_steps(cfg, n: int) -> int:
    """T = epochs · round(n/B) private steps for a training set of ``n``; ConfigError beyond `MAX_STEPS`."""
    steps = cfg.epochs * max(1, round(n / cfg.batch_size))
    if steps > MAX_STEPS:
        hours = steps * STEP_FLOOR_S / 3600
        raise ConfigError("epochs", f"epochs × round(n/B) = {cfg.epochs} × {steps // cfg.epochs} = {steps:,} steps, "
                          f"over dpviz's limit of {MAX_STEPS:,} a run (at ≥ {STEP_FLOOR_S * 1000:g} ms a step, "
                          f"≥ {hours:.3g} h); lower epochs or raise batch_size", cfg.epochs)
    return steps

_TYPES = {"epsilon": float, "delta": float, "clip_norm": float, "lr_lp": float, "lr_ft": float, "batch_size": int,
          "epochs": int, "seed": int, "eval_every": int, "checkpoint_every": int, "eval_subset": int, "max_length": int,
          "train_size": int, "holdout": int, "batch_shapes": int, "bands": int,
          "privacy_check": int, "clip_fraction_noise": float}  # the shared numeric fields


def numeric_types() -> dict[str, type]:
    """Every numeric field's type: the shared ones, and each strategy's own as it declares it."""
    return {**_TYPES, **{n: p.type for n, p in strategies.knobs().items() if p.type is not str}}


def coerce(cfg) -> None:
    """Turn strings from flags/files into numbers; "inf" means no privacy (`parse_epsilon`)."""
    for name, typ in numeric_types().items():
        v = getattr(cfg, name)
        if isinstance(v, bool):
            raise ConfigError(name, f"a number ({typ.__name__})", v)
        if name == "epsilon" and isinstance(v, str):
            v = parse_epsilon(v)
        if name == "switch_step" and isinstance(v, str) and v.strip().lower() == "auto":
            v = -1
        if name in AUTO_FIELDS and isinstance(v, str) and v.strip().lower() == AUTO:
            object.__setattr__(cfg, name, AUTO)  # resolved on public data before the run (`dpviz.autotune`)
            continue
        try:
            cv = typ(v)
        except (TypeError, ValueError, OverflowError):
            allowed = "a finite number > 0 or auto" if name in AUTO_FIELDS else f"a number ({typ.__name__})"
            raise ConfigError(name, allowed, v) from None
        if typ is int and isinstance(v, float) and v != int(v):
            raise ConfigError(name, "a whole number", v)
        object.__setattr__(cfg, name, cv)


NO_DP = "inf"  # the one spelling of "no DP", on the command line and in files alike
EPSILON_ALLOWED = f'a number in (0, {MAX_EPSILON:g}], or "{NO_DP}" for no DP'


def parse_epsilon(text: str, field: str = "epsilon") -> float:
    """ε typed as text: a number, or exactly "inf" (any case) for no DP.

    Anything else that a float parser reads as ∞ ("1e999", "Infinity") or that other tools use for
    "nothing" ("none") is refused: a typo must never turn DP off.
    """
    t = text.strip()
    if t.lower() == NO_DP:
        return math.inf
    try:
        v = float(t)
    except ValueError:
        raise ConfigError(field, EPSILON_ALLOWED, text) from None
    if not math.isfinite(v):
        raise ConfigError(field, EPSILON_ALLOWED, text)
    return v


def finite_numbers(d: dict, path) -> None:
    """Refuse ∞ and NaN written as numbers in a config file (JSON 1e999 / Infinity / NaN, TOML inf / nan):
    a file spells no DP as the string "inf", so an overflowing number cannot turn DP off."""
    for k, v in d.items():
        if isinstance(v, float) and not math.isfinite(v):
            allowed = EPSILON_ALLOWED if k == "epsilon" else "a finite number"
            raise ConfigError(str(k), f"{allowed} (in {path}, a number that reads as {v} is refused)", v)


def _choice(cfg, name, allowed):
    if getattr(cfg, name) not in allowed:
        raise ConfigError(name, f"one of {', '.join(allowed)}", getattr(cfg, name))


def validate(cfg) -> None:
    """Checks that need no data; `prepare.prepare` checks δ ≤ 1/n and block counts.

    The strategy's own rules (and every strategy's field ranges) come from `dpviz.strategies`.
    """
    for name, allowed in (("dataset", tuple(catalog.DATASETS)), ("backbone", tuple(catalog.BACKBONES)),
                          ("strategy", strategies.names()),
                          ("accountant", accountants.names()), ("optimizer", OPTIMIZERS),
                          ("grad_sample_mode", GRAD_SAMPLE_MODES), ("device", DEVICES), ("clipping", CLIPPINGS),
                          ("precision", PRECISIONS), ("keep_weights", KEEP_WEIGHTS), ("mechanism", MECHANISMS),
                          ("randomness", RANDOMNESS), ("parts", PARTS)):
        _choice(cfg, name, allowed)
    acc = accountants.get(cfg.accountant)
    if cfg.epsilon != math.inf and not acc.available():  # before any training, not at σ
        raise missing_package("accountant", f"accountant {acc.name}", acc.package)
    if cfg.precision != "fp32" and cfg.grad_sample_mode == "hooks":
        raise ConfigError("precision", "fp32 with grad_sample_mode hooks (mixed precision runs on book-keeping: "
                          "grad_sample_mode bk or auto)", cfg.precision)
    if math.isnan(cfg.epsilon) or cfg.epsilon <= 0 or (math.isfinite(cfg.epsilon) and cfg.epsilon > MAX_EPSILON):
        raise ConfigError("epsilon", EPSILON_ALLOWED, cfg.epsilon)
    if not 0 < cfg.delta < 1:
        raise ConfigError("delta", "must be in (0, 1/n] where n is the training-set size", cfg.delta)
    for name in ("clip_norm", "lr_lp", "lr_ft"):
        v = getattr(cfg, name)
        if v == AUTO and name in AUTO_FIELDS:
            continue
        if not (math.isfinite(v) and v > 0):
            allowed = "a finite number > 0 or auto" if name in AUTO_FIELDS else "a finite number > 0"
            raise ConfigError(name, f"must be {allowed}", v)
    for name, (lo, hi) in _INT_RANGES.items():
        if not lo <= getattr(cfg, name) <= hi:
            raise ConfigError(name, f"must be an integer in [{lo}, {hi}]", getattr(cfg, name))
    for name in _TEXT_FIELDS:
        v = getattr(cfg, name)
        if v is not None and (not isinstance(v, str) or not v.strip()):
            raise ConfigError(name, "a path (text), or nothing", v)
    if not (math.isfinite(cfg.clip_fraction_noise) and cfg.clip_fraction_noise >= 0):
        raise ConfigError("clip_fraction_noise", "a finite number ≥ 0 (0: no privatised clip fraction)",
                          cfg.clip_fraction_noise)
    if cfg.clip_fraction_noise and not math.isfinite(cfg.epsilon):
        raise ConfigError("clip_fraction_noise", "0 without DP (epsilon inf): the exact clip fraction is free there",
                          cfg.clip_fraction_noise)
    if cfg.bands > 1 and cfg.mechanism not in BANDED:
        raise ConfigError("bands", "1 with mechanism dp-sgd (bands correlate the noise: mechanism bandmf or "
                          "bandmf-momentum)", cfg.bands)
    if cfg.mechanism == "bandmf-momentum" and cfg.optimizer != "sgd":
        raise ConfigError("mechanism", "bandmf-momentum only with optimizer sgd, whose momentum its noise fits; "
                          f"with {cfg.optimizer}, bandmf or dp-sgd", cfg.mechanism)
    chosen = strategies.get(cfg.strategy)  # looked up once for every check below
    strategies.validate(cfg, chosen)
    check_unread(cfg, chosen)
    _check_sources(cfg)


def _check_sources(cfg) -> None:
    """A data folder exactly for datasets read from one, a weights file exactly for backbones that load one
    (an ignored path would still change the cache key)."""
    data, net = catalog.DATASETS[cfg.dataset], catalog.BACKBONES[cfg.backbone]
    if data.modality != net.modality:
        fits = ", ".join(n for n, b in catalog.BACKBONES.items() if b.modality == data.modality)
        raise ConfigError("backbone", f"a {data.modality} backbone for {data.modality} dataset {cfg.dataset}: "
                          f"one of {fits}", cfg.backbone)
    if data.needs_data_dir and not cfg.data_dir:
        raise ConfigError("data_dir", f"a local folder holding {cfg.dataset}'s files: {data.files} "
                          "(nothing is downloaded)")
    if not data.takes_data_dir and cfg.data_dir:
        takes = ", ".join(n for n, d in catalog.DATASETS.items() if d.takes_data_dir)
        raise ConfigError("data_dir", f"only for {takes}: {cfg.dataset} is {data.source} with dpviz; leave data_dir out",
                          cfg.data_dir)
    if net.needs_weights and not cfg.weights:
        raise ConfigError("weights", f"a local weights file for {cfg.backbone} (nothing is downloaded)")
    if not net.needs_weights and cfg.weights:
        takes = ", ".join(n for n, b in catalog.BACKBONES.items() if b.needs_weights)
        raise ConfigError("weights", f"only for {takes}: {cfg.backbone} is dpviz's own, pretrained on public data; "
                          "leave weights out" if net.own else f"only for {takes}; leave weights out", cfg.weights)


# --- fields a strategy ignores -----------------------------------------------------------------------
def unset(name: str, default) -> tuple:
    """The values an ignored field may keep: its ``default``, and for a learning rate what "auto" becomes
    (first: a reset config then hashes as stored runs, whose unread rates "auto" resolved to, do)."""
    return (LR_DEFAULTS[name], AUTO, default) if name in LR_DEFAULTS else (default,)


def unread_by_data(cfg) -> tuple[str, ...]:
    """The fields ``cfg``'s dataset ignores: `TEXT_ONLY_FIELDS` for a dataset that is not text."""
    data = catalog.DATASETS.get(cfg.dataset)
    return TEXT_ONLY_FIELDS if data is not None and data.modality != "text" else ()


def check_unread(cfg, chosen=None) -> None:
    """A field the config's strategy (class ``chosen``, looked up if not given) or dataset ignores keeps its
    unset value: any other value would be silently ignored (and for a strategy's field change the cache key,
    storing the same run twice)."""
    chosen = chosen or strategies.get(cfg.strategy)
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    for name in chosen.unread(cfg):
        value = getattr(cfg, name)
        if value not in unset(name, defaults[name]):
            raise ConfigError(name, f"not read by strategy {cfg.strategy}{_why(chosen, cfg, name)}: leave it out "
                              "(it would only change the run's cache key)", value)
    for name in unread_by_data(cfg):
        if getattr(cfg, name) != defaults[name]:
            raise ConfigError(name, f"not read by {catalog.DATASETS[cfg.dataset].modality} dataset {cfg.dataset} "
                              "(only text datasets): leave it out", getattr(cfg, name))


def _why(cls, cfg, name: str) -> str:
    owner = next((s.name for s in strategies.REGISTRY.values() if name in s.fields()), None)
    if owner == cls.name:  # its own field, unused by this setting of another (e.g. sparsity with selection bias)
        return f" with {cls.unread_because(cfg, name)}"
    return f" (only {owner})" if owner else ""
