"""Tables and readings of the representation analyses: kNN accuracy, separability, residuals, embeddings.

Holds what the analysis figures (`dpviz.figures.analyses`) and the Feature distortion and Separability
law pages read, all from cached background analyses (never computed here): `cached_analysis` (one
result), `analysis_curves` (a scalar per checkpoint, in `curves`' long format) with `knn_dip_reading`,
`layer_table` (per-layer values per checkpoint), `law_series` / `law_table` (the per-layer law and its
fit at one checkpoint per run) with `law_reading`, and `embedding_frames` / `embedding_table` (2-D maps).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from dpviz.privacy import names
from dpviz.store import Store
from dpviz.results.labels import run_labels
from dpviz.results.runs import group_key

def analysis_curves(store: Store, run_ids: list[str], name: str, field: str) -> pd.DataFrame:
    """Cached scalar ``field`` of analysis ``name`` per checkpoint, in `curves`' long format.

    Reads only cached results (the background computes them), so it never blocks;
    ``missing`` lists (run_id, step) pairs not analysed yet.
    """
    rows, missing = [], []
    labels = run_labels([store.get_run(rid) for rid in run_ids])
    for rid in run_ids:
        run = store.get_run(rid)
        c = run["config"]
        for step in store.feature_steps(rid):
            res = cached_analysis(store, rid, step, name)
            if res is None:
                missing.append((rid, step))
                continue
            rows.append((rid, labels[rid], c["strategy"], c["epsilon"], c["seed"], group_key(c),
                         names.mechanism_of(c), c.get("bands", 1), step, f"{name}_{field}", res[field]))
    cols = ["run_id", "label", "strategy", "epsilon", "seed", "group", "mechanism", "bands", "step", "metric", "value"]
    df = pd.DataFrame(rows, columns=cols)
    df.attrs["missing"] = missing
    return df


def cached_analysis(store: Store, run_id: str, step: int, name: str) -> dict | None:
    """The cached result of a background analysis with its default parameters, or None."""
    from dpviz.analyses import REGISTRY

    return store.get_analysis(run_id, step, name, json.dumps(REGISTRY[name].params, sort_keys=True))


def layer_table(store: Store, run_id: str, name: str, field: str) -> pd.DataFrame:
    """Per-layer values of ``field`` (fuzziness / residual) at every analysed checkpoint: step × layer."""
    rows = []
    for step in store.feature_steps(run_id):
        res = cached_analysis(store, run_id, step, name)
        if res is not None:
            rows += [{"step": step, "layer": l, "value": v} for l, v in enumerate(res[field])]
    return pd.DataFrame(rows, columns=["step", "layer", "value"])


def law_series(store: Store, run_ids: list[str], name: str, field: str, *,
               checkpoint: str = "last") -> tuple[list[dict], list[tuple[str, int]]]:
    """Per-layer values of a cached law analysis at one checkpoint of each run, with the fit, for `law_plot`.

    Args:
        store: the run store.
        run_ids: runs with feature checkpoints.
        name: the analysis ("separability" or "residual").
        field: its per-layer field ("fuzziness" or "residual").
        checkpoint: "last" or "first" feature checkpoint of each run.

    Returns:
        The series (run_id, label, strategy, mechanism, epsilon, values, rho, intercept, r2, pearson_r) of the runs
        whose result is cached, and the (run_id, step) checkpoints of the others, to queue for analysis.
    """
    out, missing = [], []
    labels = run_labels([store.get_run(rid) for rid in run_ids])
    for rid in run_ids:
        steps = store.feature_steps(rid)
        if not steps:
            continue
        res = cached_analysis(store, rid, steps[-1] if checkpoint == "last" else steps[0], name)
        if res is None:
            missing += [(rid, s) for s in steps]
            continue
        run = store.get_run(rid)
        out.append({"run_id": rid, "label": labels[rid] + f" @ step {res['step']}",
                    "strategy": run["config"]["strategy"], "mechanism": names.mechanism_of(run["config"]),
                    "epsilon": run["config"]["epsilon"], "values": res[field], "rho": res["rho"],
                    "intercept": res["intercept"], "r2": res["r2"], "pearson_r": res["pearson_r"],
                    "unreadable": res.get("unreadable", "")})
    return out, missing


def law_table(series: list[dict]) -> pd.DataFrame:
    """One row per `law_series` item: run, ρ, R², Pearson r and the value at each layer (``l=0`` … )."""
    return pd.DataFrame([{"run": s["label"], "rho": s["rho"], "R²": s["r2"], "Pearson r": s["pearson_r"],
                          **{f"l={i}": v for i, v in enumerate(s["values"])}} for s in series])


def embedding_frames(maps: list[dict]) -> list[tuple]:
    """(step, coords (N, 2), labels (N,)) per cached embedding result, for `embedding_map`."""
    return [(m["step"], np.asarray(m["coords"]), np.asarray(m["labels"])) for m in maps]


def feature_texts(store: Store, run_id: str, step: int) -> tuple[list[str] | None, tuple[str, ...] | None]:
    """A text run's evaluation texts and class names as its checkpoint at ``step`` stored them; (None,
    None) for an image run. The texts are private records: shown only under the private-data notice."""
    try:
        feats = store.load_features(run_id, step)
    except Exception:  # noqa: BLE001 - a missing or damaged checkpoint: the map simply has no hover text
        return None, None
    texts = feats.get("texts")
    names = feats.get("class_names")
    return (texts.tolist() if texts is not None else None), (tuple(names.tolist()) if names is not None else None)


def embedding_table(frames: list[tuple]) -> pd.DataFrame:
    """The points of `embedding_frames` as one long table: step, x, y, label."""
    return pd.DataFrame([{"step": s, "x": c[0], "y": c[1], "label": int(lab)}
                         for s, cs, ls in frames for c, lab in zip(cs, ls)], columns=["step", "x", "y", "label"])


def knn_dip_reading(df: pd.DataFrame, tolerance: float = 0.02) -> str:
    """Which runs' kNN accuracy falls more than ``tolerance`` below its first value (an `analysis_curves` table);
    where none does, the largest fall there is, so that the reading says something about every run."""
    first = df.sort_values("step").groupby("label")["value"].agg(["first", "min", "last"])
    dips = first[first["min"] < first["first"] - tolerance]
    if len(dips):
        text = f"kNN accuracy dips more than {tolerance:g} below its starting value for {', '.join(dips.index)}"
    else:
        fall = (first["first"] - first["min"]).sort_values()
        text = (f"kNN accuracy dips more than {tolerance:g} below its starting value for no run"
                + (f" (the largest fall: {fall.index[-1]}, by {fall.iloc[-1]:.3f})" if fall.iloc[-1] > 0
                   else ": no run falls below its start at all"))
    missing = len(df.attrs.get("missing", []))
    return text + (f"; {missing} checkpoint(s) still being analysed." if missing else ".")


def law_reading(series: list[dict], quantity: str) -> str:
    """The run whose per-layer ``quantity`` decays most geometrically (highest R² of the log-linear fit)."""
    decays = [s for s in series if s["rho"] < 1 and s["r2"] == s["r2"]]  # a rising fit (ρ ≥ 1) is no decay
    why = [s["unreadable"] for s in series if s.get("unreadable") and s["rho"] != s["rho"]]
    if not decays and why:
        return f"{quantity}: {why[0]}."
    if not decays:
        return f"{quantity}: no run's values decay with depth (no fit has ρ < 1), so the law holds for none here."
    best = max(decays, key=lambda s: s["r2"])
    holds = best["r2"] >= 0.8
    return (f"{quantity}: the straightest decay is {best['label']} (ρ = {best['rho']:.3g}, "
            f"R² = {best['r2']:.2f}); ρ < 1 with R² near 1 means the law holds"
            + ("." if holds else ", so here it holds for no run (no decaying fit reaches R² = 0.8)."))
