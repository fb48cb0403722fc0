"""`RunConfig`: the one description of a run, validated once, hashed for the cache.

The canonical JSON of a config (sorted keys, no whitespace, ε = ∞ written as
"inf") is hashed with SHA-256; the hash keys the run cache, so two identical
requests share one stored run. Fields that do not change what is computed
(`device`) are left out of the hash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from . import catalog
from .errors import ConfigError

SCHEMA_VERSION = 1


def switched_off(variable: str) -> bool:
    """Whether the environment switch ``variable`` (on by default) is set to off, 0 or no."""
    return os.environ.get(variable, "on").lower() in ("off", "0", "no")

ACCOUNTANTS = ("prv", "rdp", "gdp")
OPTIMIZERS = ("sgd", "adam", "adamw")
CLIPPINGS = ("abadi", "auto-s")
AUTO = "auto"
AUTO_FIELDS = ("lr_lp", "lr_ft")  # may be "auto": chosen on a public proxy, no privacy spent
# The fixed rates (set for ε ≈ 1 on the default task) that "auto" falls back to without a proxy, and
# what "auto" becomes for a rate the strategy does not read.
LR_DEFAULTS = {"lr_lp": 0.5, "lr_ft": 0.01}
GRAD_SAMPLE_MODES = ("auto", "bk", "hooks")
DEVICES = ("auto", "cpu", "cuda")
_UNHASHED = ("device",)
# Fields added after runs were stored: hashed only when the run's strategy reads them, so every
# earlier run keeps its cache key.
_HASHED_ONLY_FOR_OWNER = ("lora_rank",)


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run.

    Attributes:
        dataset: private dataset name (an entry of `dpviz.catalog`).
        data_dir: folder holding a real dataset's files (not used by digits/glyphs/synthetic).
        backbone: backbone name (an entry of `dpviz.catalog`).
        weights: local weights file for torchvision/timm backbones.
        strategy: a registered strategy (`dpviz.strategies.names()`): lp, fft, lp-fft (LP for a share
            of steps, then FFT), partial, continual, sparse, lora.
        epsilon: total privacy budget of the run; ``math.inf`` (or the text "inf", the one spelling in
            flags and files) trains without DP.
        delta: total δ, in (0, 1/n] where n is the private training-set size.
        lp_fraction: share p of the steps (and so of the privacy loss) spent on LP
            in lp-fft.
        tune_blocks: for partial, how many of the last backbone blocks train.
        accountant: prv (default), rdp or gdp.
        clip_norm: per-sample gradient clipping norm C.
        batch_size: expected batch size B of Poisson sampling (q = B / n).
        lr_lp: learning rate of the head-only (LP) phase, or "auto" (`dpviz.autotune`).
        lr_ft: learning rate of the fine-tuning phase (FFT / partial), or "auto".
        optimizer: sgd (momentum 0.9), adam or adamw.
        epochs: passes over the private data; steps T = epochs · round(n / B).
        seed: seed of sampling, noise and head initialisation.
        eval_every: steps between test evaluations (phase ends are always evaluated).
        checkpoint_every: steps between feature checkpoints (0: start and end only).
        eval_subset: size of the fixed evaluation subset whose features are stored.
        grad_sample_mode: per-sample gradient path; auto picks per architecture.
        clipping: abadi (g·min(1, C/‖g‖)) or auto-s (automatic clipping, g·C/(‖g‖ + 0.01)).
        public_dataset: continual only: the public dataset of the non-private first phase.
        switch_step: continual only: public steps before switching to DP on the private
            data; -1 switches automatically once the decelerator has fallen (see switch_threshold).
        sparsity: sparse only: fraction s of each layer's rows (output neurons / filters) that train.
        selection: sparse only: sparta (private selection from one noisy gradient epoch), magnitude
            (top-s rows by public weight norm), random, bias (head + biases, DP-BiTFiT) or norm.
        switch_threshold: continual, automatic switch: switch when the decelerator measured on
            public data has fallen to ≤ this fraction of its peak so far.
        lora_rank: lora only: rank r of the low-rank adapters.
        device: auto (cuda when available), cpu or cuda. Not part of the hash.
    """

    dataset: str = "digits"
    data_dir: str | None = None
    backbone: str = "cnn"
    weights: str | None = None
    strategy: str = "lp-fft"
    epsilon: float = 1.0
    delta: float = 1e-5
    lp_fraction: float = 0.3
    tune_blocks: int = 1
    accountant: str = "prv"
    clip_norm: float = 1.0
    batch_size: int = 256
    lr_lp: float | str = AUTO
    lr_ft: float | str = AUTO
    optimizer: str = "sgd"
    epochs: int = 20
    seed: int = 0
    eval_every: int = 10
    checkpoint_every: int = 0
    eval_subset: int = 360
    grad_sample_mode: str = "auto"
    clipping: str = "abadi"
    public_dataset: str = "glyphs"
    switch_step: int = -1
    switch_threshold: float = 0.5
    sparsity: float = 0.2
    selection: str = "sparta"
    lora_rank: int = 4
    device: str = "auto"

    def __post_init__(self):
        _coerce(self)
        validate(self)

    @property
    def auto(self) -> tuple[str, ...]:
        """The fields left on "auto" (resolved by `dpviz.autotune.resolve` before the run)."""
        return tuple(f for f in AUTO_FIELDS if getattr(self, f) == AUTO)

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if not math.isfinite(d["epsilon"]):
            d["epsilon"] = "inf"
        return d

    def to_json(self, *, hashed_only: bool = False) -> str:
        d = self.to_dict()
        if hashed_only:
            from . import strategies

            owned = strategies.get(self.strategy).fields()
            for k in _UNHASHED + tuple(k for k in _HASHED_ONLY_FOR_OWNER if k not in owned):
                d.pop(k)
            d["_schema"] = SCHEMA_VERSION
            if self.accountant == "gdp":  # σ is calibrated by PRV's bound now (GDP's overspent): not the old runs
                d["_gdp_calibrated_by"] = "prv"
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    def hash(self) -> str:
        return hashlib.sha256(self.to_json(hashed_only=True).encode()).hexdigest()[:16]

    def replace(self, **changes) -> "RunConfig":
        """A copy with ``changes``; a change of strategy resets the fields the new one ignores (unless
        they are among ``changes``, which are checked as given)."""
        if changes.get("strategy", self.strategy) == self.strategy:
            return dataclasses.replace(self, **changes)
        from . import strategies

        kept = strategies.reset_unread({**self.to_dict(), **changes})
        return RunConfig(**{**kept, **changes})

    @classmethod
    def from_dict(cls, d: dict, *, reset_unread: bool = False) -> "RunConfig":
        """A config from fields ``d``; ``reset_unread``: fields its strategy ignores go back to unset first
        (for configs derived from another strategy's, and runs stored before such fields were refused)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(unknown[0], f"unknown field; allowed fields: {', '.join(sorted(names))}")
        if reset_unread:
            from . import strategies

            d = strategies.reset_unread(d)
        return cls(**d)

    @classmethod
    def from_file(cls, path: str | Path) -> "RunConfig":
        return cls.from_dict(load_config_file(path))


def load_config_file(path: str | Path) -> dict:
    """Read a JSON or TOML config file into a dict (a `[run]` TOML table is accepted)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("config", "an existing JSON or TOML file", str(path))
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("config", f"a readable UTF-8 JSON or TOML file ({path}: {type(e).__name__})") from None
    try:
        d = tomllib.loads(text) if p.suffix.lower() == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        kind = "TOML" if p.suffix.lower() == ".toml" else "JSON"
        raise ConfigError("config", f"a valid {kind} file ({path}: {str(e).splitlines()[0]})") from None
    if isinstance(d, dict) and isinstance(d.get("run"), dict):
        d = d["run"]
    if not isinstance(d, dict):
        raise ConfigError("config", "a JSON object / TOML table of RunConfig fields", type(d).__name__)
    _finite_numbers(d, path)
    return d


