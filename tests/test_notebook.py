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

pytestmark = pytest.mark.subprocess  # nbclient starts a Jupyter kernel


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


@pytest.mark.slow
@pytest.mark.real
def test_real_models_notebook_executes_on_a_tiny_real_text_task(cache_dir, tmp_path, monkeypatch):
    """MiniLM on 64 tweets of 16 tokens, fixed rates (no search): LP and LP-FFT stored, the utility curve and
    the law across the embeddings and 6 blocks exported, the law's caption marked as private statistics."""
    size = {"train_size": 64, "max_length": 16, "batch_size": 32, "eval_subset": 40, "checkpoint_every": -1}
    execute("real_models.ipynb", tmp_path, monkeypatch, DPVIZ_CACHE_DIR=cache_dir, DPVIZ_NB_SIZE=json.dumps(size),
            DPVIZ_NB_RATES=json.dumps({"lr_lp": 1.0, "lr_ft": 0.05}), DPVIZ_NB_SHARES="0.5", DPVIZ_NB_OUT=tmp_path)
    store = Store(cache_dir)
    runs = store.list_runs()
    assert sorted(r["config"]["strategy"] for r in runs) == ["lp", "lp-fft"]
    assert {(r["config"]["backbone"], r["config"]["dataset"], r["config"]["train_size"]) for r in runs} == {
        ("minilm", "tweets", 64)}
    assert all(r["summary"]["epsilon_spent"] <= 8.0 for r in runs)
    law = (tmp_path / "law_minilm.html").read_text()
    assert "pretrained MiniLM (step 0)" in law and "NOT covered by the DP guarantee" in law
    assert "LP share" in (tmp_path / "utility_curve.html").read_text()
