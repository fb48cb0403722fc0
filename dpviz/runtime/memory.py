"""How a training process keeps the memory it frees between steps, so a step does not fault it in again.

A DP step allocates more short-lived buffers than a plain one: each layer's kept input, the per-sample
Grams and gradients, the clipped sums. glibc's allocator serves buffers above its mmap threshold (128 KiB,
raised as it sees large frees, at most 32 MiB) with fresh ``mmap`` calls and gives the top of its heap back to
the system above a trim threshold: every step then faults its working set in again, page by page. On a
2-core CPU this cost the built-in CNN's DP step about a quarter of its time (``bench/bench_dp_step.py``,
``docs/results/benchmarks.md``), and the plain step, which frees less, far less.

`keep_freed_memory` fixes both thresholds once per process (``mallopt``): buffers up to `MMAP_THRESHOLD`
come from the heap, and up to `TRIM_THRESHOLD` of freed heap stays in the process. The price is that much
more resident memory after a peak. A value the user set (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``GLIBC_TUNABLES``) wins; other C libraries and systems are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

MMAP_THRESHOLD = 32 << 20  # glibc's largest on 64-bit systems
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
_USER = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
_done: bool | None = None


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds for this process (once); True when they are dpviz's now."""
    global _done
    if _done is None:
        _done = _set()
    return _done


def _set() -> bool:
    if not sys.platform.startswith("linux") or any(v in os.environ for v in _USER):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
