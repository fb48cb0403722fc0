"""Representation analyses, one module each, registered by name.

The package re-exports `dpviz.analyses.registry`; importing it registers the built-ins.
"""

from __future__ import annotations

from dpviz.analyses.registry import PRIVACY_NOTE, Analysis, REGISTRY, register, layers, run_analysis  # noqa: F401

from dpviz.analyses import embedding, hessian, knn, residual, separability  # noqa: E402,F401  (registration)
from dpviz.analyses.embedding import warm_umap  # noqa: E402,F401
from dpviz.analyses.hessian import predict_batch_size  # noqa: E402,F401
from dpviz.analyses.service import analyze, analyze_missing, cached, resolve_step  # noqa: E402,F401  (stored runs)

__all__ = ["PRIVACY_NOTE", "Analysis", "REGISTRY", "register", "layers", "run_analysis", "warm_umap",
           "predict_batch_size", "analyze", "analyze_missing", "cached", "resolve_step"]
