"""What the store checks as it opens and reads, each finding one line saying what to do.

A link where the database belongs, a database emptied or lost while run folders remain, a folder
that cannot be written (read-only or immutable: not "damaged"), rows whose JSON is garbled, and a summary
that is not the one its run stored (its recorded hash differs).
`dpviz.store.Store` calls these; none of them changes the store. `no_new_store_on_error` is the
command line's: a command that fails on bad input leaves no store folder that was not there before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import sqlite3
from pathlib import Path

from dpviz.errors import DpvizError, StoreError
from dpviz.store.home import default_cache_dir
from dpviz.store.safefile import create_new

DB_FILES = ("runs.sqlite", "runs.sqlite-wal", "runs.sqlite-shm")
# What opening a store (and taking its locks) creates before anything is stored in it; the Optuna
# journal too while it is empty (looking for a stored "auto" search creates it).
BARE = {*DB_FILES, ".store.lock", "training.lock", "backbones", "backbones/.lock", "optuna.journal"}


@contextlib.contextmanager
def no_new_store_on_error(cache_dir):
    """On a `DpvizError`, remove the store folder (and the parents made for it) if it did not exist
    before and holds nothing but a bare store: bad input is often only found after the store opened
    (δ against the dataset's size, an unknown run id), and must not leave an empty store behind."""
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    first = next((p for p in reversed([root, *root.parents]) if not p.exists()), None)
    try:
        yield
    except DpvizError:
        if first is not None and first.is_dir() and _bare(first, root):
            shutil.rmtree(first)
        raise


def _bare(first: Path, root: Path) -> bool:
    """Whether everything under ``first`` is the folders down to ``root`` and a store with no rows."""
    made = {root, *[p for p in root.parents if p == first or first in p.parents]}
    for p in first.rglob("*"):
        if p not in made and (not p.is_relative_to(root) or str(p.relative_to(root)) not in BARE):
            return False
        if p.name == "optuna.journal" and p.stat().st_size:
            return False
    db = root / DB_FILES[0]
    if not db.exists():
        return True
    try:
        with contextlib.closing(sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)) as c:
            return not any(c.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone() for t in ("runs", "analyses", "audits"))
    except sqlite3.Error:
        return False  # cannot tell: leave it


def refuse_links(root: Path) -> None:
    """SQLite follows a link at its database's name and creates or writes the link's target."""
    for name in DB_FILES:
        if (root / name).is_symlink():
            raise StoreError(f"store: {root / name} is a link: remove it (dpviz opens no database through a link)")


