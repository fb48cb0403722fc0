"""Plain, JSON/CSV-ready views of stored runs for figures, pages and notebooks.

Everything here reads the store and returns pandas DataFrames or dicts — the
tables figures are built from, the "matching run" (twin) lookups, and the
one-line readings and verdicts pages print under their figures; no plotting,
no Streamlit.
"""

from __future__ import annotations

import json
import math

import numpy as np
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
    """One row per run: config essentials, final test accuracy/loss, ε spent, wall time, status, and the
    strongest stored privacy audit of its configuration (ε_lb, threat, canaries M), if any."""
    from .audit.run import best_per_config

    audits, rows = best_per_config(store), []
    for rid in run_ids:
        run = store.get_run(rid)
        c, s, a = run["config"], run["summary"] or {}, audits.get(run["config_hash"], {})
        rows.append({
            "run_id": rid, "status": run["status"], "strategy": c["strategy"], "dataset": c["dataset"],
            "backbone": c["backbone"], "epsilon": c["epsilon"], "delta": c["delta"],
            "lp_fraction": c["lp_fraction"], "seed": c["seed"], "epochs": c["epochs"],
            "test_accuracy": s.get("test_accuracy"), "test_loss": s.get("test_loss"),
            "epsilon_spent": s.get("epsilon_spent"), "wall_time_s": s.get("wall_time_s"),
            "step": run["step"], "total_steps": run["total_steps"],
            "audit_epsilon_lb": a.get("epsilon_lb_best"), "audit_threat": a.get("threat"),
            "audit_canaries": a.get("canaries"),
        })
    return pd.DataFrame(rows)


def stored_ids(store: Store, run_ids) -> list[str]:
    """The ids of ``run_ids`` that are still in the store, in their order.

    A sweep's table names every run it finished, including runs deleted since.

    Args:
        store: the run store.
        run_ids: run ids, e.g. a sweep table's ``run_id`` column.
    """
    have = {r["run_id"] for r in store.list_runs()}
    return [r for r in run_ids if r in have]


def runs_of(store: Store, strategy: str, *, finished_only: bool = False) -> list[dict]:
    """Stored runs of ``strategy``, newest first (only finished ones when ``finished_only``)."""
    return [r for r in reversed(store.list_runs())
            if r["config"]["strategy"] == strategy and (r["status"] == "finished" or not finished_only)]


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
        The series (label, strategy, epsilon, values, rho, intercept, r2, pearson_r) of the runs whose
        result is cached, and the (run_id, step) checkpoints of the others, to queue for analysis.
    """
    out, missing = [], []
    for rid in run_ids:
        steps = store.feature_steps(rid)
        if not steps:
            continue
        res = cached_analysis(store, rid, steps[-1] if checkpoint == "last" else steps[0], name)
        if res is None:
            missing += [(rid, s) for s in steps]
            continue
        run = store.get_run(rid)
        out.append({"label": run_label(run) + f" @ step {res['step']}", "strategy": run["config"]["strategy"],
                    "epsilon": run["config"]["epsilon"], "values": res[field], "rho": res["rho"],
                    "intercept": res["intercept"], "r2": res["r2"], "pearson_r": res["pearson_r"]})
    return out, missing


def law_table(series: list[dict]) -> pd.DataFrame:
    """One row per `law_series` item: run, ρ, R², Pearson r and the value at each layer (``l=0`` … )."""
    return pd.DataFrame([{"run": s["label"], "rho": s["rho"], "R²": s["r2"], "Pearson r": s["pearson_r"],
                          **{f"l={i}": v for i, v in enumerate(s["values"])}} for s in series])


def embedding_frames(maps: list[dict]) -> list[tuple]:
    """(step, coords (N, 2), labels (N,)) per cached embedding result, for `embedding_map`."""
    return [(m["step"], np.asarray(m["coords"]), np.asarray(m["labels"])) for m in maps]


def embedding_table(frames: list[tuple]) -> pd.DataFrame:
    """The points of `embedding_frames` as one long table: step, x, y, label."""
    return pd.DataFrame([{"step": s, "x": c[0], "y": c[1], "label": int(lab)}
                         for s, cs, ls in frames for c, lab in zip(cs, ls)], columns=["step", "x", "y", "label"])


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


# --- sparse fine-tuning profile ------------------------------------------------
def method_of(row) -> str:
    """The profile's method of a sweep row: fft, lora, or the sparse run's selection."""
    return row["strategy"] if row["strategy"] in ("fft", "lora") else row["selection"]


def profile_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std over seeds per (ε, method, s, r), with the trainable percentage (FFT: 100 %).

    Args:
        rows: one row per finished run (`sweeps.table`): epsilon, strategy, selection, sparsity,
            test_accuracy, and trainable_fraction / lora_rank where the runs report them.
    """
    df = rows.copy()
    df["method"] = df.apply(method_of, axis=1)
    tf = df["trainable_fraction"] if "trainable_fraction" in df else pd.Series(float("nan"), index=df.index)
    df["trainable_pct"] = (100.0 * tf.astype(float)).where(df["method"] != "fft", 100.0)
    # the rank tells LoRA points apart; the sparsity tells the others apart
    df["lora_rank"] = df["lora_rank"].where(df["method"] == "lora") if "lora_rank" in df else float("nan")
    df["sparsity"] = df["sparsity"].where(df["method"] != "lora") if "sparsity" in df else float("nan")
    g = df.groupby(["epsilon", "method", "sparsity", "lora_rank"], dropna=False).agg(
        test_accuracy=("test_accuracy", "mean"), std=("test_accuracy", "std"), seeds=("test_accuracy", "count"),
        trainable_pct=("trainable_pct", "mean")).reset_index()
    return g.fillna({"std": 0.0})


