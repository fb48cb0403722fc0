"""A study's results: numbers per cell and per seed, with their provenance; one writer and one reader.

A results file is JSON (``FORMAT``)::

    {"format": 1, "study": "noise", "task": "default", "scale": null, "sets": {}, "seeds": [0, 1, 2],
     "axes": {"epsilon": [1.0, 8.0], "bands": [1, 2, 4]},
     "cells": [{"cell": {"epsilon": 1.0, "bands": 1},
                "runs": {"0": {"run_id": "…", "config": "<config hash>", "values": {"accuracy": 0.53, …}}, …}}],
     "provenance": {"command": …, "dpviz": …, "commit": …, "machine": …, "device": …, "date": …, "store": …}}

Display strings ("0.530 ± 0.041 (2 of 3)") are derived from the numbers here (`Results.text`), never stored
and never parsed. A file converted from a table that kept only means and spreads says so: its cells hold
``summary`` (mean, sd, n per measure) instead of ``runs``, and ``provenance.per_seed`` is "lost".

Where they live: a study run into a store writes ``<store>/studies/<name>.json`` after every run
(`save`); the results dpviz ships are ``dpviz/studies/shipped/<name>.json``. `load` reads both, cell by
cell: a cell of the user's store replaces the shipped one as soon as it holds a seed.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dpviz.studies.base import cell_key

FORMAT = 1
SHIPPED = Path(__file__).resolve().parent / "shipped"
"""The results dpviz ships (package data), read when a store has none of a cell."""


def results_name(study: str, task: str, scale: str | None = None, sets: dict | None = None) -> str:
    """``<study>_<task>[_<scale>][_<fields set>]``: one file per study, task, size and fields set on every run
    (cells and seeds accumulate inside it)."""
    from dpviz.reproduce import variant

    v = variant(sets)
    plain = {k: x for k, x in (sets or {}).items() if k != "device"}
    if plain and any(re.sub(r"[^\w.-]", "", f"{k}-{x}") != f"{k}-{x}" for k, x in plain.items()):
        # a value the name cannot spell (a folder's path): its hash keeps two such sets in two files
        v += "-" + hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{study}_{task}" + (f"_{scale}" if scale else "") + (f"_{v}" if v else "")


@dataclass
class Results:
    """One study's numbers on one task, size and set of fields (see the module for the file)."""

    study: str
    task: str
    scale: str | None = None
    sets: dict = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)
    axes: dict[str, list] = field(default_factory=dict)
    cells: dict[str, dict] = field(default_factory=dict)  # cell_key → {"cell", "runs" | "summary", "source"}
    provenance: dict = field(default_factory=dict)
    shipped_provenance: dict | None = None  # the shipped file's, where a cell still comes from it
    refused: dict = field(default_factory=dict)  # cell key → why its configuration cannot run here (not saved)

    # --- what the runs gave ------------------------------------------------------------------------------
    def add(self, cell: dict, seed: int, *, run_id: str, config: str, values: dict) -> None:
        """Record one finished run's numbers (replacing a shipped cell's numbers by the store's)."""
        k = cell_key(cell)
        entry = self.cells.get(k)
        if entry is None or entry.get("source") != "store":
            entry = self.cells[k] = {"cell": dict(cell), "runs": {}, "source": "store"}
        entry["runs"][str(seed)] = {"run_id": run_id, "config": config,
                                    "values": {n: (None if v is None else float(v)) for n, v in values.items()}}
        if seed not in self.seeds:
            self.seeds = sorted({*self.seeds, seed})

    def done(self, cell: dict, seed: int, config: str) -> bool:
        """Whether this run (cell, seed, config hash) is recorded from a store already."""
        entry = self.cells.get(cell_key(cell))
        run = entry and entry.get("source") == "store" and entry["runs"].get(str(seed))
        return bool(run) and run["config"] == config

    def run_ids(self) -> list[str]:
        return [r["run_id"] for e in self.cells.values() for r in e.get("runs", {}).values()]

    # --- reading ------------------------------------------------------------------------------------------
    def values(self, cell: dict, name: str) -> list[float]:
        """The per-seed values of ``name`` in ``cell`` (seeds in order; seeds without a value left out)."""
        entry = self.cells.get(cell_key(cell)) or {}
        runs = entry.get("runs", {})
        return [v for s in sorted(runs, key=int) if (v := runs[s]["values"].get(name)) is not None]

    def stats(self, cell: dict, name: str) -> tuple[float, float, int] | None:
        """(mean, sample sd, seeds) of ``name`` in ``cell`` (sd 0 from one seed); None where nothing is there.
        A converted cell answers from its kept summary."""
        vs = self.values(cell, name)
        if vs:
            return statistics.mean(vs), (statistics.stdev(vs) if len(vs) > 1 else 0.0), len(vs)
        s = (self.cells.get(cell_key(cell)) or {}).get("summary", {}).get(name)
        return (s["mean"], s["sd"], s["n"]) if s else None

    def text(self, cell: dict, name: str, fmt: str = ".3f") -> str:
        """The display string of ``name`` in ``cell``: "0.530 ± 0.041", with "(2 of 3)" where seeds are missing;
        "" where there is no value."""
        st = self.stats(cell, name)
        if st is None:
            return ""
        m, sd, n = st
        out = f"{m:{fmt}} ± {sd:{fmt}}" if n > 1 else f"{m:{fmt}}"
        return out + (f" ({n} of {len(self.seeds)})" if self.seeds and n < len(self.seeds) else "")

    def source(self, cell: dict) -> str | None:
        """Where ``cell``'s numbers come from: "store", "shipped", or None."""
        return (self.cells.get(cell_key(cell)) or {}).get("source")

    def table(self, study) -> tuple[list[str], list[list[str]]]:
        """(columns, rows) for display: one row per cell with numbers, the cell as the study shows it
        (`Study.columns`), then its measures, then where it comes from."""
        entries = [e for e in self.cells.values() if any(self.stats(e["cell"], m.name) for m in study.measures)]
        heads = list(dict.fromkeys(k for e in entries for k in study.columns(e["cell"]))) or \
            list(study.columns(study.cells()[0]))
        cols = heads + [m.label + (" (not covered by ε)" if m.private else "") for m in study.measures] + ["source"]
        rows = []
        for e in entries:
            c, shown = e["cell"], study.columns(e["cell"])
            rows.append([shown.get(h, "") for h in heads] + [self.text(c, m.name, m.fmt) for m in study.measures]
                        + [e.get("source", "")])
        return cols, rows

    # --- the file -----------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"format": FORMAT, "study": self.study, "task": self.task, "scale": self.scale, "sets": self.sets,
                "seeds": self.seeds, "axes": self.axes,
                "cells": [{k: v for k, v in e.items() if k != "source"} for e in self.cells.values()
                          if e.get("source", "store") == "store"],
                "provenance": self.provenance}

    @classmethod
    def from_json(cls, doc: dict, source: str = "store") -> "Results":
        if doc.get("format") != FORMAT:
            raise ValueError(f"a study results file of format {doc.get('format')!r}, not {FORMAT}")
        out = cls(study=doc["study"], task=doc["task"], scale=doc.get("scale"), sets=doc.get("sets") or {},
                  seeds=list(doc.get("seeds") or []), axes=doc.get("axes") or {}, provenance=doc.get("provenance") or {})
        for e in doc.get("cells", []):
            out.cells[cell_key(e["cell"])] = {**e, "source": source}
        return out


