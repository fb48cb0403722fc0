"""Private datasets, by name, as in-memory tensors.

The package re-exports `dpviz.data.bundle`.
"""

from __future__ import annotations

from dpviz.data.bundle import (  # noqa: F401
    Bundle, to_unit_range, MAX_CLASSES, check_class_count, stratified_subset, subset, hold_out, load
)

__all__ = ["Bundle", "to_unit_range", "MAX_CLASSES", "check_class_count", "stratified_subset", "subset",
           "hold_out", "load"]