def sparse_verdict(table: pd.DataFrame) -> str:
    """Per ε: SPARTA's best point against DP-FFT and the best other method (a `profile_table`)."""
    parts = []
    for e, t in table.groupby("epsilon", dropna=False):
        fft = t[t["method"] == "fft"]["test_accuracy"]
        sp = t[t["method"] == "sparta"]
        if sp.empty:
            continue
        best = sp.loc[sp["test_accuracy"].idxmax()]
        others = t[~t["method"].isin(["sparta", "fft"])]
        rival = others.loc[others["test_accuracy"].idxmax()] if len(others) else None
        rname = None if rival is None else rival.method + (f" r={rival.lora_rank:g}" if rival.method == "lora" else "")
        parts.append(f"ε = {e}: SPARTA best {best.test_accuracy:.3f} at s = {best.sparsity:g} "
                     f"({best.trainable_pct:.1f} % trained)"
                     + (f" vs DP-FFT {fft.iloc[0]:.3f}" if len(fft) else "")
                     + (f", best other method {rname} {rival.test_accuracy:.3f}" if rival is not None else ""))
    return "; ".join(parts) + "." if parts else "waiting for SPARTA runs."


def matching_run(store: Store, run: dict, *, finished_only: bool = True, **changes) -> dict | None:
    """The newest (finished) run whose config is ``run``'s with ``changes`` (e.g. strategy="fft"), or None.

    The "twin" a page compares with: the same data, backbone, budget and seed under another strategy.
    Every field but ``lora_rank`` keys the cache, so a caller resets the old strategy's own fields to
    the values the twin was run with (the sparse profile runs DP-FFT at the defaults).
    """
    from .config import RunConfig

    want = RunConfig.from_dict({**run["config"], **changes}, reset_unread=True).hash()
    same = [r for r in store.list_runs()
            if r["config_hash"] == want and (r["status"] == "finished" or not finished_only)]
    return same[-1] if same else None


def step_time_reading(store: Store, run_id: str, twin_id: str, phase: str, what: str) -> str | None:
    """One sentence comparing a run's median step time in ``phase`` (called ``what``) with its DP-FFT twin's.

    None when either run has no recorded step times.
    """
    mine, theirs = step_time_ms(store, run_id, phase), step_time_ms(store, twin_id)
    if not (mine and theirs):
        return None
    return (f"median {what} step {mine:.1f} ms vs dense DP-FFT step {theirs:.1f} ms in the same configuration: "
            f"{mine / theirs:.2f}× (wall time per step as recorded while training).")


# --- readings of the curvature and accountants figures ---------------------------
def curvature_reading(df: pd.DataFrame) -> str:
    """Per run, which term dominates D at its last analysed checkpoint (a `curvature_table`)."""
    last = df.sort_values("step").groupby("run_id").tail(1)
    return ("; ".join(f"{r.label} at step {r.step}: {r.dominant} dominates D (decelerator {r.decelerator:.3g} vs "
                      f"GᵀHG {r.curvature:.3g}, tr(HΣ)/B {r.sampling:.3g})" for r in last.itertuples())
            + ". A negative tr(H) (an indefinite Hessian, common right after a random head is attached) makes "
              "the second-order picture unreliable at that step.")


