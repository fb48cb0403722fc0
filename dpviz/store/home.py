"""Where a store lives when nobody names one: ``$DPVIZ_CACHE_DIR``, else ``./cache``."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """The store folder a command, page or run uses when given none."""
    return Path(os.environ.get("DPVIZ_CACHE_DIR") or Path.cwd() / "cache")
