"""A run's schedule and the one σ that spends its budget, without torch.

`prepare.prepare` builds a run on top of these; the dashboard's form previews a config through
`preview` as the user edits, which for dpviz's own datasets and backbones imports no torch at all
(`dpviz.catalog`), and `dpviz.training.ahead` calibrates in a second process while a command imports
torch.
"""

from __future__ import annotations

from dataclasses import replace

from dpviz import strategies
from dpviz.config import RunConfig, total_steps
from dpviz.errors import ConfigError
from dpviz.privacy import accounting
from dpviz.privacy.accounting import Phase
from dpviz.catalog import Shape, static_shape
from dpviz import catalog


def schedule(cfg: RunConfig, n: int, num_blocks: int) -> tuple[list[strategies.PhasePlan], float]:
    """Phases and Poisson sampling rate q = B/n; T = epochs · round(n/B) steps (at most `MAX_STEPS`)."""
    if cfg.batch_size > n:
        raise ConfigError("batch_size", f"must be <= the training-set size n = {n}", cfg.batch_size)
    q = cfg.batch_size / n
    per_epoch = max(1, round(n / cfg.batch_size))
    return strategies.plan(cfg, total_steps=total_steps(cfg, n), steps_per_epoch=per_epoch,
                           num_blocks=num_blocks), q


def check_delta(cfg: RunConfig, n: int) -> None:
    if cfg.private and cfg.delta > 1 / n:
        raise ConfigError("delta", f"must be in (0, 1/n] = (0, {1 / n:.3g}] for {cfg.dataset} (n = {n})", cfg.delta)


def check_public(cfg: RunConfig, private: Shape) -> None:
    """The continual strategy's public data must fit the private task: same modality, image channels and
    classes (public images are resized to the private side, `prepare.load_public`)."""
    pub_entry, priv_entry = catalog.dataset(cfg.public_dataset), catalog.dataset(cfg.dataset)
    if pub_entry.modality != priv_entry.modality:
        fits = ", ".join(n for n, d in catalog.DATASETS.items() if d.public and d.modality == priv_entry.modality)
        raise ConfigError("public_dataset", f"a public {priv_entry.modality} dataset for {cfg.dataset}: {fits}",
                          cfg.public_dataset)
    pub = pub_entry.shape  # public datasets are dpviz's own: sized without loading
    if pub is not None and (pub.channels, pub.num_classes) != (private.channels, private.num_classes):
        what = f"{private.channels} channel(s), " if priv_entry.modality == "image" else ""
        raise ConfigError("public_dataset", f"a public dataset with the private data's {what}"
                          f"{private.num_classes} classes; {cfg.public_dataset} has "
                          f"{f'{pub.channels} channel(s), ' if what else ''}{pub.num_classes}", cfg.public_dataset)


_FOUND: dict[tuple, float] = {}
"""σ this process calibrated, by (accountant object, ε, δ, schedule without σ): a study's seeds, a sweep's
repeats and the device worker's later jobs share schedules, and a search costs several accountant calls."""


def calibrate(cfg: RunConfig, phases: list[Phase]) -> float:
    """σ for ``phases`` (σ unset) so that the whole schedule spends at most ``cfg.epsilon``.

    A schedule this process calibrated already takes the σ found then, checked again by one accountant call (and
    its answer's checks, `accounting.check_sigma`) in place of the search's several: an accountant changed since
    is read afresh."""
    try:
        acc = accounting.registry.get(accounting.bound_by(cfg.accountant))
        key = (acc.name, id(acc), cfg.epsilon, cfg.delta, tuple(replace(p, noise_multiplier=0.0) for p in phases))
        if (known := _FOUND.get(key)) is not None and accounting.check_sigma(
                sigma=known, target_epsilon=cfg.epsilon, delta=cfg.delta, phases=phases, accountant=acc):
            return known
        _FOUND[key] = sigma = accounting.calibrate_sigma(target_epsilon=cfg.epsilon, delta=cfg.delta, phases=phases,
                                                         accountant=acc)
        return sigma
    except ConfigError:  # already names its field (the accountant's package is missing)
        raise
    except ValueError as e:
        raise ConfigError("epsilon", str(e).split(": ", 1)[-1]) from None


