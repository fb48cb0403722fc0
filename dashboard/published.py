"""Results files the benchmarks wrote (`bench/results/`), for pages that show a measured pass beside the store."""

from __future__ import annotations

import json
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "bench" / "results"


def scorecard_rows(task: str, size: str = "small") -> dict[str, dict]:
    """The rows `bench/run_scorecard.py` wrote for ``task`` at ``size`` (claim id → row), or {} where it has not."""
    name = f"scorecard_{task}" + (f"_{size}" if size != "small" else "")
    try:
        return {r["id"]: r for r in json.loads((FOLDER / "rows" / f"{name}.json").read_text())["rows"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}
