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


def comparisons(task: str) -> list[tuple[str, dict]]:
    """The mechanism comparisons measured on ``task`` (`bench/compare_noise.py`'s ``noise_<task>…`` files, then
    `bench/compare_split.py`'s ``split_<task>…``), as (name, results doc), each kind sorted by name."""
    names = [p.stem for kind in ("noise", "split") for p in sorted(FOLDER.glob(f"{kind}_{task}*.json"))
             if p.stem == f"{kind}_{task}" or p.stem.startswith(f"{kind}_{task}_")]  # this task, not one it prefixes
    return [(n, doc) for n in names if (doc := _results(n)).get("rows") and doc.get("columns")]


def _mean_sd(cell: str) -> tuple[float, float] | None:
    """(mean, sd) of a results cell such as "0.823 ± 0.008 (2 of 3)" (sd 0 for one seed); None where empty."""
    m = re.match(r"\s*(-?[\d.]+)(?:\s*±\s*([\d.]+))?", cell or "")
    return (float(m.group(1)), float(m.group(2) or 0.0)) if m else None


def _by_epsilon(doc: dict) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    for r in doc["rows"]:
        out.setdefault(r[0], []).append(r)
    return out


def noise_reading(doc: dict) -> str:
    """A plain reading of a `compare_noise.py` table: per ε, which mechanism is the most accurate and by how much
    against the seeds' spread; whether any mechanism shows an early kNN dip; whether ρ (the D_l decay) moves."""
    cols = doc["columns"]
    acc, dip, rho = (cols.index(c) if c in cols else None for c in ("test accuracy", "early kNN dip", "ρ (D_l decay)"))
    said, dips, rhos = [], [], []
    for eps, rows in _by_epsilon(doc).items():
        cells = [(r[1], v) for r in rows if (v := _mean_sd(r[acc]))]
        base = next((v for name, v in cells if name == "dp-sgd"), None)
        if base is None or len(cells) < 2:
            continue
        name, (m, s) = max(cells, key=lambda c: c[1][0])
        if name == "dp-sgd":
            other, (m2, s2) = max(((n, v) for n, v in cells if n != "dp-sgd"), key=lambda c: c[1][0])
            gap, spread = m - m2, max(s, s2)
            said.append(f"at ε = {eps} DP-SGD is the most accurate ({m:.3f} ± {s:.3f}), {100 * gap:.1f} points "
                        f"above the best correlated row ({other}: {m2:.3f} ± {s2:.3f})")
        else:
            gap, spread = m - base[0], max(s, base[1])
            said.append(f"at ε = {eps} {name} is the most accurate ({m:.3f} ± {s:.3f}), {100 * gap:.1f} points "
                        f"above DP-SGD ({base[0]:.3f} ± {base[1]:.3f})")
        said[-1] += ", beyond the seeds' spread" if round(gap, 9) > spread else ", within the seeds' spread"
        if dip is not None:
            dips += [f"{r[1]} at ε = {eps}" for r in rows if (v := _mean_sd(r[dip])) and v[0] >= 0.01 and v[0] > v[1]]
        if rho is not None and len(vs := [(r[1], v) for r in rows if (v := _mean_sd(r[rho]))]) > 1:
            (lo_n, lo), (hi_n, hi) = min(vs, key=lambda c: c[1][0]), max(vs, key=lambda c: c[1][0])
            if round(hi[0] - lo[0], 9) > max(v[1] for _, v in vs):
                rhos.append(f"at ε = {eps} from {lo[0]:.3f} ({lo_n}) to {hi[0]:.3f} ({hi_n})")
    text = "; ".join(said) + "."
    if dip is not None:
        text += (" An early kNN dip beyond its spread under " + ", ".join(dips) + "." if dips else
                 " No mechanism shows an early kNN dip beyond the seeds' spread.")
    if rho is not None:
        text += (" ρ (the D_l decay over depth) moves by more than the spread " + "; ".join(rhos) + "." if rhos else
                 " ρ (the D_l decay over depth) is the same under every mechanism within the spread.")
    return text[0].upper() + text[1:]


def split_reading(doc: dict) -> str:
    """A plain reading of a `compare_split.py` table: per ε, each mechanism's best LP share, and whether its curve
    over p is flat within the seeds' spread (where the "best" p is no finding)."""
    cols = doc["columns"]
    ps = [(i, c.split("=", 1)[1].strip()) for i, c in enumerate(cols) if c.startswith("p =")]
    said = []
    for eps, rows in _by_epsilon(doc).items():
        parts = []
        for r in rows:
            cells = [(p, v) for i, p in ps if (v := _mean_sd(r[i]))]
            if not cells:
                continue
            best, (m, _) = max(cells, key=lambda c: c[1][0])
            flat = round(m - min(v[0] for _, v in cells), 9) <= max(v[1] for _, v in cells)  # cells: 3 decimals
            parts.append(f"p = {best} under {r[1]}" + (" (its curve flat within the spread)" if flat else ""))
        if parts:
            said.append(f"at ε = {eps} the best LP share is " + " and ".join(parts))
    text = "; ".join(said) + "."
    return text[0].upper() + text[1:] if said else ""


def comparison_reading(name: str, doc: dict) -> str:
    """The plain reading of a comparison file ``name`` (`comparisons`)."""
    return split_reading(doc) if name.startswith("split_") else noise_reading(doc)