def refuse_orphaned(root: Path) -> None:
    """A zero-length or missing runs.sqlite beside run folders would open as an empty store: refuse.

    (SQLite reads a zero-length file as a new database; its runs would silently vanish from every list.)"""
    db, wal, runs = root / DB_FILES[0], root / DB_FILES[1], root / "runs"
    if db.exists() and (db.stat().st_size or (wal.exists() and wal.stat().st_size)):
        return
    n = sum(1 for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else 0
    if n:
        state = "empty (0 bytes)" if db.exists() else "missing"
        raise StoreError(f"store: {db} is {state} but {runs} holds {n} run folder{'s' * (n != 1)}: restore "
                         f"runs.sqlite from a backup, or move runs/ away to start an empty store there")


def writable(folder: Path) -> bool:
    """Whether a file can be created in ``folder`` (tried, then removed: permissions alone miss
    ``chattr +i``, read-only mounts, and root)."""
    probe = folder / f".dpviz-write-probe-{secrets.token_hex(8)}"
    try:
        os.close(create_new(probe))
    except OSError:
        return False
    probe.unlink()
    return True


def damaged_database(db: Path, e: sqlite3.DatabaseError) -> StoreError:
    """One line for a store database that cannot be read or written, with what to do."""
    why = str(e).split("\n")[0]
    name = getattr(e, "sqlite_errorname", "") or ""
    if "readonly" in why or "read-only" in why:
        return StoreError(f"store: {db} is read-only ({why}); make it writable, or use another --cache-dir")
    # SQLite needs to create its -wal and -shm files beside the database: in a folder it cannot write
    # it says only "unable to open database file", which is no damage.
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_IOERR")) and not writable(db.parent):
        return StoreError(f"store: {db.parent} is read-only (not writable: {why}); make the folder writable "
                          "(chmod u+w, chattr -i, remount), or use another --cache-dir")
    return StoreError(f"store: {db} is damaged or not a dpviz store ({why}); restore it from a backup, or move it "
                      "away (its runs are then no longer listed) or use another --cache-dir")


class EditedSummary(StoreError):
    """A run's summary that is not the one its run stored (`decode_row`): it answers no request, since what it
    says (ε spent, accuracy) cannot be trusted, and nothing is trained in its place unasked."""


def summary_sha(run_id: str, text: str | None) -> str | None:
    """The SHA-256 recorded beside a run's summary JSON, bound to its run id (a summary copied from another row
    does not match either); None for no summary."""
    return None if text is None else hashlib.sha256(f"{run_id}\n{text}".encode()).hexdigest()


def check_summary(d: dict, text: str | None, sha: str | None, db: Path) -> None:
    """Check the summary JSON ``text`` of the row ``d`` against its recorded hash ``sha`` (a summary is hashed as
    a step file is, `dpviz.store.runfiles`) and say how in ``d["summary_hash"]``: "checked", or "unhashed" for
    a summary stored before summaries were hashed (read as it is: nothing can tell an edit there). An edited one
    raises."""
    if text is None:
        d["summary_hash"] = None
    elif sha is None:
        d["summary_hash"] = "unhashed"
    elif sha != summary_sha(d["run_id"], text):
        raise EditedSummary(f"run {d['run_id']}: its summary in {db} is not the one the run stored (its hash "
                            "differs: edited or damaged, so its ε and accuracy cannot be trusted); restore "
                            f"{db.name} from a backup, or delete the run (`python -m dpviz delete {d['run_id']}`)")
    else:
        d["summary_hash"] = "checked"


def decode_row(row: sqlite3.Row, db: Path) -> dict:
    """A runs row as a dict with its JSON columns parsed and its summary checked against its hash; a garbled or
    edited one raises a `StoreError`."""
    d = dict(row)
    sha, summary_text = d.pop("summary_sha", None), d.get("summary_json")
    for col, key, required in (("config_json", "config", True), ("summary_json", "summary", False)):
        text = d.pop(col)
        try:
            value = json.loads(text) if text or required else None
        except (TypeError, ValueError) as e:
            raise damaged_row(d["run_id"], col, db, f"not JSON: {e}") from None
        if not (isinstance(value, dict) or value is None and not required):
            raise damaged_row(d["run_id"], col, db, f"a {type(value).__name__}, not an object")
        d[key] = value
    check_summary(d, summary_text, sha, db)
    legacy_parts(d["config"])
    if d.get("summary") and isinstance(d["summary"].get("config"), dict):
        legacy_parts(d["summary"]["config"])
    return d


def legacy_parts(config: dict) -> None:
    """A BandMF run stored before `RunConfig.parts` existed split its records equally: say so in its config
    (whose hash, without the field, is that of parts = equal), so that it is not read as the new default."""
    if "parts" not in config and isinstance(config.get("bands"), int) and config["bands"] > 1:
        config["parts"] = "equal"


def damaged_row(run_id: str, col: str, db: Path, why: str) -> StoreError:
    return StoreError(f"run {run_id}: its {col} in {db} is damaged ({why}); delete the run "
                      f"(`python -m dpviz delete {run_id}`) or restore {db.name} from a backup")


def json_or_none(text):
    """A cached result's JSON object, or None when it is garbled (the caller recomputes it)."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None
