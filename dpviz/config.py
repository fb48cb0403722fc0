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
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from .errors import ConfigError

SCHEMA_VERSION = 1
DATASETS = ("digits", "glyphs", "synthetic", "mnist", "fashion-mnist", "cifar10", "stl10", "folder")
BACKBONES = ("cnn", "vit", "resnet18", "resnet50", "vit_tiny", "vit_small", "deit_tiny", "deit_small")
STRATEGIES = ("lp", "fft", "lp-fft", "partial")
ACCOUNTANTS = ("prv", "rdp", "gdp")
OPTIMIZERS = ("sgd", "adam", "adamw")
GRAD_SAMPLE_MODES = ("auto", "bk", "hooks")
DEVICES = ("auto", "cpu", "cuda")
_UNHASHED = ("device",)


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run.

    Attributes:
        dataset: private dataset name (see `DATASETS`).
        data_dir: folder holding a real dataset's files (not used by digits/glyphs/synthetic).
        backbone: backbone name (see `BACKBONES`).
        weights: local weights file for torchvision/timm backbones.
        strategy: lp, fft, lp-fft (LP for a share of steps, then FFT) or partial.
        epsilon: total privacy budget of the run; ``inf`` trains without DP.
        delta: total δ, in (0, 1/n] where n is the private training-set size.
        lp_fraction: share p of the steps (and so of the privacy loss) spent on LP
            in lp-fft.
        tune_blocks: for partial, how many of the last backbone blocks train.
        accountant: prv (default), rdp or gdp.
        clip_norm: per-sample gradient clipping norm C.
        batch_size: expected batch size B of Poisson sampling (q = B / n).
        lr_lp: learning rate of the head-only (LP) phase.
        lr_ft: learning rate of the fine-tuning phase (FFT / partial).
        optimizer: sgd (momentum 0.9), adam or adamw.
        epochs: passes over the private data; steps T = epochs · round(n / B).
        seed: seed of sampling, noise and head initialisation.
        eval_every: steps between test evaluations (phase ends are always evaluated).
        checkpoint_every: steps between feature checkpoints (0: start and end only).
        eval_subset: size of the fixed evaluation subset whose features are stored.
        grad_sample_mode: per-sample gradient path; auto picks per architecture.
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
    lr_lp: float = 0.5
    lr_ft: float = 0.01
    optimizer: str = "sgd"
    epochs: int = 20
    seed: int = 0
    eval_every: int = 10
    checkpoint_every: int = 0
    eval_subset: int = 360
    grad_sample_mode: str = "auto"
    device: str = "auto"

    def __post_init__(self):
        _coerce(self)
        validate(self)

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
            for k in _UNHASHED:
                d.pop(k)
            d["_schema"] = SCHEMA_VERSION
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    def hash(self) -> str:
        return hashlib.sha256(self.to_json(hashed_only=True).encode()).hexdigest()[:16]

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(unknown[0], f"unknown field; allowed fields: {', '.join(sorted(names))}")
        return cls(**d)

    @classmethod
    def from_file(cls, path: str | Path) -> "RunConfig":
        return cls.from_dict(load_config_file(path))


def load_config_file(path: str | Path) -> dict:
    """Read a JSON or TOML config file into a dict (a `[run]` TOML table is accepted)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("config", "an existing JSON or TOML file", str(path))
    text = p.read_text()
    try:
        d = tomllib.loads(text) if p.suffix.lower() == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        kind = "TOML" if p.suffix.lower() == ".toml" else "JSON"
        raise ConfigError("config", f"a valid {kind} file ({path}: {str(e).splitlines()[0]})") from None
    if isinstance(d, dict) and isinstance(d.get("run"), dict):
        d = d["run"]
    if not isinstance(d, dict):
        raise ConfigError("config", "a JSON object / TOML table of RunConfig fields", type(d).__name__)
    return d


_TYPES = {"epsilon": float, "delta": float, "lp_fraction": float, "clip_norm": float,
          "lr_lp": float, "lr_ft": float, "tune_blocks": int, "batch_size": int,
          "epochs": int, "seed": int, "eval_every": int, "checkpoint_every": int, "eval_subset": int}


def _coerce(cfg: RunConfig) -> None:
    """Turn strings from flags/files into numbers; "inf"/"none" mean no privacy."""
    for name, typ in _TYPES.items():
        v = getattr(cfg, name)
        if isinstance(v, bool):
            raise ConfigError(name, f"a number ({typ.__name__})", v)
        if name == "epsilon" and isinstance(v, str) and v.strip().lower() in ("inf", "none", "infinity"):
            v = math.inf
        try:
            cv = typ(v)
        except (TypeError, ValueError):
            raise ConfigError(name, f"a number ({typ.__name__})", v) from None
        if typ is int and isinstance(v, float) and v != int(v):
            raise ConfigError(name, "a whole number", v)
        object.__setattr__(cfg, name, cv)


def _choice(cfg, name, allowed):
    if getattr(cfg, name) not in allowed:
        raise ConfigError(name, f"one of {', '.join(allowed)}", getattr(cfg, name))


def validate(cfg: RunConfig) -> None:
    """Checks that need no data; `resolve` in the engine checks δ ≤ 1/n and block counts."""
    for name, allowed in (("dataset", DATASETS), ("backbone", BACKBONES), ("strategy", STRATEGIES),
                          ("accountant", ACCOUNTANTS), ("optimizer", OPTIMIZERS),
                          ("grad_sample_mode", GRAD_SAMPLE_MODES), ("device", DEVICES)):
        _choice(cfg, name, allowed)
    if math.isnan(cfg.epsilon) or cfg.epsilon <= 0:
        raise ConfigError("epsilon", "must be > 0 (or inf for no privacy)", cfg.epsilon)
    if not 0 < cfg.delta < 1:
        raise ConfigError("delta", "must be in (0, 1/n] where n is the training-set size", cfg.delta)
    if not 0 <= cfg.lp_fraction <= 1:
        raise ConfigError("lp_fraction", "must be in [0, 1]", cfg.lp_fraction)
    for name in ("clip_norm", "lr_lp", "lr_ft"):
        v = getattr(cfg, name)
        if not (math.isfinite(v) and v > 0):
            raise ConfigError(name, "must be a finite number > 0", v)
    for name, lo in (("batch_size", 1), ("epochs", 1), ("tune_blocks", 1), ("eval_every", 1),
                     ("checkpoint_every", 0), ("eval_subset", 10), ("seed", 0)):
        if getattr(cfg, name) < lo:
            raise ConfigError(name, f"must be an integer >= {lo}", getattr(cfg, name))
    if cfg.dataset in ("mnist", "fashion-mnist", "cifar10", "stl10", "folder") and not cfg.data_dir:
        raise ConfigError("data_dir", f"a local folder holding {cfg.dataset} (nothing is downloaded)")
    if cfg.backbone not in ("cnn", "vit") and not cfg.weights:
        raise ConfigError("weights", f"a local weights file for {cfg.backbone} (nothing is downloaded)")