def accountants_reading(rows: pd.DataFrame) -> str:
    """How the accountants' σ compare and how much σ²/B moves over the batch sizes (`sigma_by_batch_size` rows)."""
    failed = rows[rows["noise_multiplier"].isna()]  # an accountant that cannot reach ε (RDP below its floor)
    note = (f" {', '.join(failed['accountant'].unique()).upper()} cannot reach this ε: {failed['error'].iloc[0]}."
            if len(failed) else "")
    rows = rows.dropna(subset=["noise_multiplier"])
    piv = rows.pivot(index="batch_size", columns="accountant", values="noise_multiplier")
    least, most = piv.mean().idxmin().upper(), piv.mean().idxmax().upper()
    ratio = (piv["rdp"] / piv["prv"]) if {"rdp", "prv"} <= set(piv) else None
    span = "" if ratio is None else f" (RDP/PRV σ ratio {ratio.min():.3f}–{ratio.max():.3f})"
    return (f"{least} needs the least σ and {most} the most{span}; σ grows with B, but σ²/B changes only "
            f"{rows['sigma2_over_b'].max() / rows['sigma2_over_b'].min():.2f}× over these B.{note}")


def batch_prediction_reading(pred: dict, used_batch_size: int) -> str:
    """The batch size the curvature formula predicts as best (a `predict_batch_size` result) vs the one used."""
    return (f"the formula predicts B = {pred['best_batch_size']} as best for this run's budget "
            f"(it used B = {used_batch_size}); a local prediction from one checkpoint, not a simulation.")


def switch_step(run: dict) -> int | None:
    """The step at which a continual run switched from public to private data (None before it has)."""
    return ((run["summary"] or {}).get("public_phase") or {}).get("step")


# --- readings of the budget, distortion, separability and compare figures ----------
def budget_reading(rows: pd.DataFrame) -> str:
    """The best LP share per ε (mean over seeds) and whether it grows as ε shrinks, as seeds 000/001 predict.

    Args:
        rows: one row per finished budget-sweep run: epsilon (None: no DP), lp_fraction, test_accuracy.
    """
    best = rows.groupby(["epsilon", "lp_fraction"], dropna=False)["test_accuracy"].mean().reset_index()
    picks = best.loc[best.groupby("epsilon", dropna=False)["test_accuracy"].idxmax()]
    text = ", ".join(f"ε={'∞' if pd.isna(r.epsilon) else f'{r.epsilon:g}'}: p={r.lp_fraction:g}"
                     for r in picks.itertuples())
    ps = list(picks.dropna(subset=["epsilon"]).sort_values("epsilon")["lp_fraction"])  # smallest ε first
    if len(ps) < 2:
        verdict = ""
    elif ps[0] > ps[-1] and all(a >= b for a, b in zip(ps, ps[1:])):
        verdict = "The best share grows as ε shrinks, as the papers predict."
    elif len(set(ps)) == 1:
        verdict = "The best share is the same at every ε here."
    else:
        verdict = "The best share does not grow monotonically as ε shrinks here."
    return f"best LP share per ε — {text}. {verdict}"


def knn_dip_reading(df: pd.DataFrame, tolerance: float = 0.02) -> str:
    """Which runs' kNN accuracy falls more than ``tolerance`` below its first value (an `analysis_curves` table)."""
    first = df.sort_values("step").groupby("label")["value"].agg(["first", "min", "last"])
    dips = first[first["min"] < first["first"] - tolerance]
    return ("kNN accuracy dips below its starting value for " + (", ".join(dips.index) or "no run")
            + f"; {len(df.attrs.get('missing', []))} checkpoint(s) still being analysed.")


def law_reading(series: list[dict], quantity: str) -> str:
    """The run whose per-layer ``quantity`` decays most geometrically (highest R² of the log-linear fit)."""
    best = max(series, key=lambda s: s["r2"] if s["r2"] == s["r2"] else -1)  # NaN R² ranks last
    return (f"{quantity}: the straightest decay is {best['label']} (ρ = {best['rho']:.3g}, "
            f"R² = {best['r2']:.2f}); ρ < 1 with R² near 1 means the law holds.")


def best_run_reading(table: pd.DataFrame) -> str | None:
    """The best final test accuracy among runs of a `final_table`, or None before any has one."""
    done = table.dropna(subset=["test_accuracy"]).sort_values("test_accuracy", ascending=False)
    if not len(done):
        return None
    b = done.iloc[0]
    spent = "no DP" if b["epsilon_spent"] is None or b["epsilon_spent"] != b["epsilon_spent"] \
        else f"ε spent {b['epsilon_spent']:.3f}"
    return (f"the best final test accuracy here is {b['test_accuracy']:.3f}, by {b['strategy']} "
            f"at ε = {b['epsilon']} ({spent}).")
