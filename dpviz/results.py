"""Plain, JSON/CSV-ready views of stored runs for figures, pages and notebooks.

Everything here reads the store and returns pandas DataFrames or dicts; no
plotting, no Streamlit.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from .store import Store

CURVE_METRICS = ("loss", "train_accuracy", "test_accuracy", "test_loss", "epsilon",
                 "clip_fraction", "grad_norm", "lr", "step_ms")
_VARYING_IGNORED = ("seed", "device", "eval_every", "checkpoint_every")


def run_label(run: dict) -> str:
    """Short human label: strategy, ε, and the run id."""
    c = run["config"]
    eps = "∞" if str(c["epsilon"]) == "inf" else f"{float(c['epsilon']):g}"
    extra = f" p={c['lp_fraction']:g}" if c["strategy"] == "lp-fft" else ""
    return f"{c['strategy']}{extra} ε={eps} seed={c['seed']} [{run['run_id']}]"


def curves(store: Store, run_ids: list[str], metrics=CURVE_METRICS) -> pd.DataFrame:
    """Long table: run_id, label, strategy, epsilon, seed, group, step, metric, value."""
    frames = []
    for rid in run_ids:
        run = store.get_run(rid)
        m = store.metrics(rid)
        rows = [(step, name, v) for name in metrics for step, v in m.get(name, []) if v is not None]
        df = pd.DataFrame(rows, columns=["step", "metric", "value"])
        c = run["config"]
        df.insert(0, "run_id", rid)
        df.insert(1, "label", run_label(run))
        df.insert(2, "strategy", c["strategy"])
        df.insert(3, "epsilon", c["epsilon"])
        df.insert(4, "seed", c["seed"])
        df.insert(5, "group", group_key(c))
        frames.append(df)
    cols = ["run_id", "label", "strategy", "epsilon", "seed", "group", "step", "metric", "value"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def group_key(config: dict) -> str:
    """Runs with the same key differ only by seed (and bookkeeping fields)."""
    return json.dumps({k: v for k, v in sorted(config.items()) if k not in _VARYING_IGNORED})


def seed_bands(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds per (group, metric, step); n = number of runs."""
    g = df.groupby(["group", "strategy", "epsilon", "metric", "step"])["value"]
    out = g.agg(["mean", "std", "count"]).reset_index().rename(columns={"count": "n"})
    out["std"] = out["std"].fillna(0.0)
    return out


def final_table(store: Store, run_ids: list[str]) -> pd.DataFrame:
    """One row per run: config essentials, final test accuracy/loss, ε spent, wall time, status."""
    rows = []
    for rid in run_ids:
        run = store.get_run(rid)
        c, s = run["config"], run["summary"] or {}
        rows.append({
            "run_id": rid, "status": run["status"], "strategy": c["strategy"], "dataset": c["dataset"],
            "backbone": c["backbone"], "epsilon": c["epsilon"], "delta": c["delta"],
            "lp_fraction": c["lp_fraction"], "seed": c["seed"], "epochs": c["epochs"],
            "test_accuracy": s.get("test_accuracy"), "test_loss": s.get("test_loss"),
            "epsilon_spent": s.get("epsilon_spent"), "wall_time_s": s.get("wall_time_s"),
            "step": run["step"], "total_steps": run["total_steps"],
        })
    return pd.DataFrame(rows)


def caption(configs: list[dict]) -> str:
    """One-line description of the runs behind a figure, for exported images."""
    parts = []
    for c in configs:
        eps = "∞ (no DP)" if str(c["epsilon"]) == "inf" or not math.isfinite(float(c["epsilon"])) \
            else f"{float(c['epsilon']):g}"
        s = f"{c['strategy']}" + (f" (p={c['lp_fraction']:g})" if c["strategy"] == "lp-fft" else "")
        parts.append(f"{s}, (ε={eps}, δ={float(c['delta']):.0e}), {c['dataset']}/{c['backbone']}")
    uniq = list(dict.fromkeys(parts))
    more = f" … (+{len(uniq) - 4})" if len(uniq) > 4 else ""
    return "dpviz: " + "; ".join(uniq[:4]) + more


