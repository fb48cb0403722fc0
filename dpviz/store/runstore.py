"""The run store: SQLite (WAL) for runs, metrics and events; files per run.

Layout under the cache folder (``cache/`` by default, moved with
``--cache-dir`` or ``DPVIZ_CACHE_DIR``)::

    runs.sqlite            runs, metrics (long format), events, cached analysis results
    runs/<run_id>/         features/step_XXXXXX.npz, weights/step_XXXXXX.pt, model.pt, mask.json
    tensors/xx/<sha>.pt    large tensors of weights and models, kept once per store (`dpviz.store.tensors`)
    backbones/             pretrained public backbones

Every artifact is written (atomically) and read through a `Store` method, stamped
with its kind and schema version; `dpviz.store.artifacts` has the formats and how
files from before the stamps are read.

Every call opens its own short-lived connection, so threads and processes can
write at once; WAL plus a busy timeout turns contention into waiting, not
"database is locked" errors. A run whose owning process has died is marked
``interrupted`` when a store is next opened; nothing else is touched.

The store may be a shared folder others can write: dpviz creates its files there through
`dpviz.store.safefile` (never through a planted link), and `dpviz.store.checks` turns links, an emptied
database, a read-only folder, garbled rows or a summary edited since its run stored it (each summary is
stored with its SHA-256, as a run's step files are) into one line saying what to do.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import sqlite3
import stat
import time
from contextlib import contextmanager
from pathlib import Path

from dpviz.store import artifacts
from dpviz.store import checks
from dpviz.errors import Cancelled, ConfigError, StoreError
from dpviz.store.runfiles import RunFiles
from dpviz.store.safefile import link_refused, locked
from dpviz.store.owners import owner_alive, process_token
from dpviz.store.checks import EditedSummary, damaged_database, decode_row, json_or_none, summary_sha
from dpviz.store.home import default_cache_dir
from dpviz.store.schema import SCHEMA, SHOWN, check_kind, migrate


LIVE, FINAL = ("queued", "running"), ("finished", "failed", "cancelled", "interrupted")
DIED = "the process running it ended before it finished"


def _real_folder(path: Path) -> None:
    """Refuse ``path`` where it is a link or not a folder (missing is fine: it is made when first written)."""
    with contextlib.suppress(FileNotFoundError):
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            raise link_refused(path, "reads and writes")
        if not stat.S_ISDIR(mode):
            raise StoreError(f"store: {path} is not a folder: move it away")


class Store(RunFiles):
    """Runs, their metrics and events, and their artifact folders."""

    def __init__(self, cache_dir: str | Path | None = None):
        self.root = Path(cache_dir) if cache_dir else default_cache_dir()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError("cache_dir", f"a folder dpviz can create and write ({e.strerror or type(e).__name__})",
                              str(self.root)) from None
        self.db = self.root / "runs.sqlite"
        checks.refuse_links(self.root)
        # Creating the file, switching it to WAL (a persistent setting) and the schema happen
        # under a file lock: two processes opening a new store at once would otherwise race
        # on the journal-mode switch ("database is locked").
        try:
            with locked(self.root / ".store.lock"):
                checks.refuse_orphaned(self.root)
                with self._conn() as c:
                    c.execute("PRAGMA journal_mode=WAL")
                    c.executescript(SCHEMA)
                    migrate(c)
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
    def create_run(self, config_hash: str, config_json: str, total_steps: int | None = None, *,
                   kind: str = "user") -> str:
        """A new running run of ``kind`` (one of `KINDS`), whatever else is stored; returns its id. A run that
        trains claims its configuration with `start_run` instead."""
        check_kind(kind)
        self.check_folders()
        with self._conn() as c:
            c.execute("BEGIN IMMEDIATE")
            run_id = self._insert_run(c, config_hash, config_json, total_steps, kind)
            c.execute("COMMIT")
        self.event(run_id, "created")
        return run_id

    def check_folders(self) -> None:
        """Refuse a store whose own folders (``runs``, ``tensors`` and its ``tensors/<xx>`` shards…) are links or
        not folders, before a run trains: its first save would refuse them anyway, after the training it wasted."""
        from dpviz.store.artifacts import STORE_FOLDERS

        for name in STORE_FOLDERS:
            _real_folder(self.root / name)
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for shard in os.scandir(self.root / "tensors"):  # tensors/<xx>: a run's first save writes there
                _real_folder(Path(shard.path))

    @staticmethod
    def _insert_run(c, config_hash: str, config_json: str, total_steps: int | None, kind: str) -> str:
        run_id = f"{config_hash[:8]}-{secrets.token_hex(3)}"
        c.execute("INSERT INTO runs(run_id, config_hash, config_json, status, created, owner, total_steps, kind)"
                  " VALUES (?,?,?,?,?,?,?,?)",
                  (run_id, config_hash, config_json, "running", time.time(), process_token(), total_steps, kind))
        return run_id

    def start_run(self, config_hash: str, config_json: str, total_steps: int | None = None, *, kind: str = "user",
                  reopen: tuple[str, int] | None = None, force: bool = False) -> tuple[str | None, str | None]:
        """Claim ``config_hash`` for training, in one write transaction: atomic across threads and processes.

        A configuration has at most one live run: so two requests racing on it never train it twice, and the
        private data's privacy loss is the budget once, not twice.

        Args:
            config_hash: as `create_run`.
            config_json: as `create_run`.
            total_steps: as `create_run`.
            kind: as `create_run`.
            reopen: (run id, step) of a stopped run of the configuration to go on with (`dpviz.training.resume`).
            force: a new run whatever is stored or live (the caller asked to spend the budget again).

        Returns:
            (run id, None): the caller trains this run — a new one, or ``reopen``'s, running again from its
            step; (None, other): ``other`` answers the request instead — a finished run of the configuration,
            or a live one whose process trains it (`wait_run` for it).
        """
        check_kind(kind)
        self.check_folders()
        ended = []
        with self._conn() as c:
            c.execute("BEGIN IMMEDIATE")
            rows = c.execute("SELECT run_id, status, owner FROM runs WHERE config_hash=? AND (status IN ('queued', "
                             "'running') OR (status='finished' AND json_valid(summary_json) AND "
                             "json_valid(config_json))) ORDER BY finished DESC", (config_hash,)).fetchall()
            live = []
            for r in rows:
                if r["status"] in LIVE and not owner_alive(r["owner"]):  # its process died: it answers nothing
                    c.execute("UPDATE runs SET status='interrupted', finished=?, error=? WHERE run_id=?",
                              (time.time(), DIED, r["run_id"]))
                    ended.append(r["run_id"])
                elif r["status"] in LIVE:
                    live.append(r["run_id"])
            other = next((r["run_id"] for r in rows if r["status"] == "finished"), None) or (live[0] if live else None)
            if other and not force:
                c.execute("COMMIT")
                run_id = None
            elif reopen and reopen[0] not in live:  # running again, owned here; what it recorded after its
                run_id, step = reopen                 # step (metrics, cached analyses) is recorded anew
                c.execute("DELETE FROM metrics WHERE run_id=? AND step>?", (run_id, step))
                c.execute("DELETE FROM analyses WHERE run_id=? AND step>?", (run_id, step))
                c.execute("UPDATE runs SET status='running', owner=?, error=NULL, finished=NULL, step=? WHERE run_id=?",
                          (process_token(), step, run_id))
                c.execute("COMMIT")
            else:
                run_id, reopen = self._insert_run(c, config_hash, config_json, total_steps, kind), None
                c.execute("COMMIT")
        for r in ended:
            self.event(r, "interrupted", DIED)
        if run_id:
            self.event(run_id, *(("resumed", f"from step {reopen[1]}") if reopen else ("created",)))
        return (run_id, None) if run_id else (None, other)

    def live_runs(self, config_hash: str) -> list[str]:
        """The runs of ``config_hash`` being trained now by a process that is alive."""
        with self._conn() as c:
            rows = c.execute("SELECT run_id, owner FROM runs WHERE config_hash=? AND status IN ('queued', 'running')",
                             (config_hash,)).fetchall()
        return [r["run_id"] for r in rows if owner_alive(r["owner"])]

    def trainings(self) -> dict[str, list[str]]:
        """Config hash → its private trainings (finished, or live in a living process): two or more mean the
        configuration's ε was spent that many times (`--force`)."""
        out: dict[str, list[str]] = {}
        with self._conn() as c:
            rows = c.execute("SELECT run_id, config_hash, status, owner FROM runs WHERE status IN "
                             "('finished', 'queued', 'running')").fetchall()
        for r in rows:
            if r["status"] == "finished" or owner_alive(r["owner"]):
                out.setdefault(r["config_hash"], []).append(r["run_id"])
        return out

    def wait_run(self, run_id: str, *, cancel=None, poll: float = 0.5) -> str:
        """Wait until ``run_id`` is no longer live (it ended, or its process died: then it is marked
        interrupted); returns its status. ``cancel``: an event that stops the wait (`Cancelled`)."""
        while True:
            row = self.known(run_id)
            if row["status"] not in LIVE:
                return row["status"]
            if not owner_alive(row["owner"]):
                self.finish_run(run_id, "interrupted", error=DIED)
                return "interrupted"
            if cancel is not None and cancel.wait(poll):
                raise Cancelled("cancelled while waiting for the same configuration's run")
            if cancel is None:
                time.sleep(poll)

    def interrupt_stopped(self, run_id: str, error: str) -> bool:
        """Store ``run_id`` interrupted where it stopped unfinished here: cancelled, or live in this process or in
        one that is gone; whether it did. A run another living process trains is left as it is: a request that
        waited for it may already be going on with it (`Store.start_run`'s ``reopen``)."""
        with self._conn() as c:
            c.execute("BEGIN IMMEDIATE")
            row = c.execute("SELECT status, owner FROM runs WHERE run_id=?", (run_id,)).fetchone()
            ours = row is not None and (row["status"] == "cancelled" or row["status"] in LIVE and (
                row["owner"] == process_token() or not owner_alive(row["owner"])))
            if ours:
                c.execute("UPDATE runs SET status='interrupted', finished=?, error=? WHERE run_id=?",
                          (time.time(), error, run_id))
            c.execute("COMMIT")
        if ours:
            self.event(run_id, "interrupted", error)
        return ours

    def claim(self, run_id: str, kind: str, *, current: str | None = None) -> None:
        """Relabel a stored ``search`` run as ``kind`` (a user's or a study's request answered by it from the
        cache): it is theirs from now on, listed and offered like the runs they launched. Other kinds stay.
        ``current``: the run's kind where the caller has read its row, so that a cache hit on a run that is
        no search run (the usual case) takes no write lock."""
        check_kind(kind)
        if kind != "search" and current in (None, "search"):
            self._tx("UPDATE runs SET kind=? WHERE run_id=? AND kind='search'", (kind, run_id))

    def update_run(self, run_id: str, **fields) -> None:
        """Set a run's columns; a summary (``summary``, or its JSON as ``summary_json``) is stored with its hash,
        which every read checks (`checks.decode_row`)."""
        if "summary" in fields:
            fields["summary_json"] = json.dumps(fields.pop("summary"))
        if "summary_json" in fields:
            fields["summary_sha"] = summary_sha(run_id, fields["summary_json"])
        cols = ", ".join(f"{k}=?" for k in fields)
        self._tx(f"UPDATE runs SET {cols} WHERE run_id=?", (*fields.values(), run_id))

    def finish_run(self, run_id: str, status: str, *, summary: dict | None = None, error: str | None = None):
        self.update_run(run_id, status=status, finished=time.time(), error=error,
                        summary_json=json.dumps(summary) if summary is not None else None)
        self.event(run_id, status, error)

    def known(self, run_id: str) -> sqlite3.Row:
        """The run's raw row (a damaged one too); a `StoreError` when no such run is stored."""
        with self._conn() as c:
            row = c.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"run_id: no stored run {run_id!r} (see `python -m dpviz list`)")
        return row

    def get_run(self, run_id: str) -> dict:
        """The run; one `StoreError` naming the run, the column and what to do when its row is garbled."""
        return decode_row(self.known(run_id), self.db)

    def signature(self) -> tuple:
        """(runs shown by default, the latest end time among them): changes when such a run is stored or
        ends, whoever ran it — what a page polls to redraw its tables (one indexed query, ≈ 1 ms)."""
        marks = ",".join("?" * len(SHOWN))
        with self._conn() as c:
            return tuple(c.execute(f"SELECT COUNT(*), MAX(finished) FROM runs WHERE kind IN ({marks})",
                                   SHOWN).fetchone())

    def find_finished(self, config_hash: str) -> dict | None:
        """The newest finished run of ``config_hash``; garbled rows are passed over (they answer nothing). A row whose
        summary was edited is one `StoreError` saying what to do (`checks.EditedSummary`)."""
        with self._conn() as c:
            rows = c.execute("SELECT * FROM runs WHERE config_hash=? AND status='finished' "
                             "ORDER BY finished DESC", (config_hash,)).fetchall()
        for row in rows:
            try:
                return decode_row(row, self.db)
            except EditedSummary:  # it answers nothing, and training again in its place would spend ε again
                raise
            except StoreError:
                continue
        return None

    def list_runs(self, status: str | None = None, *, kind: str | tuple | list | None = None,
                  damaged: bool = False) -> list[dict]:
        """Stored runs, oldest first; only those of ``kind`` (one of `KINDS` or several, e.g. `SHOWN`) when
        given. A row whose JSON is garbled is left out, or with ``damaged`` listed as {"run_id", "status":
        "damaged", "kind", "error": what is wrong and what to do}."""
        where, args = [], []
        if status:
            where, args = ["status=?"], [status]
        if kind is not None:
            kinds = (kind,) if isinstance(kind, str) else tuple(kind)
            for k in kinds:
                check_kind(k)
            where.append(f"kind IN ({','.join('?' * len(kinds))})")
            args += kinds
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        with self._conn() as c:
            rows = c.execute(sql + " ORDER BY created", args).fetchall()
        out = []
        for r in rows:
            try:
                out.append(decode_row(r, self.db))
            except StoreError as e:
                if damaged:
                    out.append({"run_id": r["run_id"], "status": "damaged", "kind": r["kind"], "error": str(e)})
        return out

    def delete_run(self, run_id: str) -> None:
        """Delete the run's rows and folder (a run whose row is garbled too)."""
        run = self.known(run_id)
        if run["status"] in LIVE and owner_alive(run["owner"]):
            raise StoreError(f"run_id: {run_id} is still running; cancel it first")
        with self._conn() as c:
            c.execute("BEGIN IMMEDIATE")
            for t in ("metrics", "events", "analyses", "file_hashes", "runs"):
                c.execute(f"DELETE FROM {t} WHERE run_id=?", (run_id,))
            self.drop_tensors(c, run_id)  # the shared tensor files no other run uses
            c.execute("COMMIT")
        shutil.rmtree(self.run_dir(run_id), ignore_errors=True)

    def recover(self) -> list[str]:
        """Mark runs whose owning process is gone as interrupted; return their ids."""
        dead = [r["run_id"] for r in self.list_runs() if r["status"] in LIVE and not owner_alive(r["owner"])]
        for run_id in dead:
            self.finish_run(run_id, "interrupted", error=DIED)
        return dead

    # --- metrics and events -----------------------------------------------
    def log_metrics(self, run_id: str, rows: list[tuple[int, str, float | None]]) -> None:
        """Insert (step, name, value) rows in one transaction."""
        if rows:
            self._tx("INSERT OR REPLACE INTO metrics VALUES (?,?,?,?)",
                     [(run_id, s, n, v) for s, n, v in rows], many=True)

    def metrics_signature(self, run_ids: list[str]) -> tuple:
        """(run id, rows, last step) per run that has metrics: changes whenever one of ``run_ids`` logs."""
        marks = ",".join("?" * len(run_ids))
        with self._conn() as c:
            rows = c.execute(f"SELECT run_id, COUNT(*), MAX(step) FROM metrics WHERE run_id IN ({marks}) "
                             "GROUP BY run_id ORDER BY run_id", tuple(run_ids)).fetchall()
        return tuple(tuple(r) for r in rows)

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
        """The stored result, or None; a row of another kind or a newer schema raises `StoreError`.

        A garbled ``result_json`` is None too, as if never computed: `dpviz.analyses.service.analyze`
        then computes it again and its row replaces the garbled one (a cache entry, nothing lost)."""
        with self._conn() as c:
            row = c.execute("SELECT result_json, kind, schema_version FROM analyses "
                            "WHERE run_id=? AND step=? AND name=? AND params_json=?",
                            (run_id, step, name, params_json)).fetchone()
        if row is None:
            return None
        if row["kind"] is not None or row["schema_version"] is not None:  # both NULL: a row from before schema 1
            artifacts.check(f"analysis {name} of run {run_id} at step {step}", "analysis", row["kind"],
                            row["schema_version"] or 0)
        return json_or_none(row["result_json"])  # garbled: treated as missing, so it is computed again

    # --- private searches (`dpviz.sweeps.private`): one entry each, its released run beside it --------
    def put_search(self, search_key: str, run_id: str | None, result: dict) -> None:
        self._tx("INSERT OR REPLACE INTO searches(search_key, run_id, result_json, created) VALUES (?,?,?,?)",
                 (search_key, run_id, json.dumps(result), time.time()))

    def get_search(self, search_key: str) -> dict | None:
        with self._conn() as c:
            row = c.execute("SELECT result_json FROM searches WHERE search_key=?", (search_key,)).fetchone()
        return json_or_none(row["result_json"]) if row else None

    def searches(self) -> list[dict]:
        """Stored private searches, newest first."""
        with self._conn() as c:
            rows = c.execute("SELECT result_json FROM searches ORDER BY created DESC").fetchall()
        return [d for r in rows if (d := json_or_none(r["result_json"])) is not None]

    # --- privacy audits (their training runs are not stored: only results) --------
    def put_audit(self, audit_key: str, config_hash: str, result: dict) -> None:
        self._tx("INSERT OR REPLACE INTO audits(audit_key, config_hash, result_json, created) VALUES (?,?,?,?)",
                 (audit_key, config_hash, json.dumps(result), time.time()))

    def get_audit(self, audit_key: str) -> dict | None:
        with self._conn() as c:
            row = c.execute("SELECT result_json FROM audits WHERE audit_key=?", (audit_key,)).fetchone()
        return json_or_none(row["result_json"]) if row else None  # garbled: missing, audited again

    def audits(self, config_hash: str | None = None) -> list[dict]:
        """Stored audit results, newest first; only those of one run configuration when given its hash."""
        sql = "SELECT result_json FROM audits" + (" WHERE config_hash=?" if config_hash else "")
        with self._conn() as c:
            rows = c.execute(sql + " ORDER BY created DESC", (config_hash,) if config_hash else ()).fetchall()
        return [d for r in rows if (d := json_or_none(r["result_json"])) is not None]