def _show(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


# --- provenance ---------------------------------------------------------------------------------------------
def commit() -> str:
    """The git commit dpviz's source is at, read from its checkout's ``.git`` (no process started); "unknown"
    outside a checkout (an installed wheel)."""
    git = Path(__file__).resolve().parents[2] / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            ref = head[5:]
            loose = git / ref
            head = loose.read_text().strip() if loose.exists() else next(
                (line.split()[0] for line in (git / "packed-refs").read_text().splitlines()
                 if line.endswith(" " + ref)), "")
    except OSError:
        return "unknown"
    return head[:12] or "unknown"


def version() -> str:
    """dpviz's version as installed ("unknown" where it is not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("dpviz")
    except PackageNotFoundError:
        return "unknown"


def machine() -> str:
    """This machine in one line: CPU cores and model, memory."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        mem = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        mem = ""
    return f"{os.cpu_count()} CPU cores ({cpu}){mem}"


def device() -> str:
    """The accelerator the runs could use ("cpu" without one), with torch's version where torch is loaded."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "not recorded (torch not loaded)"
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return f"{name}, torch {torch.__version__}"


def store_digest(store, run_ids: list[str]) -> str:
    """SHA-256 (16 hex) of the stored records the numbers were read from: each run's id, config hash and
    summary, in id order. Another store with the same runs gives the same digest."""
    h = hashlib.sha256()
    for rid in sorted(set(run_ids)):
        try:
            r = store.get_run(rid)
        except Exception:  # noqa: BLE001 - a run pruned or deleted since: its id alone
            h.update(f"{rid}\n".encode())
            continue
        h.update(json.dumps({"run_id": rid, "config": r.get("config_hash"), "summary": r.get("summary")},
                            sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


WHO = ("command", "dpviz", "commit", "machine", "device", "date")


def provenance(command: str, store, run_ids: list[str], before: dict | None = None) -> dict:
    """Where the numbers come from: the command, dpviz's version and commit, the machine, the device, the date
    (UTC) and the store's digest. ``before``: the file's provenance so far; where an earlier piece ran another
    command, on another machine or device or at another commit, it is kept under ``earlier``."""
    out = {"command": command, "dpviz": version(), "commit": commit(), "machine": machine(), "device": device(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "store": store_digest(store, run_ids), "per_seed": "kept"}
    earlier = list((before or {}).get("earlier", []))
    if before and any(before.get(k) != out[k] for k in WHO if k != "date"):
        earlier.append({k: before.get(k) for k in WHO})
    return {**out, "earlier": earlier[-20:]} if earlier else out


def said(p: dict | None) -> str:
    """Provenance in one line, for captions."""
    if not p:
        return "no provenance recorded"
    out = f"`{p.get('command', '?')}`"
    if p.get("dpviz", "not recorded") != "not recorded":
        out += f", dpviz {p['dpviz']} ({p.get('commit', '?')})"
    out += f", {p.get('machine', '?')}"
    out += f", {p['device']}" if p.get("device") and p["device"] not in p.get("machine", "") else ""
    out += f", {p.get('date', 'undated')}"
    if p.get("store") and p["store"] != "not recorded":
        out += f", store digest {p['store']}"
    if p.get("earlier"):
        out += f"; earlier pieces: {len(p['earlier'])} (" + "; ".join(
            f"`{e.get('command')}`, {e.get('device')}, {e.get('date')}" for e in p["earlier"][-3:]) + ")"
    if p.get("per_seed") == "lost":
        out += "; converted from a table of means and spreads: per-seed values lost"
    return out


# --- the one writer, the one reader -------------------------------------------------------------------------
def path_in(store_root, name: str) -> Path:
    return Path(store_root) / "studies" / f"{name}.json"


def save(results: Results, store_root, *, private: list[str] = ()) -> Results:
    """Write ``results`` to ``<store>/studies/<name>.json``, merged under a lock with what the file holds (cells
    and seeds another writer saved since it was read: the page and the command line on one store lose
    nothing), atomically; ``private`` names its measures that are statistics of private data, which ε does
    not cover. Returns what was written."""
    from dpviz.store.safefile import locked, real_folder, write_atomic

    name = results_name(results.study, results.task, results.scale, results.sets)
    folder = real_folder(Path(store_root), "studies")
    path = folder / f"{name}.json"
    with locked(folder / f"{name}.lock"):
        there = _read_mine(path, results.study, results.task, results.scale, results.sets)
        merged = _merged(there, results) if there is not None else results
        doc = merged.to_json()
        doc["private_statistics"] = list(private)
        data = (json.dumps(doc, indent=1, ensure_ascii=False, default=str) + "\n").encode()
        write_atomic(path, lambda f: f.write(data))
    return merged


def _merged(there: Results, mine: Results) -> Results:
    """``mine`` with the file's cells and seeds it lacks (its own seeds win)."""
    for k, e in there.cells.items():
        own = mine.cells.get(k)
        if own is None or own.get("source") != "store":
            mine.cells[k] = e
        elif "runs" in own:  # a cell whose numbers are one row (a scorecard claim's) is replaced whole
            own["runs"] = {**e.get("runs", {}), **own.get("runs", {})}
    mine.seeds = sorted({*there.seeds, *mine.seeds})
    mine.axes = {**there.axes, **mine.axes}
    return mine


def _read(path: Path, source: str) -> Results | None:
    try:
        return Results.from_json(json.loads(path.read_text()), source)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _read_mine(path: Path, study: str, task: str, scale, sets) -> Results | None:
    """The store's results file at ``path`` (None where there is none). One that cannot be read, or that holds
    another study, task, size or set of fields, is a `StoreError` naming it: never replaced by an empty one."""
    from dpviz.errors import StoreError

    if not path.exists():
        return None
    res = _read(path, "store")
    asked = {k: v for k, v in (sets or {}).items() if k != "device"}
    if res is None:
        raise StoreError(f"study results {path}: not a results file dpviz can read (damaged, or of another "
                         "format); move it away to start this study's results afresh")
    held = {k: v for k, v in res.sets.items() if k != "device"}
    if (res.study, res.task, res.scale, held) != (study, task, scale, asked):
        raise StoreError(f"study results {path}: holds {res.study} on {res.task} (size {res.scale}, fields "
                         f"{held}), not {study} on {task} (size {scale}, fields {asked})")
    return res


def load(study: str, task: str, scale: str | None = None, sets: dict | None = None, *, store_root=None,
         shipped: bool = True) -> Results:
    """The results of ``study`` on ``task`` at ``scale`` with ``sets``: the store's cells, then the shipped
    file's where the store has none (``shipped=False``: the store's only). Empty where neither has any."""
    name = results_name(study, task, scale, sets)
    mine = _read_mine(path_in(store_root, name), study, task, scale, sets) if store_root is not None else None
    out = mine or Results(study=study, task=task, scale=scale, sets=dict(sets or {}))
    ship = _read(SHIPPED / f"{name}.json", "shipped") if shipped else None
    if ship:
        out.shipped_provenance = ship.provenance
        for k, e in ship.cells.items():
            out.cells.setdefault(k, e)
        out.seeds = out.seeds or ship.seeds
        out.axes = out.axes or ship.axes
    return out


def shipped_names() -> list[str]:
    """The names of the shipped results files."""
    return sorted(p.stem for p in SHIPPED.glob("*.json"))


def shipped_file(name: str) -> Results | None:
    return _read(SHIPPED / f"{name}.json", "shipped")