def analysis_curves(store: Store, run_ids: list[str], name: str, field: str) -> pd.DataFrame:
    """Cached scalar ``field`` of analysis ``name`` per checkpoint, in `curves`' long format.

    Reads only cached results (the background computes them), so it never blocks;
    ``missing`` lists (run_id, step) pairs not analysed yet.
    """
    rows, missing = [], []
    for rid in run_ids:
        run = store.get_run(rid)
        c = run["config"]
        for step in store.feature_steps(rid):
            res = cached_analysis(store, rid, step, name)
            if res is None:
                missing.append((rid, step))
                continue
            rows.append((rid, run_label(run), c["strategy"], c["epsilon"], c["seed"], group_key(c), step,
                         f"{name}_{field}", res[field]))
    cols = ["run_id", "label", "strategy", "epsilon", "seed", "group", "step", "metric", "value"]
    df = pd.DataFrame(rows, columns=cols)
    df.attrs["missing"] = missing
    return df


def cached_analysis(store: Store, run_id: str, step: int, name: str) -> dict | None:
    """The cached result of a background analysis with its default parameters, or None."""
    from .analyses import REGISTRY

    return store.get_analysis(run_id, step, name, json.dumps(REGISTRY[name].params, sort_keys=True))


def layer_table(store: Store, run_id: str, name: str, field: str) -> pd.DataFrame:
    """Per-layer values of ``field`` (fuzziness / residual) at every analysed checkpoint: step × layer."""
    rows = []
    for step in store.feature_steps(run_id):
        res = cached_analysis(store, run_id, step, name)
        if res is not None:
            rows += [{"step": step, "layer": l, "value": v} for l, v in enumerate(res[field])]
    return pd.DataFrame(rows, columns=["step", "layer", "value"])


CURVATURE_FIELDS = ("trace", "stderr", "probes", "gtg", "gthg", "tr_h_sigma", "clip_factor", "dominant",
                    "lr_star", "improvement_star", "parameters")


def curvature_table(store: Store, run_ids: list[str]) -> pd.DataFrame:
    """One row per cached hessian result: run, step, tr(H) ± s.e., GᵀG, GᵀHG, the denominator's terms.

    ``attrs["missing"]`` lists (run_id, step) checkpoints not analysed yet; ``attrs["blocks"]`` is a long
    table (run_id, step, block, trace, stderr) of the per-block traces.
    """
    rows, blocks, missing = [], [], []
    for rid in run_ids:
        run = store.get_run(rid)
        for step in store.feature_steps(rid):
            res = cached_analysis(store, rid, step, "hessian")
            if res is None:
                missing.append((rid, step))
                continue
            rows.append({"run_id": rid, "label": run_label(run), "strategy": run["config"]["strategy"],
                         "epsilon": run["config"]["epsilon"], "step": step,
                         **{k: res[k] for k in CURVATURE_FIELDS}, **res["terms"],
                         "noise_multiplier": res["decelerator"]["noise_multiplier"],
                         "batch_size": res["decelerator"]["batch_size"],
                         "clip_norm": res["decelerator"]["clip_norm"]})
            blocks += [{"run_id": rid, "label": run_label(run), "step": step, "block": b, **v}
                       for b, v in res["blocks"].items()]
    df = pd.DataFrame(rows)
    df.attrs["missing"], df.attrs["blocks"] = missing, pd.DataFrame(blocks)
    return df


def sparse_mask(store: Store, run_id: str) -> dict | None:
    """The recorded mask of a sparse run: {step, selection, sparsity, mask, rows_per_layer}, or None."""
    return store.load_mask(run_id)


def step_time_ms(store: Store, run_id: str, phase: str | None = None) -> float | None:
    """Median wall time per step (ms) over one phase of the run (all steps when ``phase`` is None)."""
    run = store.get_run(run_id)
    pts = store.metrics(run_id, "step_ms").get("step_ms", [])
    lo, hi = 0, math.inf
    if phase is not None and run["summary"]:
        end = run["summary"].get("public_phase", {}).get("step", 0)
        for p in run["summary"]["phases"]:
            if p["name"] == phase:
                lo, hi = end, end + p["steps"]
                break
            end += p["steps"]
        else:
            return None
    vals = sorted(v for s, v in pts if v is not None and lo < s <= hi)
    return vals[len(vals) // 2] if vals else None
