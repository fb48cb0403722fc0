"""Results files the benchmarks wrote (`bench/results/`), for pages that show a measured pass beside the store."""

from __future__ import annotations

import json
import re
from pathlib import Path

from dpviz import reproduce

FOLDER = Path(__file__).resolve().parents[1] / "bench" / "results"


def scorecard_rows(task: str, size: str = "small", changes: dict | None = None) -> dict[str, dict]:
    """The rows `bench/run_scorecard.py` wrote for ``task`` at ``size`` (claim id → row), or {} where it has not;
    ``changes``: a pass with fields set on every run (`--set`, e.g. mechanism bandmf)."""
    name = reproduce.results_name(task, size, changes)
    try:
        return {r["id"]: r for r in json.loads((FOLDER / "rows" / f"{name}.json").read_text())["rows"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _results(name: str) -> dict:
    try:
        return json.loads((FOLDER / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}


def scorecard_verdicts(task: str, size: str = "small", changes: dict | None = None) -> dict[str, dict]:
    """The project's own measured rows for ``task`` at ``size``: the full rows (with their figures' curves) where
    `bench/run_scorecard.py` wrote them, else the verdict and reading of its results table (claim id → row, each
    marked ``"file": True``); {} where no pass was measured."""
    name = reproduce.results_name(task, size, changes)
    if full := scorecard_rows(task, size, changes):
        return {k: {**r, "file": True} for k, r in full.items()}
    doc = _results(name)
    cols, seeds = doc.get("columns", []), _seeds(doc)
    try:
        at = {c: cols.index(c) for c in ("id", "verdict", "reading")}
    except ValueError:
        return {}
    return {r[at["id"]]: {"id": r[at["id"]], "verdict": r[at["verdict"]], "reading": r[at["reading"]],
                          "seeds": seeds, "file": True} for r in doc.get("rows", [])}


def _seeds(doc: dict) -> int | None:
    m = re.search(r"(\d+) seeds", doc.get("notes", "") + " ".join(doc.get("columns", [])))
    return int(m.group(1)) if m else None


def provenance(task: str, size: str = "small", changes: dict | None = None) -> str | None:
    """Where ``task``'s measured scorecard comes from: its command, machine and date (None: no file)."""
    doc = _results(reproduce.results_name(task, size, changes))
    if not doc.get("command"):
        return None
    return f"`{doc['command']}` on {doc.get('machine', 'an unrecorded machine')}, {doc.get('date', 'undated')}"