MAX_EPSILON = 100.0  # beyond it ε bounds nothing (e^ε ≈ 10^43), and PRV's domain overflows near 709
# Upper ends that keep a run finite on any machine (T = epochs · n / B accountant steps, torch's seeds).
_INT_RANGES = {"batch_size": (1, 10**7), "epochs": (1, 10**5), "eval_every": (1, 10**9),
               "checkpoint_every": (0, 10**9), "eval_subset": (10, 10**6), "seed": (0, 2**63 - 1)}
_TEXT_FIELDS = ("data_dir", "weights")  # a path or nothing

# The longest schedule one run may have: every step is a DP step (≥ 2 ms even for the built-in CNN at
# B = 1 on a 2-core CPU, measured), the run stores metrics every eval_every steps and the accountant's
# curve grows with T, so 100,000 steps is already minutes to hours; beyond it a run is refused up front.
MAX_STEPS = 100_000
STEP_FLOOR_S = 0.002


def total_steps(cfg: "RunConfig", n: int) -> int:
    """T = epochs · round(n/B) private steps for a training set of ``n``; ConfigError beyond `MAX_STEPS`."""
    steps = cfg.epochs * max(1, round(n / cfg.batch_size))
    if steps > MAX_STEPS:
        hours = steps * STEP_FLOOR_S / 3600
        raise ConfigError("epochs", f"epochs × round(n/B) = {cfg.epochs} × {steps // cfg.epochs} = {steps:,} steps, "
                          f"over dpviz's limit of {MAX_STEPS:,} a run (at ≥ {STEP_FLOOR_S * 1000:g} ms a step, "
                          f"≥ {hours:.3g} h); lower epochs or raise batch_size", cfg.epochs)
    return steps

