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

from dpviz import catalog, strategies
from dpviz.errors import ConfigError
from dpviz.privacy import accountants
from dpviz.fields import (  # noqa: F401  (the field rules, re-exported where callers always found them)
    AUTO, AUTO_FIELDS, CLIPPINGS, DEVICES, EPSILON_ALLOWED, GRAD_SAMPLE_MODES, LR_DEFAULTS, MAX_EPSILON,
    MAX_STEPS, NO_DP, OPTIMIZERS, PRECISIONS, TEXT_ONLY_FIELDS, coerce, finite_numbers, parse_epsilon, total_steps,
    unread_by_data, unset, validate)

SCHEMA_VERSION = 1


def switched_off(variable: str) -> bool:
    """Whether the environment switch ``variable`` (on by default) is set to off, 0 or no."""
    return os.environ.get(variable, "on").lower() in ("off", "0", "no")

_UNHASHED = ("device", "batch_shapes", "privacy_check")
# The strategies' own fields that every stored run's key holds, whatever its strategy: they were hashed for
# all strategies when those runs were stored, so they stay so. Every other strategy field (any knob declared
# from now on, `dpviz.strategies.Param`) is hashed only for the strategies that read it: adding one changes
# no stored run's key.
HASHED_FOR_EVERY_STRATEGY = frozenset({"lp_fraction", "tune_blocks", "public_dataset", "switch_step",
                                       "switch_threshold", "switch_batch", "sparsity", "selection"})


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
        accountant: prv (default), rdp, gdp or pld (Google's dp_accounting PLD accountant).
        clip_norm: per-sample gradient clipping norm C.
        batch_size: expected batch size B of Poisson sampling (q = B / n).
        lr_lp: learning rate of the head-only (LP) phase, or "auto" (`dpviz.autotune`).
        lr_ft: learning rate of the fine-tuning phase (FFT / partial), or "auto".
        optimizer: sgd (momentum 0.9), adam or adamw.
        epochs: passes over the private data; steps T = epochs · round(n / B).
        seed: seed of sampling, noise and head initialisation.
        eval_every: steps between test evaluations (phase ends are always evaluated).
        checkpoint_every: steps between feature checkpoints (besides step 0 and the end); 0 (the default):
            automatic, 10 spread evenly over the run (steps round(i·T/10)), so 11 with step 0 for T ≥ 10;
            -1: start and end only.
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
        switch_batch: continual, automatic switch: public examples the decelerator's tr(H) is measured on
            at each check (256, the default; the real tasks take 32, as the curvature analysis does on a
            network over 2M weights: each check's Hutchinson probes then take seconds on MiniLM, not a minute).
        lora_rank: lora only: rank r of the low-rank adapters.
        train_size: 0 (the default): the whole training split; k: a fixed class-stratified subset of k
            training examples (the same for every seed; n = k for the accountant), and the test split
            cut to a fixed subset of k/4 examples within [200, 1000] — for real datasets too large for a CPU.
        holdout: 0 (the default): train on the whole training split (or subset); k: a fixed
            class-stratified subset of k training examples is held out, not trained on (n − k for the
            accountant), and the run's summary counts its correct predictions on them
            (``holdout_correct``): the private validation data a private search scores its trials on
            (`dpviz.sweeps.private`).
        max_length: text datasets only: tokens per example (longer texts are truncated, shorter padded;
            padded positions are masked and contribute nothing to a gradient).
        precision: arithmetic of the forward and backward: fp32 (the default), tf32 (CUDA; fp32 on a CPU),
            bf16 or fp16 (autocast; fp16 with a fixed loss scale). Per-sample norms, clipping, the clipped
            sum, the noise and the weights stay FP32, so the accountant does not change
            (`dpviz.privacy.precision`). Needs book-keeping (grad_sample_mode bk or auto).
        keep_weights: what the store keeps of the model: checkpoints (the default: the weights at every
            feature checkpoint, which curvature analyses reload, and the final model), final (the final
            model only) or none (metrics and features only: a scorecard's accuracy-only runs on a real
            backbone, 43 MB of trained weights each). Features are kept in every case.
        device: auto (cuda when available), cpu or cuda. Not part of the hash.
        batch_shapes: physical batch sizes a phase's steps run on (`dpviz.training.shapes`): -1 (the default)
            chooses per device (one fixed size on a GPU, where every new shape costs a plan of seconds; the
            drawn Poisson sizes on a CPU), 0 the drawn sizes as they are, k ≥ 1 at most k fixed sizes, each
            batch padded to the smallest that holds it and its padded rows masked to exactly zero. The
            sampling, the sensitivity and ε are the same whatever it is: not part of the hash.
        mechanism: dp-sgd (the default: independent Gaussian noise at every step), bandmf (banded
            correlated noise, DP-FTRL: `dpviz.privacy.bandmf`) or bandmf-momentum (the same, its coefficients
            fitted to SGD with momentum; optimizer sgd only), under the same (ε, δ).
        bands: the band count b of bandmf and bandmf-momentum: each step's noise combines the last b
            Gaussian draws, and records are sampled cyclically from b fixed parts (rate b·q each); 1 is DP-SGD.
        parts: bands > 1 only: how records are assigned to BandMF's parts: independent (the default: each
            record's part drawn on its own, valid for add-or-remove neighbours) or equal (an equal split, as runs
            stored before this field were trained: their ε holds for zero-out neighbours only).
            `dpviz.privacy.bandmf.PARTS`. Not part of the hash at bands 1.
        clip_fraction_noise: σ_b of a privatised clip fraction: each private step also releases the count of
            clipped examples with Gaussian noise of std σ_b (in records), divided by q·n, as the metric
            ``clip_fraction_dp``, inside ε (what adaptive clipping needs). 0 (the default): none. Its cost: the
            pair is one Gaussian mechanism of the calibrated σ, so the gradient's own noise rises to
            1/√(σ⁻² − σ_b⁻²) (`dpviz.privacy.accounting.grad_sigma`); σ_b must exceed σ. Andrew et al. (2021)
            suggest σ_b ≈ B/20.
        privacy_check: private steps the run's privacy check replays and measures (`dpviz.privacy.check`): 3
            (the default: the first step of each private phase, then random others), 0 turns the check off. It
            reads every step's sampled indices in any case. It decides nothing that is computed: not part of the hash.
        randomness: where the sampling, BandMF's parts and the noise come from (`dpviz.privacy.randomness`):
            seeded (the default: from ``seed``, bit-reproducible, and not private against anyone who holds this
            configuration) or secure (the operating system's entropy, in nothing dpviz exports).
    """

    dataset: str = "digits"
    data_dir: str | None = None
    backbone: str = "cnn"
    weights: str | None = None
    strategy: str = "lp-fft"
    epsilon: float = 1.0
    delta: float = 1e-5
    lp_fraction: float = strategies.default("lp_fraction")
    tune_blocks: int = strategies.default("tune_blocks")
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
    public_dataset: str = strategies.default("public_dataset")
    switch_step: int = strategies.default("switch_step")
    switch_threshold: float = strategies.default("switch_threshold")
    switch_batch: int = strategies.default("switch_batch")
    sparsity: float = strategies.default("sparsity")
    selection: str = strategies.default("selection")
    lora_rank: int = strategies.default("lora_rank")
    max_length: int = 64
    train_size: int = 0
    holdout: int = 0
    precision: str = "fp32"
    keep_weights: str = "checkpoints"
    device: str = "auto"
    batch_shapes: int = -1
    mechanism: str = "dp-sgd"
    bands: int = 1
    parts: str = "independent"
    randomness: str = "seeded"
    clip_fraction_noise: float = 0.0
    privacy_check: int = 3

    def __post_init__(self):
        coerce(self)
        validate(self)

    @property
    def auto(self) -> tuple[str, ...]:
        """The fields left on "auto" (resolved by `dpviz.autotune.resolve` before the run)."""
        return tuple(f for f in AUTO_FIELDS if getattr(self, f) == AUTO)

    def fixed_rates(self) -> "RunConfig":
        """This config with every "auto" rate at its fixed default, for what does not depend on the rates
        (σ, the schedule); choosing the real rates is `dpviz.autotune`'s, above the run core."""
        return dataclasses.replace(self, **{f: LR_DEFAULTS[f] for f in self.auto})

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
            owned = strategies.get(self.strategy).fields()
            others = sorted(strategies.strategy_fields() - HASHED_FOR_EVERY_STRATEGY - set(owned))
            for k in _UNHASHED + tuple(others):
                d.pop(k)
            for k, default in (("train_size", 0), ("holdout", 0), ("precision", "fp32"), ("keep_weights", "checkpoints"),
                                 ("switch_batch", 256), ("mechanism", "dp-sgd"), ("bands", 1),
                                 ("clip_fraction_noise", 0.0)):
                if d[k] == default:  # added later: runs stored before them keep their keys
                    d.pop(k)
            if d["randomness"] == "seeded":  # every run stored before it was seeded
                d.pop("randomness")
            if self.bands == 1 or d["parts"] == "equal":  # unread at b = 1; stored BandMF runs split equally
                d.pop("parts")
            if catalog.dataset(self.dataset).modality != "text":
                for k in TEXT_ONLY_FIELDS:  # read only by text datasets
                    d.pop(k)
            d.update(catalog.plugin_fields(self))  # a plugin's entries: never a built-in one's key
            d["_schema"] = SCHEMA_VERSION
            acc = accountants.get(self.accountant)
            if acc.bound_by:  # σ calibrated by another's bound (GDP's own overspent, so: PRV's): not the old runs
                d[f"_{acc.name}_calibrated_by"] = acc.bound_by
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    def hash(self) -> str:
        return hashlib.sha256(self.to_json(hashed_only=True).encode()).hexdigest()[:16]

    def replace(self, **changes) -> "RunConfig":
        """A copy with ``changes``; a change of strategy resets the fields the new one ignores (unless
        they are among ``changes``, which are checked as given)."""
        if changes.get("strategy", self.strategy) == self.strategy:
            return dataclasses.replace(self, **changes)
        kept = without_unread({**self.to_dict(), **changes})
        return RunConfig(**{**kept, **changes})

    @classmethod
    def from_dict(cls, d: dict, *, reset_unread: bool = False) -> "RunConfig":
        """A config from fields ``d``; ``reset_unread``: fields its strategy ignores go back to unset first
        (for configs derived from another strategy's, and runs stored before such fields were refused)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(unknown[0], f"unknown field; allowed fields: {', '.join(sorted(names))}")
        return cls(**(without_unread(d) if reset_unread else d))

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
    finite_numbers(d, path)
    return d


def without_unread(d: dict) -> dict:
    """Config fields ``d`` with those its strategy or dataset ignores reset to their unset value
    (`fields.unset`).

    For configs made by changing another's strategy (a sweep's points, a page's twin run) and for runs
    stored before ignored fields were refused.
    """
    defaults = {f.name: f.default for f in fields(RunConfig)}
    probe = RunConfig.__new__(RunConfig)  # unvalidated: `unread` only reads fields
    for k, v in defaults.items():
        object.__setattr__(probe, k, d.get(k, v))
    ignored = strategies.get(probe.strategy).unread(probe) + unread_by_data(probe)
    return {**d, **{k: unset(k, defaults[k])[0] for k in ignored if k in d and d[k] not in unset(k, defaults[k])}}
