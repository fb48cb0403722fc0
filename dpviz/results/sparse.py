"""Tables and readings of sparse fine-tuning: masks, step times and the sparse profile.

Holds what the sparse figures (`dpviz.figures.sparse`) and the Sparse fine-tuning page read:
`sparse_mask` (a sparse run's recorded mask), `step_time_ms` / `step_time_reading` (median step time
per phase against the dense DP-FFT twin), and `method_of` / `profile_table` (mean ± std over seeds per
ε, method, sparsity and rank) with `sparse_verdict`.
"""

from __future__ import annotations

import math

import pandas as pd

from dpviz.store import Store

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


def step_time_reading(store: Store, run_id: str, twin_id: str, phase: str, what: str) -> str | None:
    """One sentence comparing a run's median step time in ``phase`` (called ``what``) with its DP-FFT twin's.

    None when either run has no recorded step times.
    """
    mine, theirs = step_time_ms(store, run_id, phase), step_time_ms(store, twin_id)
    if not (mine and theirs):
        return None
    return (f"median {what} step {mine:.1f} ms vs dense DP-FFT step {theirs:.1f} ms in the same configuration: "
            f"{mine / theirs:.2f}× (wall time per step as recorded while training).")
