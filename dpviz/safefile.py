"""Files and locks dpviz creates in a store, never through a link or name someone planted there.

A store can be a shared cache folder that others may write. ``open(path, "w")`` at a predictable
name follows a link planted there: it truncates or creates the link's target. So:

* every file is written under a fresh random name in its own folder, created with
  O_CREAT|O_EXCL|O_NOFOLLOW (nothing that already exists is ever opened for writing), then renamed
  over the destination: `os.replace` replaces a link at the destination, never its target;
* every lock is opened with O_NOFOLLOW and without O_TRUNC (a lock's content is never written);
* the folders dpviz makes inside a store are checked not to be links before a file goes in.

A link or a non-regular file where a lock belongs is a one-line `StoreError` naming it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from pathlib import Path

from .errors import StoreError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def create_new(path: str | Path, mode: int = 0o666) -> int:
    """A new file at ``path`` opened for writing; FileExistsError if anything (a link too) is there.

    The mode is filtered by the umask, as for a file `open` creates."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | os.O_CLOEXEC, mode)


def write_atomic(path: str | Path, write) -> None:
    """Call ``write(f)`` with a new binary file beside ``path``, then rename it to ``path``.

    Readers never see half a file, a failed write leaves nothing behind, and the random temporary
    name cannot be planted in advance (O_EXCL would refuse it anyway)."""
    path = Path(path)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            fd = create_new(tmp)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a link swapped in meanwhile is removed itself, not its target
        raise


def real_folder(base: Path, *parts: str) -> Path:
    """``base/parts…``, each part created if missing and refused if it is a link or not a folder.

    ``base`` itself is the user's choice (a store folder may well be a link); below it, a planted
    link to a folder elsewhere would send dpviz's writes there."""
    path = Path(base)
    for part in parts:
        path = path / part
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            raise StoreError(f"store: {path} is a link: remove it (dpviz writes nothing through links in a store)")
        if not stat.S_ISDIR(mode):
            raise StoreError(f"store: {path} is not a folder: move it away")
    return path


def open_lock(path: str | Path) -> int:
    """The lock file at ``path`` (created if missing), opened without truncating or following a link."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW's answer for a link
            raise StoreError(f"store: lock {path} is a link: remove it (dpviz opens no lock through a link)") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StoreError(f"store: lock {path} is not a regular file: remove it")
    return fd


@contextlib.contextmanager
def locked(path: str | Path, how: int = fcntl.LOCK_EX):
    """Hold ``flock(how)`` on the lock file at ``path`` (see `open_lock`)."""
    fd = open_lock(path)
    try:
        fcntl.flock(fd, how)
        yield fd
    finally:
        os.close(fd)  # closing releases the lock
