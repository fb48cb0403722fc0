"""Opacus's own accountant modules, imported without the rest of Opacus.

``import opacus.accountants`` runs ``opacus/__init__``, which loads the privacy engine, every grad
sampler and the DP optimizers (those import ``torch.distributed.tensor``): ≈ 0.9 s of every run's
start on this machine, none of it used to account. The accountants themselves (``accountant``,
``prv``, ``rdp``, ``gdp`` and ``analysis``) import only numpy, scipy and one type name from
``opacus.optimizers``. So, when Opacus is not imported yet, this module loads exactly those files
from the installed Opacus under their own names, behind placeholder parent packages that it removes
again, keeping the modules here: the accounting code that runs is Opacus's, byte for byte, and a
later ``import opacus`` (the "hooks" grad-sample mode, external backbones) loads Opacus as usual, with
its own copies (`tests/test_accounting.py` checks both in a fresh process).

Importing them as Opacus ships them (``import opacus.accountants``) would cost every first page and
every run's start ≈ 2 s more (1.1 s against 3.0–3.9 s measured here, torch included), and the dashboard's
first page would import torch. If the files cannot be loaded so — a later Opacus whose accountants import
more — the plain import is used instead, so dpviz keeps working at Opacus's usual start-up cost.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

from dpviz.runtime.imports import IMPORTS

MECHANISMS = {"prv": ("prv", "PRVAccountant"), "rdp": ("rdp", "RDPAccountant"),
              "gdp": ("gdp", "GaussianAccountant")}


def _package(name: str, path: Path) -> types.ModuleType:
    """An empty package ``name`` whose submodules are found in ``path`` (its __init__ is not run)."""
    mod = types.ModuleType(name)
    mod.__path__ = [str(path)]
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    mod.__spec__.submodule_search_locations = [str(path)]
    return mod


def _load(module: str) -> types.ModuleType:
    """``opacus.accountants.<module>``, importing only what that file imports."""
    full = f"opacus.accountants.{module}"
    with IMPORTS:
        if full in _LOADED:
            return _LOADED[full]
        if "opacus" in sys.modules:  # Opacus is imported already: use it
            return importlib.import_module(full)
        try:
            return _load_alone(full)
        except Exception:  # noqa: BLE001 - whatever a changed Opacus breaks here, its own import still works
            return importlib.import_module(full)


def _load_alone(full: str) -> types.ModuleType:
    """``full`` loaded from Opacus's files behind placeholder parents, which leave ``sys.modules`` again."""
    root = Path(importlib.util.find_spec("opacus").submodule_search_locations[0])
    optimizers = types.ModuleType("opacus.optimizers")  # accountant.py reads one name, for a type hint
    optimizers.DPOptimizer = type("DPOptimizer", (), {"__module__": "opacus.optimizers"})
    sys.modules.update({"opacus": _package("opacus", root), "opacus.optimizers": optimizers,
                        "opacus.accountants": _package("opacus.accountants", root / "accountants")})
    sys.modules.update(_LOADED)  # modules of an earlier call (a second accountant shares `analysis`)
    try:
        importlib.import_module(full)
    finally:
        # Every opacus.* module leaves sys.modules again, kept here: a later ``import opacus`` runs
        # Opacus's own __init__ files and gets its own copies, never a placeholder.
        for name in [n for n in sys.modules if n == "opacus" or n.startswith("opacus.")]:
            mod = sys.modules.pop(name)
            if name not in ("opacus", "opacus.optimizers", "opacus.accountants"):
                _LOADED[name] = mod
    return _LOADED[full]


_LOADED: dict[str, types.ModuleType] = {}


def create_accountant(mechanism: str):
    """A fresh Opacus accountant: ``prv``, ``rdp`` or ``gdp`` (as ``opacus.accountants.create_accountant``)."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"accountant: one of {sorted(MECHANISMS)}, got {mechanism!r}")
    module, cls = MECHANISMS[mechanism]
    return getattr(_load(module), cls)()


def rdp_analysis() -> types.ModuleType:
    """``opacus.accountants.analysis.rdp``: the pure RDP functions (the PRV accountant sizes its domain with them)."""
    _load("rdp")
    name = "opacus.accountants.analysis.rdp"
    return _LOADED.get(name) or sys.modules[name]
