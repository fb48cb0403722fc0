"""What runs dpviz's work: the worker pool, threads and their CPU policy, and imports under one lock.

A leaf package: it imports nothing of dpviz's, so every layer above may start workers and threads.
"""

from dpviz.runtime.pool import local_workers, set_threads  # noqa: E402,F401  (the command line's workers)

__all__ = ["local_workers", "set_threads"]
