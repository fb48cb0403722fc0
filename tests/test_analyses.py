"""Analyses against direct computations, planted structure and scikit-learn."""

import json

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression
from sklearn.neighbors import KNeighborsClassifier

from dpviz.analyses import REGISTRY, run_analysis
from dpviz.analyses.embedding import embedding
from dpviz.analyses.knn import folds, knn
from dpviz.analyses.residual import prediction_residual, residual
from dpviz.analyses.separability import fit_law, fuzziness

rng = np.random.default_rng(0)


def blobs(n=300, d=12, k=4, spread=1.0, sep=5.0, seed=0):
    g = np.random.default_rng(seed)
    y = g.integers(0, k, n)
    centers = g.normal(size=(k, d)) * sep
    return centers[y] + g.normal(size=(n, d)) * spread, y


def direct_fuzziness(x, y):
    mu = x.mean(0)
    sb, sw = np.zeros((x.shape[1],) * 2), np.zeros((x.shape[1],) * 2)
    for c in np.unique(y):
        xc = x[y == c]
        m = xc.mean(0)
        sb += len(xc) * np.outer(m - mu, m - mu)
        sw += (xc - m).T @ (xc - m)
    return np.trace(sw / len(x) @ np.linalg.pinv(sb / len(x)))


def test_fuzziness_equals_direct_pinv_computation():
    x, y = blobs(d=20, k=5)
    assert fuzziness(x, y) == pytest.approx(direct_fuzziness(x, y), rel=1e-8)
    x, y = rng.normal(size=(50, 30)), rng.integers(0, 3, 50)  # d > n
    assert fuzziness(x, y) == pytest.approx(direct_fuzziness(x, y), rel=1e-6)


def test_fuzziness_small_when_separated_large_when_shuffled():
    x, y = blobs(spread=0.5, sep=10)
    shuffled = rng.permutation(y)
    assert fuzziness(x, y) < 0.05 < 10 < fuzziness(x, shuffled)


def test_law_fit_recovers_planted_decay():
    D = 3.0 * 0.6 ** np.arange(8) * np.exp(rng.normal(scale=0.01, size=8))
    f = fit_law(D)
    assert f.rho == pytest.approx(0.6, rel=0.02) and f.r2 > 0.99 and f.pearson_r < -0.99


def test_residual_equals_least_squares():
    x, y = blobs(d=6, k=3, spread=3.0)
    Y = np.eye(3)[y]
    pred = LinearRegression().fit(x, Y).predict(x)
    expect = ((Y - pred) ** 2).sum(1).mean() / ((Y - Y.mean(0)) ** 2).sum(1).mean()
    assert prediction_residual(x, y) == pytest.approx(expect, rel=1e-8)
    assert 0 < expect < 1


def test_residual_is_not_read_where_a_layer_has_fewer_examples_than_weights():
    """250 examples of 384 dimensions (MiniLM's stored evaluation features) fit any label exactly: NaN and
    a note, never a PR of 0; the low-dimensional layer is still read."""
    x, y = blobs(n=250, d=6, k=2, spread=3.0)
    wide = np.hstack([x, rng.normal(size=(250, 378))])
    r = residual({"layer_0": x, "layer_1": wide, "labels": y})
    assert 0 < r.residual[0] < 1 and np.isnan(r.residual[1])
    assert r.unreadable.startswith("not readable at layers 1: n = 250 examples for d + 1 = 385")
    ok = residual({"layer_0": x, "layer_1": wide[:, :100], "labels": y})
    assert ok.unreadable == "" and 0 < ok.residual[1] < ok.residual[0]
    assert np.isnan(residual({"layer_0": x, "labels": y}, min_examples_per_dim=50.0).residual[0])


@pytest.mark.parametrize("k", [1, 5, 20])
def test_knn_equals_sklearn(k):
    x, y = blobs(n=401, d=8, k=5, spread=3.0)
    ours = knn({"layer_0": x, "labels": y}, k=k)
    correct = 0
    for a, b in folds(len(y)):
        clf = KNeighborsClassifier(n_neighbors=k, metric="cosine", algorithm="brute").fit(x[a], y[a])
        correct += (clf.predict(x[b]) == y[b]).sum()
    assert ours.accuracy == pytest.approx(correct / len(y)) and ours.k == k
    assert 0.3 < ours.accuracy < 1.0


def test_embedding_is_aligned_across_checkpoints():
    x, y = blobs(d=10)
    moved = x.copy()
    moved[:50] += 5.0  # some points move between checkpoints, the rest stay
    ref = [x, moved]
    a = embedding({"layer_0": x, "layer_1": x, "labels": y}, reference=ref)
    b = embedding({"layer_0": x, "layer_1": moved, "labels": y}, reference=ref)
    assert np.allclose(a.coords[50:], b.coords[50:])  # fixed points map to the same place
    assert not np.allclose(a.coords[:50], b.coords[:50])
    assert a.coords.shape == (len(y), 2) and sum(a.explained) <= 1


def test_every_registered_analysis_is_json_ready_and_labelled_private():
    x, y = blobs(n=120)
    feats = {"layer_0": x, "layer_1": x * 0.5, "layer_2": x * 0.25, "labels": y}
    for name in (n for n, a in REGISTRY.items() if a.kind == "features"):  # model analyses: test_curvature
        out = run_analysis(name, feats)
        json.dumps(out)
        assert out["private_data"] is True and "NOT covered" in out["note"]


