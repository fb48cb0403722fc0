"""Tables and readings of the curvature and accountants figures.

Holds what the curvature figures (`dpviz.figures.curvature`) and the Curvature and Accountants pages
read: `curvature_table` (tr(H), GᵀG, GᵀHG and the denominator's terms per cached hessian result) with
`curvature_reading`, `accountants_reading` (σ per accountant over batch sizes) and
`batch_prediction_reading` (the batch size the curvature formula predicts against the one used).

Attributes:
    CURVATURE_FIELDS: the fields of a hessian result copied into each `curvature_table` row.
"""

from __future__ import annotations

import pandas as pd

from dpviz.privacy import names
from dpviz.store import Store
from dpviz.results.analyses import cached_analysis
from dpviz.results.labels import run_labels

CURVATURE_FIELDS = ("trace", "stderr", "probes", "gtg", "gthg", "tr_h_sigma", "clip_factor", "dominant",
                    "lr_star", "improvement_star", "parameters")


def curvature_table(store: Store, run_ids: list[str]) -> pd.DataFrame:
    """One row per cached hessian result: run, its strategy, mechanism and ε, step, tr(H) ± s.e., GᵀG, GᵀHG, the
    denominator's terms.

    ``attrs["missing"]`` lists (run_id, step) checkpoints not analysed yet; ``attrs["blocks"]`` is a long
    table (run_id, step, block, trace, stderr) of the per-block traces.
    """
    rows, blocks, missing = [], [], []
    labels = run_labels([store.get_run(rid) for rid in run_ids])
    for rid in run_ids:
        run = store.get_run(rid)
        for step in store.feature_steps(rid):
            res = cached_analysis(store, rid, step, "hessian")
            if res is None:
                missing.append((rid, step))
                continue
            rows.append({"run_id": rid, "label": labels[rid], "strategy": run["config"]["strategy"],
                         "mechanism": names.mechanism_of(run["config"]), "epsilon": run["config"]["epsilon"],
                         "step": step,
                         **{k: res[k] for k in CURVATURE_FIELDS}, **res["terms"],
                         "noise_multiplier": res["decelerator"]["noise_multiplier"],
                         "batch_size": res["decelerator"]["batch_size"],
                         "clip_norm": res["decelerator"]["clip_norm"]})
            blocks += [{"run_id": rid, "label": labels[rid], "step": step, "block": b, **v}
                       for b, v in res["blocks"].items()]
    df = pd.DataFrame(rows)
    df.attrs["missing"], df.attrs["blocks"] = missing, pd.DataFrame(blocks)
    return df


# --- readings of the curvature and accountants figures ---------------------------
def curvature_reading(df: pd.DataFrame) -> str:
    """Per run, which term dominates D at its last analysed checkpoint (a `curvature_table`)."""
    last = df.sort_values("step").groupby("run_id").tail(1)
    text = "; ".join(f"{r.label} at step {r.step}: {r.dominant} dominates D (decelerator {r.decelerator:.3g} vs "
                     f"GᵀHG {r.curvature:.3g}, tr(HΣ)/B {r.sampling:.3g})" for r in last.itertuples()) + "."
    negative = df[df["trace"] < 0]
    if len(negative):  # only then: a positive tr(H) leaves the second-order picture as it is
        at = ", ".join(f"{r.label} at step {r.step}" for r in negative.itertuples())
        text += (f" tr(H) is negative at {at} (an indefinite Hessian, common right after a random head is "
                 "attached): the second-order picture is unreliable there.")
    return text


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
