"""Training's claim on the CPU: a shared file lock that background analyses wait for.

A command-line run returns as soon as it has trained and leaves its checkpoints' analyses to a
detached, low-priority process. On a 2-core machine that process, even at nice 19, slows the user's
next training loop about threefold (its 2 OpenMP threads keep waiting for the core it shares). So a
training command holds ``<store>/training.lock`` shared while it trains, and the background analyses
take it exclusively for an instant before each checkpoint: they wait while any run of the store trains,
and a run never waits for them (shared requests are granted beside other shared holders). They also
start only `GRACE_S` after the command that spawned them, so that a command the user starts right
after it takes the lock before they import torch beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from dpviz.store.safefile import open_lock

GRACE_S = 1.0


def _open(root) -> int | None:
    """The lock's descriptor (never through a planted link: `safefile.open_lock`), or None in a read-only store."""
    try:
        return open_lock(Path(root) / "training.lock")
    except OSError:  # a read-only store: nothing trains into it, nothing to coordinate
        return None


@contextlib.contextmanager
def training(root):
    """Held while a run of the store at ``root`` trains."""
    fd = _open(root)
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def wait_until_idle(root) -> None:
    """Return once no run of the store at ``root`` is training (at once when none is)."""
    fd = _open(root)
    if fd is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)
