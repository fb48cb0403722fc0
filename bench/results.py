"""Results files: what a benchmark measured, with the command, the date and the machine, written by the
script that measured it (``bench/results/<name>.json``). The documentation's *Measured* page is generated
from these files at every build (`scripts/docs_reference.py`), so a figure on the site is the last one a
script wrote and cannot be edited by hand.

Importing this module imports no torch (only dpviz's torch-free `dpviz.studies.results`): a benchmark records
after it has measured.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "bench" / "results"


def machine() -> str:
    """This machine in one line: CPU cores and model, memory (`dpviz.studies.results.machine`), and the
    accelerator with torch's version where torch is loaded."""
    from dpviz.studies.results import machine as host

    torch = sys.modules.get("torch")
    if torch is None:
        return host()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{host()}, {gpu}, torch {torch.__version__}"


def record(name: str, *, title: str, columns: list[str], rows: list[list], notes: str = "",
           folder: Path | None = None) -> Path:
    """Write ``bench/results/<name>.json``: a table (``columns``, ``rows``) with its title, a line of notes
    (what the figures mean), the command that measured it, the date (UTC) and the machine."""
    doc = {"title": title, "columns": columns, "rows": [[str(c) for c in r] for r in rows], "notes": notes,
           "command": " ".join(["python", *([Path(sys.argv[0]).resolve().relative_to(ROOT).as_posix()]
                                            if Path(sys.argv[0]).resolve().is_relative_to(ROOT) else sys.argv[:1]),
                                *sys.argv[1:]]),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "machine": machine()}
    folder = folder or FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    return path


def read_all(folder: Path | None = None) -> list[dict]:
    """Every results file (of ``folder``, default `FOLDER`), by name."""
    return [{"name": p.stem, **json.loads(p.read_text())} for p in sorted((folder or FOLDER).glob("*.json"))]
