"""Fine-tuning strategies, one module each, registered by name.

The package re-exports `dpviz.strategies.registry`; importing it registers the built-ins.
"""

from __future__ import annotations

from dpviz.strategies.registry import (  # noqa: F401
    REGISTRY, Param, PhasePlan, PhaseSetup, Strategy, register, get, names, colors, strategy_fields,
    knobs, default, validate, plan, load_plugins
)

from dpviz.strategies import lp, fft, lp_fft, partial, continual, sparse, lora  # noqa: E402,F401

load_plugins(deferred=True)  # a failure is raised where it can be shown (`catalog.check_plugins`)

__all__ = ["REGISTRY", "Param", "PhasePlan", "PhaseSetup", "Strategy", "register", "get", "names", "colors",
           "strategy_fields", "knobs", "default", "validate", "plan", "load_plugins"]
