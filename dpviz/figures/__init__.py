"""Every dpviz figure, built from result tables (`dpviz.results`) or studies, in one style.

``figures.metric_curves(...)`` and the other run figures are here; subjects have their
module: ``figures.analyses``, ``figures.audit``, ``figures.curvature``, ``figures.sparse``, ``figures.tuning``
(imported on first use: the tuning figures need Optuna). `style` holds the palette (strategy
colours from the registry, a dash per noise mechanism: `style_table`), layout, labels and captions that all of
them use.
"""

from __future__ import annotations

import importlib

from dpviz.figures.runs import band_curves, live_curves, metric_curves, utility_curve
from dpviz.figures.style import (ANALYSIS_LABELS, LABELS, PRIVATE, color, drawn_runs, eps_text, metric_label,
                                 private_caption, release_caption, style_table, with_caption)

_SUBJECTS = ("analyses", "audit", "curvature", "reproduce", "sparse", "theory", "tuning")


def __getattr__(name: str):
    if name in _SUBJECTS or name == "export":
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ANALYSIS_LABELS", "LABELS", "PRIVATE", "band_curves", "color", "drawn_runs", "eps_text", "live_curves",
           "metric_curves", "metric_label", "private_caption", "release_caption", "style_table", "utility_curve",
           "with_caption", *_SUBJECTS, "export"]