@pytest.mark.slow
def test_background_analyses_cached_per_checkpoint_and_cli(fast_cfg, cache_dir, tmp_path, capsys):
    import dpviz
    from dpviz.cli import main
    from dpviz.store import Store

    jm = dpviz.JobManager(cache_dir, max_workers=1)
    job = jm.submit(fast_cfg(strategy="fft", checkpoint_every=4, eval_subset=50))
    s = job.wait(300)
    jm.shutdown(cancel=False)  # waits for the queued analyses
    store = Store(cache_dir)
    steps = store.feature_steps(s["run_id"])
    assert steps == [0, 4, 8, 12]
    with store._conn() as c:
        cached = c.execute("SELECT step, name FROM analyses WHERE run_id=?", (s["run_id"],)).fetchall()
    assert {(st, n) for st, n in cached} == {(st, n) for st in steps
                                             for n in ("knn", "separability", "residual", "hessian")}

    def cli(*args):
        """``python -m dpviz ARGS`` on this store, run in this process (the command line in its own process:
        tests/test_cli.py); its exit code, stdout and stderr."""
        capsys.readouterr()
        code = main(["--cache-dir", str(cache_dir), *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    rc, out, _ = cli("analyze", "separability", s["run_id"], "--json")
    sep = json.loads(out)
    assert rc == 0 and len(sep["fuzziness"]) == 4 and {"rho", "r2", "pearson_r"} <= set(sep)
    feats = store.load_features(s["run_id"], 12)
    assert sep["fuzziness"][2] == pytest.approx(fuzziness(feats["layer_2"], feats["labels"]))
    rc, out, _ = cli("analyze", "residual", s["run_id"], "--step", "4", "--json")
    assert rc == 0 and len(json.loads(out)["residual"]) == 4 and json.loads(out)["step"] == 4
    rc, out, _ = cli("analyze", "knn", s["run_id"], "--k", "5", "--json")
    assert rc == 0 and json.loads(out)["k"] == 5 and 0 <= json.loads(out)["accuracy"] <= 1
    rc, out, _ = cli("analyze", "embedding", s["run_id"], "--json")
    assert rc == 0 and len(json.loads(out)["coords"]) == 50
    rc, out, _ = cli("analyze", "hessian", s["run_id"], "--step", "4", "--json")
    h = json.loads(out)
    assert rc == 0 and {"trace", "stderr", "probes", "decelerator", "terms", "blocks"} <= set(h)
    assert h["decelerator"]["batch_size"] == 256 and h["decelerator"]["clip_norm"] == 1.0
    assert h["decelerator"]["noise_multiplier"] == pytest.approx(s["phases"][0]["noise_multiplier"])
    assert h["probes"] >= 10 and h["stderr"] > 0 and set(h["blocks"]) >= {"block1", "head"}
    assert h["private_data"] is True and "NOT covered" in h["note"]
    rc, _, err = cli("analyze", "knn", s["run_id"], "--step", "3")
    assert rc == 2 and "step" in err and len(err.strip().splitlines()) == 1
    rc, _, err = cli("analyze", "magic", s["run_id"])
    assert rc == 2 and "analysis" in err
    rc, out, _ = cli("features", s["run_id"], "--out", str(tmp_path / "f.npz"))
    z = np.load(tmp_path / "f.npz")
    assert rc == 0 and sorted(z.files) == ["labels", "layer_0", "layer_1", "layer_2", "layer_3"]
    assert z["layer_0"].shape == (50, 256)
    # a checkpoint that arrives after the server stopped (a run still finishing): no error for the run,
    # nothing computed; a cancelling shutdown drops queued analyses instead of waiting for them
    jm2 = dpviz.JobManager(cache_dir, max_workers=1)
    with store._conn() as c:
        c.execute("DELETE FROM analyses WHERE run_id=?", (s["run_id"],))
    queued = [jm2.queue_analyses(s["run_id"], st) for st in steps]
    jm2.shutdown()
    late = jm2.queue_analyses(s["run_id"], 12)
    assert all(f.done() and f.result() is None for f in late)
    with store._conn() as c:
        left = c.execute("SELECT COUNT(*) FROM analyses WHERE run_id=?", (s["run_id"],)).fetchone()[0]
    assert left < 4 * len(steps) and sum(f.cancelled() for q in queued for f in q) > 0


def test_presets_are_valid_configs_of_the_papers_settings():
    from dpviz.experiments import distortion, law

    d = distortion()
    assert {(c.strategy, c.epsilon) for c in d} == {(s, e) for s in ("lp", "fft", "lp-fft") for e in (1.0, 8.0)}
    assert all(c.backbone == "vit" and c.checkpoint_every > 0 for c in d)
    lw = law()
    assert len(lw) == 16 and {c.tune_blocks for c in lw} == {1, 2, 3, 4}
    assert all(c.delta == pytest.approx(1 / 1437) for c in lw)  # δ = 1/n as in the anonymous ViT study
    assert len({(c.lr_lp, c.lr_ft) for c in lw}) == 3  # one constant rate, one tuned pair per ε


@pytest.mark.slow
def test_umap_maps_are_aligned_across_checkpoints():
    from dpviz.analyses.embedding import umap_maps, warm_umap

    warm_umap()
    x, _ = blobs(n=300, d=10, k=4)
    moved = x.copy()
    moved[:100] += np.random.default_rng(1).normal(scale=4.0, size=(100, 10))
    a, b = umap_maps([x, moved])
    extent = np.ptp(np.vstack([a, b]), axis=0).max()
    still = np.linalg.norm(a[100:] - b[100:], axis=1)
    shifted = np.linalg.norm(a[:100] - b[:100], axis=1)
    assert np.median(still) < 0.05 * extent  # a fixed point set maps to the same place
    assert np.median(shifted) > 3 * np.median(still)
