"""The run store: SQLite (WAL) for runs, metrics and events; files per run.

Layout under the cache folder (``cache/`` by default, moved with
``--cache-dir`` or ``DPVIZ_CACHE_DIR``)::

    runs.sqlite            runs, metrics (long format), events, cached analysis results
    runs/<run_id>/         features/step_XXXXXX.npz, weights/step_XXXXXX.pt, model.pt, mask.json
    backbones/             pretrained public backbones

Every artifact is written (atomically) and read through a `Store` method, stamped
with its kind and schema version; `dpviz.artifacts` has the formats and how
files from before the stamps are read.

Every call opens its own short-lived connection, so threads and processes can
write at once; WAL plus a busy timeout turns contention into waiting, not
"database is locked" errors. A run whose owning process has died is marked
``interrupted`` when a store is next opened; nothing else is touched.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import socket
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from . import artifacts
from .errors import ConfigError, StoreError

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, config_hash TEXT NOT NULL, config_json TEXT NOT NULL,
  status TEXT NOT NULL, created REAL, started REAL, finished REAL, owner TEXT,
  step INTEGER DEFAULT 0, total_steps INTEGER, summary_json TEXT, error TEXT);
CREATE INDEX IF NOT EXISTS runs_hash ON runs(config_hash, status);
CREATE TABLE IF NOT EXISTS metrics (
  run_id TEXT NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, value REAL,
  PRIMARY KEY (run_id, name, step)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
  run_id TEXT NOT NULL, time REAL NOT NULL, kind TEXT NOT NULL, message TEXT);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, time);
CREATE TABLE IF NOT EXISTS analyses (
  run_id TEXT NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, params_json TEXT NOT NULL,
  result_json TEXT NOT NULL, created REAL, PRIMARY KEY (run_id, step, name, params_json)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS audits (
  audit_key TEXT PRIMARY KEY, config_hash TEXT NOT NULL, result_json TEXT NOT NULL, created REAL);
CREATE INDEX IF NOT EXISTS audits_config ON audits(config_hash);
"""
LIVE, FINAL = ("queued", "running"), ("finished", "failed", "cancelled", "interrupted")


def default_cache_dir() -> Path:
    return Path(os.environ.get("DPVIZ_CACHE_DIR") or Path.cwd() / "cache")


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


def damaged_database(db: Path, e: sqlite3.DatabaseError) -> StoreError:
    """One line for a store database that cannot be read or written, with what to do."""
    why = str(e).split("\n")[0]
    if "readonly" in why or "read-only" in why:
        return StoreError(f"store: {db} is read-only ({why}); make it writable, or use another --cache-dir")
    return StoreError(f"store: {db} is damaged or not a dpviz store ({why}); restore it from a backup, or move it "
                      "away (its runs are then no longer listed) or use another --cache-dir")


