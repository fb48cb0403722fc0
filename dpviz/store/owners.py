"""Who owns a running run or trial: a process token (host:pid:start-time), and whether it still runs."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def process_token(pid: int | None = None) -> str:
    """host:pid:start-time; the start time tells a live owner from a reused pid."""
    pid = pid or os.getpid()
    try:
        start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        start = "?"
    return f"{socket.gethostname()}:{pid}:{start}"


def owner_alive(owner: str | None) -> bool:
    """Whether the process of ``owner`` (a `process_token`) still runs; on another host, assumed so."""
    if not owner:
        return False
    host, pid, _ = owner.split(":", 2)
    if host != socket.gethostname():
        return True  # cannot tell from here; leave other machines' runs alone
    return process_token(int(pid)) == owner and not _zombie(int(pid))


def _zombie(pid: int) -> bool:
    """A killed process its parent has not reaped yet: /proc still lists it, but it runs nothing (a
    relaunch right after ``kill -9`` of a sweep's process group sees its workers so)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False