_TYPES = {"epsilon": float, "delta": float, "lp_fraction": float, "clip_norm": float,
          "lr_lp": float, "lr_ft": float, "tune_blocks": int, "batch_size": int,
          "epochs": int, "seed": int, "eval_every": int, "checkpoint_every": int, "eval_subset": int,
          "switch_step": int, "switch_threshold": float, "sparsity": float, "lora_rank": int}


def _coerce(cfg: RunConfig) -> None:
    """Turn strings from flags/files into numbers; "inf"/"none" mean no privacy."""
    for name, typ in _TYPES.items():
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


def _finite_numbers(d: dict, path) -> None:
    """Refuse ∞ and NaN written as numbers in a config file (JSON 1e999 / Infinity / NaN, TOML inf / nan):
    a file spells no DP as the string "inf", so an overflowing number cannot turn DP off."""
    for k, v in d.items():
        if isinstance(v, float) and not math.isfinite(v):
            allowed = EPSILON_ALLOWED if k == "epsilon" else "a finite number"
            raise ConfigError(str(k), f"{allowed} (in {path}, a number that reads as {v} is refused)", v)


def _choice(cfg, name, allowed):
    if getattr(cfg, name) not in allowed:
        raise ConfigError(name, f"one of {', '.join(allowed)}", getattr(cfg, name))


def validate(cfg: RunConfig) -> None:
    """Checks that need no data; `engine.prepare` checks δ ≤ 1/n and block counts.

    The strategy's own rules (and every strategy's field ranges) come from `dpviz.strategies`.
    """
    from . import strategies

    for name, allowed in (("dataset", tuple(catalog.DATASETS)), ("backbone", tuple(catalog.BACKBONES)),
                          ("strategy", strategies.names()),
                          ("accountant", ACCOUNTANTS), ("optimizer", OPTIMIZERS),
                          ("grad_sample_mode", GRAD_SAMPLE_MODES), ("device", DEVICES), ("clipping", CLIPPINGS)):
        _choice(cfg, name, allowed)
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
    strategies.validate(cfg)
    _check_sources(cfg)


def _check_sources(cfg: RunConfig) -> None:
    """A data folder exactly for datasets read from one, a weights file exactly for backbones that load one
    (an ignored path would still change the cache key)."""
    data, net = catalog.DATASETS[cfg.dataset], catalog.BACKBONES[cfg.backbone]
    if data.needs_data_dir and not cfg.data_dir:
        raise ConfigError("data_dir", f"a local folder holding {cfg.dataset}'s files: {data.files} "
                          "(nothing is downloaded)")
    if not data.needs_data_dir and cfg.data_dir:
        takes = ", ".join(n for n, d in catalog.DATASETS.items() if d.needs_data_dir)
        raise ConfigError("data_dir", f"only for {takes}: {cfg.dataset} is {data.source} with dpviz; leave data_dir out",
                          cfg.data_dir)
    if net.needs_weights and not cfg.weights:
        raise ConfigError("weights", f"a local weights file for {cfg.backbone} (nothing is downloaded)")
    if not net.needs_weights and cfg.weights:
        takes = ", ".join(n for n, b in catalog.BACKBONES.items() if b.needs_weights)
        raise ConfigError("weights", f"only for {takes}: {cfg.backbone} is dpviz's own, pretrained on public data; "
                          "leave weights out" if net.own else f"only for {takes}; leave weights out", cfg.weights)
