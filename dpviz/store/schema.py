"""The run store's tables, its run kinds, and the migration of stores made before a column existed."""

from __future__ import annotations

import sqlite3

from dpviz.errors import ConfigError

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, config_hash TEXT NOT NULL, config_json TEXT NOT NULL,
  status TEXT NOT NULL, created REAL, started REAL, finished REAL, owner TEXT,
  step INTEGER DEFAULT 0, total_steps INTEGER, summary_json TEXT, error TEXT,
  kind TEXT NOT NULL DEFAULT 'user', summary_sha TEXT);
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
CREATE TABLE IF NOT EXISTS searches (
  search_key TEXT PRIMARY KEY, run_id TEXT, result_json TEXT NOT NULL, created REAL);
CREATE TABLE IF NOT EXISTS tensor_refs (
  sha TEXT NOT NULL, run_id TEXT NOT NULL, PRIMARY KEY (sha, run_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tensor_refs_run ON tensor_refs(run_id);
CREATE TABLE IF NOT EXISTS file_hashes (
  run_id TEXT NOT NULL, name TEXT NOT NULL, sha TEXT NOT NULL, PRIMARY KEY (run_id, name)) WITHOUT ROWID;
"""
KINDS = ("user", "trial", "search")
"""Who made a stored run: ``user`` (a person launched it: ``python -m dpviz run``, a dashboard form or
preset, ``dpviz.run``), ``trial`` (a trial of a user's sweep or tuning study: the user's, marked) or
``search`` (a trial of the proxy search that resolves "auto" rates: nobody asked to see it)."""
SHOWN = ("user", "trial")
"""The kinds listed and offered by default (``python -m dpviz list``, every page's pickers)."""


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConfigError("kind", f"one of {', '.join(KINDS)}", kind)


def migrate(c: sqlite3.Connection) -> None:
    """Add the columns later schemas introduced to a store created before them: old analyses keep NULL;
    old runs get kind "user", except the trials of "auto" searches, told by the evaluation schedule only
    `dpviz.autotune.search_base` gives (eval_every = 10⁶ at seed 0: evaluated at the end only); old summaries
    get no hash (``summary_sha`` NULL: read as "unhashed", `checks.decode_row`)."""
    if "kind" not in {r[1] for r in c.execute("PRAGMA table_info(runs)")}:
        c.execute("BEGIN IMMEDIATE")
        c.execute("ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'user'")
        c.execute("UPDATE runs SET kind='search' WHERE json_valid(config_json) "
                  "AND json_extract(config_json, '$.eval_every') = 1000000 "
                  "AND json_extract(config_json, '$.seed') = 0")
        c.execute("COMMIT")
    if "summary_sha" not in {r[1] for r in c.execute("PRAGMA table_info(runs)")}:
        c.execute("ALTER TABLE runs ADD COLUMN summary_sha TEXT")
    have = {r[1] for r in c.execute("PRAGMA table_info(analyses)")}
    for col, typ in (("kind", "TEXT"), ("schema_version", "INTEGER")):
        if col not in have:
            c.execute(f"ALTER TABLE analyses ADD COLUMN {col} {typ}")