def calibrated_phases(cfg: RunConfig, n: int, num_blocks: int, *,
                      sigma: float | None = None) -> tuple[list, list[Phase], float]:
    """Plans, phases with the calibrated σ, and q for a training set of size n.

    ``sigma``: σ calibrated already for this very schedule (by `dpviz.training.ahead`), else calibrated here.
    """
    plans, q = schedule(cfg, n, num_blocks)
    b = bands(cfg, q)
    # only private phases enter the accountant: a public phase touches no private record
    phases = [Phase(name=p.name, steps=p.steps, noise_multiplier=0.0, sample_rate=q, clip_norm=cfg.clip_norm,
                    bands=b) for p in plans if not p.public]
    if cfg.private:
        sigma = calibrate(cfg, phases) if sigma is None else sigma
        phases = [replace(p, noise_multiplier=sigma, count_noise=cfg.clip_fraction_noise) for p in phases]
        if phases and cfg.clip_fraction_noise:
            try:  # the count's noise must leave the gradient part of σ (checked once σ is known)
                phases[0].grad_noise_multiplier
            except ValueError as e:
                raise ConfigError("clip_fraction_noise", str(e).split(": ", 1)[-1]) from None
    return plans, phases, q


def bands(cfg: RunConfig, q: float) -> int:
    """The phases' band count ``cfg.bands`` (1 unless the mechanism is banded: `dpviz.fields.validate`). Each of
    BandMF's b parts is sampled at rate b·q, which must be a probability."""
    if cfg.bands * q > 1:
        raise ConfigError("bands", f"at most 1/q = {1 / q:.4g} for batch size {cfg.batch_size} (each of the b parts "
                          "of the training set is sampled at rate b·q)", cfg.bands)
    return cfg.bands


def check(cfg: RunConfig) -> bool:
    """What a run refuses before its σ is calibrated, read from the catalogue alone (no torch, no accountant
    called): δ against n, the schedule's steps, BandMF's b·q and an accountant's floor. A command checks this
    before its first line, so bad input stays one line; a dataset known only by loading it (a folder of the
    user's) is checked when the run loads it: False then, True where everything above was checked."""
    static = static_shape(cfg)
    if static is None:
        return False
    shape, blocks = static
    check_delta(cfg, shape.n)
    _, q = schedule(cfg, shape.n, blocks)
    bands(cfg, q)
    if cfg.private:
        try:
            accounting.check_floor(target_epsilon=cfg.epsilon, delta=cfg.delta,
                                   acc=accounting.registry.get(accounting.bound_by(cfg.accountant)), rel_tol=0.005)
        except ValueError as e:
            raise ConfigError("epsilon", str(e).split(": ", 1)[-1]) from None
    return True


def task_shape(cfg: RunConfig) -> tuple[Shape, int]:
    """(dataset shape, block count): from `dpviz.catalog` where fixed, else by loading data and backbone."""
    return static_shape(cfg) or loaded_shape(cfg)


def loaded_shape(cfg: RunConfig) -> tuple[Shape, int]:
    """(dataset shape, block count) by loading the dataset and building the backbone (imports torch)."""
    from dpviz import data, models

    bundle = data.load(cfg)
    backbone = models.build_backbone(cfg.backbone, channels=bundle.channels, size=bundle.size, weights=cfg.weights)
    return Shape(bundle.n, bundle.channels, bundle.size, bundle.num_classes), models.count_blocks(backbone)


def preview(cfg: RunConfig) -> dict:
    """What a config implies before launch: σ, q and the steps of each phase.

    Validates like `prepare.prepare` (dataset, δ ≤ 1/n, blocks, weights, the public data's shape) but
    neither pretrains nor trains, so forms can show it as the user edits.
    """
    cfg = cfg.fixed_rates()  # σ and the steps do not depend on the learning rates
    shape, blocks = task_shape(cfg)
    check_delta(cfg, shape.n)
    plans, phases, q = calibrated_phases(cfg, shape.n, blocks)
    if any(p.public for p in plans):
        check_public(cfg, shape)
    return {"noise_multiplier": phases[0].noise_multiplier, "sample_rate": q, "n_train": shape.n,
            "total_steps": sum(p.steps for p in phases), "num_blocks": blocks,
            "phases": [p.to_dict() for p in phases]}


def bands_trade(cfg: RunConfig, prev: dict, plain: dict) -> dict:
    """What BandMF's bands cost and buy at ``cfg``'s budget, from its preview ``prev`` and the preview ``plain``
    of the same config under DP-SGD: σ against DP-SGD's σ (the cost: each record is sampled at b·q, so fewer
    releases share the budget), and κ, the variance of the noise that reaches the weights over the last
    phase relative to DP-SGD's at the same σ (`bandmf.noise_factor`, the buy). σ·√κ against DP-SGD's σ is the
    net: the standard deviation of the weights' noise under each mechanism at this budget."""
    from dpviz.privacy import bandmf

    last = prev["phases"][-1]
    kappa = bandmf.noise_factor(cfg.bands, last["steps"], momentum=bandmf.momentum(cfg.mechanism))
    sigma, base = (p["phases"][-1].get("noise_multiplier", p["noise_multiplier"]) for p in (prev, plain))
    return {"sigma": sigma, "sigma_dp_sgd": base, "kappa": kappa, "sigma_weights": sigma * kappa ** 0.5,
            "phase": last["name"], "steps": last["steps"]}
