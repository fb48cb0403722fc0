"""Backbones by name, and the classifier that puts a linear head on one.

The package re-exports `dpviz.models.classifier`.
"""

from __future__ import annotations

from dpviz.models.classifier import Classifier, build_backbone, built_cache, cache_in, count_blocks  # noqa: F401

__all__ = ["Classifier", "build_backbone", "built_cache", "cache_in", "count_blocks"]
