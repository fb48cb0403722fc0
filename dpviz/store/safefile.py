"""Files and locks dpviz creates in a store, never through a link or name someone planted there.

A store can be a shared cache folder that others may write. ``open(path, "w")`` at a predictable
name follows a link planted there: it truncates or creates the link's target. So:

* every file is written under a fresh random name in its own folder, created with
  O_CREAT|O_EXCL|O_NOFOLLOW (nothing that already exists is ever opened for writing), then renamed
  over the destination: `os.replace` replaces a link at the destination, never its target;
* every lock is opened with O_NOFOLLOW and without O_TRUNC (a lock's content is never written);
* the folders dpviz makes inside a store are checked not to be links before a file goes in.

A link or a non-regular file where a lock belongs is a one-line `StoreError` naming it.

Input files a user names (texts, CSVs, a model's config) are read by `read_input`: links are followed
(datasets are often assembled from links), but what is read must be a regular file of bounded size, so a
link to /dev/zero, a FIFO or a folder named like a file is a one-line `ConfigError`, never a hang or an
exhausted memory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from pathlib import Path

from dpviz.errors import ConfigError, StoreError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def create_new(path: str | Path, mode: int = 0o666) -> int:
    """A new file at ``path`` opened for writing; FileExistsError if anything (a link too) is there.

    The mode is filtered by the umask, as for a file `open` creates."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | os.O_CLOEXEC, mode)


def write_atomic(path: str | Path, write, mode: int = 0o666) -> None:
    """Call ``write(f)`` with a new binary file beside ``path``, then rename it to ``path``.

    Readers never see half a file, a failed write leaves nothing behind, and the random temporary
    name cannot be planted in advance (O_EXCL would refuse it anyway). ``mode``: 0o600 for a file only its
    owner may read (created so, never readable by others even for an instant)."""
    path = Path(path)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            fd = create_new(tmp, mode)
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


def link_refused(path: Path, does: str = "reads") -> StoreError:
    """The one line for a link found where a store keeps its own files or folders (``does``: what dpviz does
    nothing through: reads, writes, or reads and writes)."""
    return StoreError(f"store: {path} is a link: remove it (dpviz {does} nothing through links in a store)")


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
            raise link_refused(path, "writes")
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


def _kind(mode: int) -> str:
    """What a non-regular file is, in a few words."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_input(path: str | Path, limit: int, field: str) -> bytes:
    """The bytes of the user's file ``path``: a regular file (links followed) of at most ``limit`` bytes.

    The target is checked before opening (a device is never opened) and again on the open descriptor
    (a swap meanwhile is caught); the open never blocks (a FIFO is refused, not waited on), and at most
    ``limit`` + 1 bytes are read (a file that grew is refused, not read whole).

    Raises:
        ConfigError: on ``field``, naming ``path`` and what it is instead.
    """
    def refuse(why: str):
        return ConfigError(field, f"{path} {why} (expected a regular file of at most {limit:,} bytes)")

    def kind(mode: int) -> str:
        return f"{'links to' if os.path.islink(path) else 'is'} {_kind(mode)}"

    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise refuse(kind(mode))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise refuse(f"cannot be opened ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse(kind(st.st_mode))
        data = f.read(limit + 1) if st.st_size <= limit else b""
    if st.st_size > limit or len(data) > limit:
        raise refuse(f"has {max(st.st_size, len(data)):,} bytes")
    return data
