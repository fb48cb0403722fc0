"""Convert the scorecard files the former ``bench/run_scorecard.py`` wrote (``bench/results/scorecard_*.json``,
a table of display strings, and ``bench/results/rows/scorecard_*.json``, the rows whole) into the scorecard's
study results (`dpviz.studies.scorecard`), shipped in ``dpviz/studies/shipped/``.

Those rows kept each group's mean and std but not its per-seed values, nor the measurement their judge read, so
a converted file's provenance says ``per_seed: lost`` and its verdicts are the ones judged when it ran; where
only the table was kept (no rows file), a row holds its id, verdict and reading. Running the command its
provenance names again (``python -m dpviz reproduce …``) writes the rows whole.
Usage: python scripts/convert_scorecard_results.py bench/results/scorecard_*.json  (read, not changed)
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

from dpviz import reproduce
from dpviz.studies import scorecard as filed
from dpviz.studies import results


def _pass(command: str) -> tuple[str, str, dict, int]:
    """(task, size, fields set, seeds) of a ``bench/run_scorecard.py`` command."""
    words, task, scale, sets, seeds = shlex.split(command), "default", "small", {}, 3
    for i, w in enumerate(words):
        if w == "--task":
            task = words[i + 1]
        elif w == "--scale":
            scale = words[i + 1]
        elif w == "--seeds":
            seeds = int(words[i + 1])
        elif w == "--set":
            for item in words[i + 1:]:
                if item.startswith("--"):
                    break
                k, _, v = item.partition("=")
                sets[k] = json.loads(v) if v[:1].isdigit() else v
    return task, scale, sets, seeds


def _table_rows(doc: dict, task: str, scale: str, seeds: int) -> list[dict]:
    """Rows from the table alone: id, verdict, reading, and the claim's own header."""
    at = {c: doc["columns"].index(c) for c in ("id", "verdict", "reading")}
    out = []
    for r in doc["rows"]:
        claim = reproduce.REGISTRY[r[at["id"]]]
        out.append({**reproduce.unreadable_row(claim, task, scale), "verdict": r[at["verdict"]],
                    "reading": r[at["reading"]], "seeds": seeds})
    return out


def convert(path: Path) -> Path:
    doc = json.loads(path.read_text())
    task, scale, sets, seeds = _pass(doc["command"])
    whole = path.parent / "rows" / path.name
    rows = json.loads(whole.read_text())["rows"] if whole.exists() else _table_rows(doc, task, scale, seeds)
    res = filed.results_of(rows, task=task, scale=scale, changes=sets, seeds=range(seeds))
    command = re.sub(r" --cache-dir \S+", "", doc["command"]).replace("python bench/run_scorecard.py",
                                                                      "python -m dpviz reproduce")
    res.provenance = {"command": command, "dpviz": "not recorded", "commit": "not recorded",
                      "machine": doc["machine"], "device": "no GPU" if "no GPU" in doc["machine"] else "not recorded",
                      "date": doc["date"], "store": "not recorded", "per_seed": "lost",
                      "converted_from": f"bench/results/{path.name}", "notes": doc.get("notes", "")}
    name = filed.file_name(task, scale, sets)
    assert name == path.stem, (name, path.stem)  # the shipped name is the one the pages look for
    out = results.SHIPPED / f"{name}.json"
    out.write_text(json.dumps(res.to_json(), indent=1, ensure_ascii=False) + "\n")
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(convert(Path(arg)))
