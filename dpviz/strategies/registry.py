"""Fine-tuning strategies, one module each, registered by name.

Everything that lists strategies (config validation, the CLI, the run form,
pages, figures, tests) reads `REGISTRY`; a new strategy is one module that
subclasses `Strategy` and is decorated with `register`. Built-ins are imported
below; a strategy of your own is found when its module is named in the
``DPVIZ_STRATEGIES`` environment variable (comma-separated module names, for the
CLI and the dashboard) or imported before use (from Python).
"""

from __future__ import annotations

from dpviz import catalog
from dpviz.errors import ConfigError
from dpviz.strategies.base import Param, PhasePlan, PhaseSetup, Strategy

REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: make ``cls`` available as ``RunConfig.strategy = cls.name``.

    A strategy of your own may not take a built-in one's name: the runs stored under that name would
    answer from the cache for it."""
    held = REGISTRY.get(cls.name)
    if held is not None and held.__module__.startswith(__package__ + ".") and cls.__module__ != held.__module__:
        raise ConfigError("strategy", f"a name of its own: {cls.__module__} may not replace dpviz's built-in "
                          "strategy", cls.name)
    REGISTRY[cls.name] = cls
    return cls


def get(name: str) -> type[Strategy]:
    """The strategy class registered as ``name``; a `ConfigError` naming the choices otherwise."""
    if name not in REGISTRY:
        raise ConfigError("strategy", f"one of {', '.join(REGISTRY)}", name)
    return REGISTRY[name]


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def colors() -> dict[str, str]:
    """Strategy name → its figure colour."""
    return {n: s.color for n, s in REGISTRY.items()}


def strategy_fields() -> set[str]:
    """Every `RunConfig` field that belongs to some strategy (the rest are shared by all)."""
    return {f for s in REGISTRY.values() for f in s.fields()}


def knobs() -> dict[str, Param]:
    """Every strategy's own fields by name, as declared (`Param`): defaults, types, ranges."""
    return {p.name: p for s in REGISTRY.values() for p in s.params}


def default(name: str):
    """The declared default of the knob ``name`` (what `dpviz.config.RunConfig` defaults to)."""
    return knobs()[name].default


def validate(cfg, chosen: type[Strategy] | None = None) -> None:
    """Every strategy's field ranges, then the chosen strategy's own rules (``chosen``: its class, if known)."""
    for cls in REGISTRY.values():
        cls.validate_fields(cfg)
    (chosen or get(cfg.strategy)).validate(cfg)


def plan(cfg, *, total_steps: int, steps_per_epoch: int, num_blocks: int) -> list[PhasePlan]:
    """The phases of ``cfg.strategy`` for a run of ``total_steps`` private steps."""
    return get(cfg.strategy)(cfg).plan(total_steps=total_steps, steps_per_epoch=steps_per_epoch,
                                       num_blocks=num_blocks)


# the built-in strategies, in the order menus list them


def load_plugins(spec: str | None = None, *, deferred: bool = False) -> None:
    """Import the strategy modules named in ``spec`` (default: ``$DPVIZ_STRATEGIES``), each registering itself."""
    catalog.load_plugins(spec, variable="DPVIZ_STRATEGIES", deferred=deferred)
