"""The run store: SQLite (WAL) for runs, metrics and events; files per run.

The package re-exports `dpviz.store.runstore`.
"""

from __future__ import annotations

from dpviz.store.checks import no_new_store_on_error  # noqa: F401  (the command line's guard)
from dpviz.store.runstore import (  # noqa: F401
    Store, damaged_database, default_cache_dir, process_token, write_atomic, owner_alive, SHOWN
)

__all__ = ["Store", "damaged_database", "default_cache_dir", "process_token", "write_atomic", "owner_alive",
           "SHOWN", "no_new_store_on_error"]
