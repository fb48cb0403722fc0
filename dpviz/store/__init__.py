"""The run store: SQLite (WAL) for runs, metrics and events; files per run.

`Store` lives in `dpviz.store.runstore`; the package re-exports it and the helpers its callers use, each
from the module that defines it.
"""

from __future__ import annotations

from dpviz.store.checks import damaged_database, no_new_store_on_error  # noqa: F401
from dpviz.store.home import default_cache_dir  # noqa: F401
from dpviz.store.owners import owner_alive, process_token  # noqa: F401
from dpviz.store.runstore import Store  # noqa: F401
from dpviz.store.safefile import write_atomic  # noqa: F401
from dpviz.store.schema import KINDS, SHOWN  # noqa: F401

__all__ = ["Store", "damaged_database", "default_cache_dir", "process_token", "write_atomic", "owner_alive",
           "KINDS", "SHOWN", "no_new_store_on_error"]
