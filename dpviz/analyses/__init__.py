"""Representation analyses, one module each, registered by name.

The package re-exports `dpviz.analyses.registry`; importing it registers the built-ins.
"""

from __future__ import annotations

from dpviz.analyses.registry import PRIVACY_NOTE, Analysis, REGISTRY, register, layers, run_analysis  # noqa: F401

from dpviz.analyses import embedding, hessian, knn, residual, separability  # noqa: E402,F401  (registration)

__all__ = ["PRIVACY_NOTE", "Analysis", "REGISTRY", "register", "layers", "run_analysis"]
