"""Run notebooks top to bottom and store their outputs in them, for the documentation to render without
executing anything (mkdocs-jupyter, ``execute: false``).

    .venv/bin/python scripts/store_notebook_outputs.py notebooks/quickstart.ipynb [...]

Each notebook runs in a fresh kernel, in a temporary folder with a store of its own (``DPVIZ_CACHE_DIR``),
so the runs it shows are trained for it. A plotly figure it displays gets a PNG rendering of itself beside
its JSON (the site shows the PNG; exported through `dpviz.figures.export`, with the system's Chromium),
and the kernel's warnings about its own progress-bar widgets are dropped. real_models.ipynb trains four
MiniLM runs: about half an hour on a busy 2-core CPU.
"""

from __future__ import annotations

import base64
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

PLOTLY = "application/vnd.plotly.v1+json"


def with_png(nb) -> None:
    """Give every plotly output of ``nb`` an ``image/png`` rendering; drop the TqdmWarning lines."""
    import plotly.graph_objects as go

    from dpviz.figures import export

    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs = [o for o in cell.outputs
                        if not (o.output_type == "stream" and o.name == "stderr" and "TqdmWarning" in o.text)]
        for out in cell.outputs:
            data = out.get("data", {})
            if PLOTLY in data and "image/png" not in data:
                png = export.figure_bytes(go.Figure(data[PLOTLY]), "png", caption="")
                data["image/png"] = base64.b64encode(png).decode()


def store_outputs(path: Path) -> float:
    """Execute the notebook at ``path`` and write it back with its outputs; the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as work:
        os.environ["DPVIZ_CACHE_DIR"] = str(Path(work) / "cache")
        start = time.perf_counter()
        NotebookClient(nb, timeout=3600, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": work}}).execute()
        took = time.perf_counter() - start
    with_png(nb)
    nbformat.write(nb, path)
    return took


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"{name}: {store_outputs(Path(name)):.0f} s", flush=True)
