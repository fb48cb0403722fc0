"""The notebook runs top to bottom on the library and reproduces the Compare page's figure."""

import json
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from dpviz import figures, results
from dpviz.store import Store

ROOT = Path(__file__).resolve().parents[1]


def execute(name: str, tmp_path: Path, monkeypatch, **env) -> None:
    """Run a notebook top to bottom in a real kernel with ``env`` set."""
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()


@pytest.mark.slow
def test_quickstart_notebook_executes_and_matches_dashboard_figure(cache_dir, tmp_path, monkeypatch):
    out = tmp_path / "fig.html"
    execute("quickstart.ipynb", tmp_path, monkeypatch, DPVIZ_CACHE_DIR=cache_dir, DPVIZ_NB_EPOCHS=2, DPVIZ_NB_OUT=out)
    store = Store(cache_dir)
    runs = store.list_runs()
    assert sorted(r["config"]["strategy"] for r in runs) == ["fft", "lp", "lp-fft"]
    # The figure the notebook exported holds exactly the traces the dashboard draws for these runs.
    fig = figures.metric_curves(results.curves(store, [r["run_id"] for r in runs]), "test_accuracy")
    html = out.read_text()
    for trace in fig.data:  # plotly writes non-ASCII as JSON escapes
        assert json.dumps(trace.name)[1:-1] in html
    assert json.dumps(results.caption([r["config"] for r in runs]))[1:-1][:40] in html  # the caption


@pytest.mark.slow
def test_curvature_and_sparse_notebook_executes(cache_dir, tmp_path, monkeypatch):
    execute("curvature_and_sparse.ipynb", tmp_path, monkeypatch, DPVIZ_CACHE_DIR=cache_dir, DPVIZ_NB_EPOCHS=3,
            DPVIZ_NB_OUT=tmp_path)
    store = Store(cache_dir)
    runs = {r["config"]["strategy"]: r for r in store.list_runs()}
    assert set(runs) == {"fft", "sparse"}
    fft = runs["fft"]["run_id"]
    table = results.curvature_table(store, [fft])
    assert list(table["step"]) == store.feature_steps(fft) and table.attrs["missing"] == []
    assert "decelerator" in (tmp_path / "curvature_terms.html").read_text()
    assert [p["name"] for p in runs["sparse"]["summary"]["phases"]] == ["head", "select", "sparse"]