def write_atomic(path: Path, write) -> None:
    """Call ``write(tmp_path)`` then rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed write leaves nothing behind
        raise


class Store:
    """Runs, their metrics and events, and their artifact folders."""

    def __init__(self, cache_dir: str | Path | None = None):
        self.root = Path(cache_dir) if cache_dir else default_cache_dir()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError("cache_dir", f"a folder dpviz can create and write ({e.strerror or type(e).__name__})",
                              str(self.root)) from None
        self.db = self.root / "runs.sqlite"
        # Creating the file, switching it to WAL (a persistent setting) and the schema happen
        # under a file lock: two processes opening a new store at once would otherwise race
        # on the journal-mode switch ("database is locked").
        try:
            with open(self.root / ".store.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                with self._conn() as c:
                    c.execute("PRAGMA journal_mode=WAL")
                    c.executescript(SCHEMA)
                    _migrate(c)
                self.recover()
        except OSError as e:
            raise ConfigError("cache_dir", f"a folder dpviz can write ({e.strerror or type(e).__name__})",
                              str(self.root)) from None

    @contextmanager
    def _conn(self):
        """A connection; a database that cannot be read or written is one `StoreError` saying what to do."""
        try:
            c = sqlite3.connect(self.db, timeout=60, isolation_level=None)
        except sqlite3.DatabaseError as e:
            raise damaged_database(self.db, e) from None
        try:
            c.execute("PRAGMA synchronous=NORMAL")
            c.execute("PRAGMA busy_timeout=60000")
            c.row_factory = sqlite3.Row
            yield c
        except sqlite3.DatabaseError as e:
            raise damaged_database(self.db, e) from None
        finally:
            c.close()

    def _tx(self, sql: str, args=(), many: bool = False):
        with self._conn() as c:
            c.execute("BEGIN IMMEDIATE")
            (c.executemany if many else c.execute)(sql, args)
            c.execute("COMMIT")

    # --- runs -------------------------------------------------------------
    def create_run(self, config_hash: str, config_json: str, total_steps: int | None = None) -> str:
        run_id = f"{config_hash[:8]}-{secrets.token_hex(3)}"
        self._tx("INSERT INTO runs(run_id, config_hash, config_json, status, created, owner, total_steps)"
                 " VALUES (?,?,?,?,?,?,?)",
                 (run_id, config_hash, config_json, "running", time.time(), process_token(), total_steps))
        self.event(run_id, "created")
        return run_id

    def update_run(self, run_id: str, **fields) -> None:
        if "summary" in fields:
            fields["summary_json"] = json.dumps(fields.pop("summary"))
        cols = ", ".join(f"{k}=?" for k in fields)
        self._tx(f"UPDATE runs SET {cols} WHERE run_id=?", (*fields.values(), run_id))

    def finish_run(self, run_id: str, status: str, *, summary: dict | None = None, error: str | None = None):
        self.update_run(run_id, status=status, finished=time.time(), error=error,
                        summary_json=json.dumps(summary) if summary is not None else None)
        self.event(run_id, status, error)

    def get_run(self, run_id: str) -> dict:
        with self._conn() as c:
            row = c.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"run_id: no stored run {run_id!r} (see `python -m dpviz list`)")
        return _row(row)

    def find_finished(self, config_hash: str) -> dict | None:
        with self._conn() as c:
            row = c.execute("SELECT * FROM runs WHERE config_hash=? AND status='finished' "
                            "ORDER BY finished DESC LIMIT 1", (config_hash,)).fetchone()
        return _row(row) if row else None

    def list_runs(self, status: str | None = None) -> list[dict]:
        sql, args = "SELECT * FROM runs", ()
        if status:
            sql, args = sql + " WHERE status=?", (status,)
        with self._conn() as c:
            return [_row(r) for r in c.execute(sql + " ORDER BY created", args).fetchall()]

    def delete_run(self, run_id: str) -> None:
        run = self.get_run(run_id)
        if run["status"] in LIVE and owner_alive(run["owner"]):
            raise StoreError(f"run_id: {run_id} is still running; cancel it first")
        with self._conn() as c:
            c.execute("BEGIN IMMEDIATE")
            for t in ("metrics", "events", "analyses", "runs"):
                c.execute(f"DELETE FROM {t} WHERE run_id=?", (run_id,))
            c.execute("COMMIT")
        shutil.rmtree(self.run_dir(run_id), ignore_errors=True)

    def recover(self) -> list[str]:
        """Mark runs whose owning process is gone as interrupted; return their ids."""
        dead = [r["run_id"] for r in self.list_runs() if r["status"] in LIVE and not owner_alive(r["owner"])]
        for run_id in dead:
            self.finish_run(run_id, "interrupted", error="the process running it ended before it finished")
        return dead

    # --- metrics and events -----------------------------------------------
    def log_metrics(self, run_id: str, rows: list[tuple[int, str, float | None]]) -> None:
        """Insert (step, name, value) rows in one transaction."""
        if rows:
            self._tx("INSERT OR REPLACE INTO metrics VALUES (?,?,?,?)",
                     [(run_id, s, n, v) for s, n, v in rows], many=True)

    def metrics(self, run_id: str, name: str | None = None) -> dict[str, list[tuple[int, float]]]:
        sql, args = "SELECT step, name, value FROM metrics WHERE run_id=?", (run_id,)
        if name:
            sql, args = sql + " AND name=?", (run_id, name)
        out: dict[str, list] = {}
        with self._conn() as c:
            for step, n, v in c.execute(sql + " ORDER BY name, step", args):
                out.setdefault(n, []).append((step, v))
        return out

    def event(self, run_id: str, kind: str, message: str | None = None) -> None:
        self._tx("INSERT INTO events VALUES (?,?,?,?)", (run_id, time.time(), kind, message))

    def events(self, run_id: str) -> list[dict]:
        with self._conn() as c:
            return [dict(r) for r in c.execute("SELECT * FROM events WHERE run_id=? ORDER BY time", (run_id,))]

    # --- cached analysis results ------------------------------------------
    def put_analysis(self, run_id: str, step: int, name: str, params_json: str, result: dict) -> None:
        """Store one analysis result (a JSON-ready dict) with its kind and schema version."""
        self._tx("INSERT OR REPLACE INTO analyses(run_id, step, name, params_json, result_json, created, kind, "
                 "schema_version) VALUES (?,?,?,?,?,?,?,?)",
                 (run_id, step, name, params_json, json.dumps(result), time.time(), "analysis",
                  artifacts.VERSIONS["analysis"]))

    def get_analysis(self, run_id: str, step: int, name: str, params_json: str) -> dict | None:
        """The stored result, or None; a row of another kind or a newer schema raises `StoreError`."""
        with self._conn() as c:
            row = c.execute("SELECT result_json, kind, schema_version FROM analyses "
                            "WHERE run_id=? AND step=? AND name=? AND params_json=?",
                            (run_id, step, name, params_json)).fetchone()
        if row is None:
            return None
        if row["kind"] is not None or row["schema_version"] is not None:  # both NULL: a row from before schema 1
            artifacts.check(f"analysis {name} of run {run_id} at step {step}", "analysis", row["kind"],
                            row["schema_version"] or 0)
        return json.loads(row["result_json"])

    # --- privacy audits (their training runs are not stored: only results) --------
    def put_audit(self, audit_key: str, config_hash: str, result: dict) -> None:
        self._tx("INSERT OR REPLACE INTO audits(audit_key, config_hash, result_json, created) VALUES (?,?,?,?)",
                 (audit_key, config_hash, json.dumps(result), time.time()))

    def get_audit(self, audit_key: str) -> dict | None:
        with self._conn() as c:
            row = c.execute("SELECT result_json FROM audits WHERE audit_key=?", (audit_key,)).fetchone()
        return json.loads(row["result_json"]) if row else None

    def audits(self, config_hash: str | None = None) -> list[dict]:
        """Stored audit results, newest first; only those of one run configuration when given its hash."""
        sql = "SELECT result_json FROM audits" + (" WHERE config_hash=?" if config_hash else "")
        with self._conn() as c:
            rows = c.execute(sql + " ORDER BY created DESC", (config_hash,) if config_hash else ()).fetchall()
        return [json.loads(r["result_json"]) for r in rows]

    # --- artifacts ----------------------------------------------------------
    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def _file(self, run_id: str, *parts: str) -> Path:
        return self.run_dir(run_id).joinpath(*parts)

    def save_features(self, run_id: str, step: int, arrays: dict[str, np.ndarray]) -> Path:
        """The arrays of a feature checkpoint (per-layer features, labels), stamped as features."""
        path = self._file(run_id, "features", f"step_{step:06d}.npz")
        write_atomic(path, lambda p: artifacts.write_npz(p, "features", arrays))
        return path

    def feature_steps(self, run_id: str) -> list[int]:
        folder = self.run_dir(run_id) / "features"
        return sorted(int(p.stem.split("_")[1]) for p in folder.glob("step_*.npz")) if folder.exists() else []

    def load_features(self, run_id: str, step: int) -> dict[str, np.ndarray]:
        """Exactly the arrays `save_features` was given (old unstamped files read as they are)."""
        path = self._file(run_id, "features", f"step_{step:06d}.npz")
        if not path.exists():
            raise StoreError(f"step: run {run_id} has no features at step {step} "
                             f"(has {self.feature_steps(run_id)})")
        return artifacts.read_npz(path, "features")

    def save_weights(self, run_id: str, step: int, state: dict) -> Path:
        """The model's state dict at a checkpoint (curvature analyses reload it)."""
        path = self._file(run_id, "weights", f"step_{step:06d}.pt")
        state = {k: v.detach().cpu() for k, v in state.items()}
        write_atomic(path, lambda p: artifacts.write_pt(p, "weights", {"state_dict": state}))
        return path

    def load_weights(self, run_id: str, step: int) -> dict:
        """The state dict saved at ``step`` (old bare state dicts read as they are)."""
        path = self._file(run_id, "weights", f"step_{step:06d}.pt")
        if not path.exists():
            raise StoreError(f"step: run {run_id} has no saved weights at step {step} (runs stored before "
                             f"curvature analyses existed keep features only)")
        return artifacts.read_pt(path, "weights")["state_dict"]

    def save_model(self, run_id: str, state_dict: dict, config: dict) -> Path:
        """The final model: its state dict and the run's configuration (``RunConfig.to_dict()``)."""
        path = self._file(run_id, "model.pt")
        state = {k: v.detach().cpu() for k, v in state_dict.items()}
        write_atomic(path, lambda p: artifacts.write_pt(p, "model", {"state_dict": state, "config": config}))
        return path

    def load_model(self, run_id: str) -> dict:
        """{"state_dict": ..., "config": ...} of the run's final model."""
        path = self._file(run_id, "model.pt")
        if not path.exists():
            raise StoreError(f"run_id: run {run_id} has no final model (it has not finished, or is not stored)")
        return artifacts.read_pt(path, "model")

    def save_mask(self, run_id: str, doc: dict) -> Path:
        """A sparse run's mask document ({step, selection, sparsity, mask, rows_per_layer})."""
        path = self._file(run_id, "mask.json")
        write_atomic(path, lambda p: artifacts.write_json(p, "mask", doc))
        return path

    def load_mask(self, run_id: str) -> dict | None:
        """The document `save_mask` was given, or None when the run has no mask."""
        path = self._file(run_id, "mask.json")
        return artifacts.read_json(path, "mask", old_keys=("mask",)) if path.exists() else None


def _migrate(c: sqlite3.Connection) -> None:
    """Add the columns later schemas introduced to a store created before them; old rows keep NULL."""
    have = {r[1] for r in c.execute("PRAGMA table_info(analyses)")}
    for col, typ in (("kind", "TEXT"), ("schema_version", "INTEGER")):
        if col not in have:
            c.execute(f"ALTER TABLE analyses ADD COLUMN {col} {typ}")


def _row(row: sqlite3.Row) -> dict:
    d = dict(row)
    d["config"] = json.loads(d.pop("config_json"))
    d["summary"] = json.loads(d.pop("summary_json")) if d.get("summary_json") else None
    return d
