"""The Optuna storage of sweeps and searches: a URL, or the journal file ``<cache>/optuna.journal``.

The journal is opened so that a process killed with ``kill -9`` costs the next one nothing:

* **Stale lock.** Optuna's file locks are files (``optuna.journal.lock``) that a killed writer leaves
  behind. Their ``grace_period`` counts from when a waiter first *sees* the lock, not from when it was
  taken, so every relaunch after a kill waited the default 30 s. A writer holds the lock for one append
  (milliseconds), so a lock file older than `LOCK_GRACE_S` is a dead writer's: it is released before
  the storage opens, and the grace period itself is `LOCK_GRACE_S` rather than 30 s. Breaking a lock
  that was in fact live costs little here: each append is one ``write`` to a file opened for
  appending, which Linux never interleaves on a local disk.
* **Damaged file.** Optuna skips a last line without its newline (a write in progress) and raises
  mid-replay on other garbage; the next append then glues onto the cut line and breaks the file for
  good. The journal is read once under its lock before opening: a cut or garbled line, or a replay
  that fails, is one `StoreError` naming the file and what to do, and nothing is written.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import optuna

from dpviz.errors import ConfigError, StoreError
from dpviz.store.home import default_cache_dir

LOCK_GRACE_S = 3
"""Seconds after which a journal lock file is a dead writer's (Optuna warns below 3)."""


def storage(url: str | None, cache_dir=None):
    """The Optuna storage: a URL (or ``$DPVIZ_STORAGE``), else the journal file in the cache folder.

    Setting ``DPVIZ_STORAGE`` before ``bash run.sh app`` lets one dashboard watch studies that
    workers on other machines run against a shared PostgreSQL.
    """
    url = url or os.environ.get("DPVIZ_STORAGE")
    if url:
        return _rdb(url)
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    path = journal_path(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():  # Optuna appends through a link: a planted one would write the link's target
        raise StoreError(f"storage: {path} is a link: remove it (dpviz opens no journal through a link)")
    lock = JournalFileOpenLock(str(path), grace_period=LOCK_GRACE_S)
    release_stale_lock(path, lock)
    if path.exists():
        check_journal(path, lock)
    try:
        return JournalStorage(JournalFileBackend(str(path), lock_obj=lock))
    except Exception as e:  # noqa: BLE001 - a replay fails in many ways (KeyError, AssertionError, …)
        raise damaged_journal(path, f"{type(e).__name__}: {e}") from None


def journal_path(cache_dir=None) -> Path:
    return Path(cache_dir or default_cache_dir()) / "optuna.journal"


def release_stale_lock(path: Path, lock) -> bool:
    """Release the journal's lock if its file is older than `LOCK_GRACE_S` (its writer was killed)."""
    try:
        age = time.time() - os.lstat(f"{path}.lock").st_mtime  # lstat: Optuna's older lock is a symlink
    except FileNotFoundError:
        return False
    if age <= LOCK_GRACE_S:
        return False  # a live append, or a kill this instant: the grace period handles it
    try:
        lock.release()
    except RuntimeError:  # released meanwhile by its owner
        return False
    return True


def check_journal(path: Path, lock) -> None:
    """Raise `StoreError` if any line of the journal is cut or not JSON (read under its lock, so no
    append is half-way)."""
    lock.acquire()
    try:
        data = path.read_bytes()
    finally:
        lock.release()
    *lines, tail = data.split(b"\n")
    if tail:
        raise damaged_journal(path, f"it ends in a cut line, {len(tail)} bytes after the last newline")
    for i, line in enumerate(lines, 1):
        try:
            if not isinstance(json.loads(line), dict):
                raise ValueError
        except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise damaged_journal(path, f"line {i} is not a journal entry") from None


def damaged_journal(path: Path, why: str) -> StoreError:
    why = " ".join(why.split())[:120]
    return StoreError(f"storage: {path} is damaged ({why}); move it away and launch again: the runs its sweeps "
                      "made stay in the store and are reused, not retrained")


def _rdb(url: str):
    """Optuna's RDB storage at ``url``; a URL that names no installed database driver, or a database that
    cannot be opened, is one `ConfigError` naming ``storage``."""
    try:
        return optuna.storages.RDBStorage(url)
    except Exception as e:  # noqa: BLE001 - sqlalchemy raises many kinds; each is one line to the user
        why = " ".join(str(e).split())[:160]
        raise ConfigError("storage", "an Optuna storage URL that opens, such as sqlite:///sweeps.db or "
                          f"postgresql://user@host/db ({type(e).__name__}: {why})", url) from None
