"""``curvature``: the terms of the per-step improvement's denominator over DP-FFT training (Bu et al. 2024, 004).

DP-FFT at each ε and without DP (ε = ∞: σ = 0, so no decelerator), every run at the shipped grid's rates for its
ε, its weights kept at a checkpoint every 12 steps. At each early checkpoint (after step 0, up to half the run:
the scorecard's 004-decelerator) and at the last, the curvature analysis (`dpviz.analyses.hessian`) gives tr(H),
GᵀHG, tr(HΣ)/B and the decelerator σ²C²tr(H)/(B²c²). Read: how often the decelerator is the largest term early,
its share of the denominator at the first checkpoint and at the last, tr(H) there, and the batch size the formula
predicts as best at the run's ε from the last checkpoint (`dpviz.analyses.hessian.predict_batch_size`). Every
number is a statistic of private training data that ε does not cover.
"""

from __future__ import annotations

import math

from dpviz.studies.base import Measure, Study

BATCH_SIZES = (16, 32, 64, 128, 256, 512, 1024)
"""The batch sizes the prediction compares (those below the training set's size)."""
QUIET = 0.01
"""The decelerator's share of the denominator under which it is two orders of magnitude below the other terms."""


def fields(cell: dict) -> dict:
    return {"epsilon": float(cell["epsilon"])}


def _hessian(store, run_id: str, step: int, cfg) -> dict:
    """The curvature at ``step``, with the scorecard's probe budget on a backbone from a package."""
    from dpviz import catalog
    from dpviz.analyses.service import analyze
    from dpviz.reproduce.claims import REAL_HESSIAN

    params = REAL_HESSIAN if catalog.backbone(cfg.backbone).source == "package" else {}
    return analyze(store, run_id, "hessian", step=step, **params)


def share(result: dict) -> float:
    """The decelerator's share of the denominator's size: |decelerator| / Σ |term| (0 without DP)."""
    terms = result["terms"]
    total = sum(abs(v) for v in terms.values())
    return abs(terms["decelerator"]) / total if total > 0 else 0.0


def measure(store, summary: dict, cfg) -> dict:
    """The curvature at the early checkpoints (0 < step ≤ half the run) and at the last, and the batch size it
    predicts as best at the run's ε."""
    rid = summary["run_id"]
    steps = store.feature_steps(rid)
    early = [t for t in steps if 0 < t <= steps[-1] / 2] or [t for t in steps if t > 0][:1]
    if not early:  # a run too short for a checkpoint after step 0: nothing to read
        return dict.fromkeys(m.name for m in CURVATURE.measures)
    got = {t: _hessian(store, rid, t, cfg) for t in {*early, steps[-1]}}
    first, last = got[early[0]], got[steps[-1]]
    return {"dominant_early": sum(got[t]["dominant"] == "decelerator" for t in early) / len(early),
            "share_first": share(first), "share_last": share(last),
            "trace_first": first["trace"], "trace_last": last["trace"],
            "best_batch": best_batch(last, cfg, summary["n_train"])}


def best_batch(result: dict, cfg, n: int) -> float | None:
    """The batch size the curvature at ``result`` predicts as best for ``cfg``'s ε, δ and epochs on n examples
    (None without DP: no accountant calibrates σ for ε = ∞)."""
    from dpviz.analyses.hessian import predict_batch_size

    sizes = [b for b in BATCH_SIZES if b < n]
    if not math.isfinite(cfg.epsilon) or not sizes:
        return None
    pred = predict_batch_size(result, epsilon=cfg.epsilon, delta=cfg.delta, epochs=cfg.epochs, n=n,
                              batch_sizes=sizes, accountant=cfg.accountant)
    return None if pred["best_batch_size"] is None else float(pred["best_batch_size"])


def read(res) -> tuple[str, str]:
    """Whether the decelerator is the largest term at most early checkpoints (the scorecard's 004-decelerator) at
    the smallest finite ε, and at the largest; and when, at the largest, it falls under 1 % of the denominator (two
    orders of magnitude below the other terms). Verdict: "the decelerator dominates early at small ε only" (Bu et
    al.'s picture), "the decelerator dominates at every ε", "the decelerator dominates early" (one ε read), or
    "the decelerator does not dominate early"."""
    rows = sorted((float(e["cell"]["epsilon"]), e["cell"]) for e in res.cells.values()
                  if res.stats(e["cell"], "share_first") is not None)
    finite = [(eps, c) for eps, c in rows if math.isfinite(eps)]
    if not finite:
        return "not read", "No private run has its curvature read yet."
    (lo, _), (hi, large) = finite[0], finite[-1]
    dominates = {eps: (res.stats(c, "dominant_early") or (0.0,))[0] > 0.5 for eps, c in finite}
    verdict = ("the decelerator does not dominate early" if not dominates[lo] else
               "the decelerator dominates early" if hi == lo else
               "the decelerator dominates at every ε" if dominates[hi] else
               "the decelerator dominates early at small ε only")
    text = "; ".join(_said(res, eps, c) for eps, c in rows) + "."
    if hi != lo:
        text += f" At ε = {hi:g} it is {_quiet(res, large)}."
    return verdict, text[0].upper() + text[1:]


def _quiet(res, cell: dict) -> str:
    """Where the decelerator is two orders of magnitude below the other terms (under `QUIET` of D)."""
    at = tuple(where for where, k in (("first", "share_first"), ("last", "share_last"))
               if (st := res.stats(cell, k)) is not None and st[0] < QUIET)
    when = {("first", "last"): "at the first checkpoint and the last", ("first",): "at the first checkpoint only",
            ("last",): "by the last checkpoint, not at the first"}.get(at)
    return (f"under {QUIET:.0%} of the denominator (two orders of magnitude below the other terms) {when}" if when
            else f"above {QUIET:.0%} of the denominator at the first checkpoint and the last")


def _said(res, eps: float, cell: dict) -> str:
    """One ε's numbers in words (a number not read is left out)."""
    m = {k: st[0] for k in ("dominant_early", "share_first", "share_last", "trace_first", "trace_last", "best_batch")
         if (st := res.stats(cell, k)) is not None}
    trace = (f"tr(H) {m['trace_first']:.3g} → {m['trace_last']:.3g}" if {"trace_first", "trace_last"} <= set(m)
             else "tr(H) not read")
    if m.get("trace_first", 0) < 0:  # common right after a random head is attached: the picture is unreliable there
        trace += ", negative at first: an indefinite Hessian"
    if not math.isfinite(eps):
        return f"without DP the decelerator is 0 (σ = 0; {trace})"
    out = f"at ε = {eps:g} the decelerator"
    if "dominant_early" in m:
        out += f" is the largest term at {m['dominant_early']:.0%} of the early checkpoints,"
    out += f" {_pct(m['share_first'])} of the denominator at the first"
    out += f" and {_pct(m['share_last'])} at the last ({trace})" if "share_last" in m else f" ({trace})"
    return out + (f", predicted best B = {m['best_batch']:.0f}" if "best_batch" in m else "")


def _pct(x: float) -> str:
    """A share as a percentage with two significant digits: "62%", "0.0031%"."""
    return f"{100 * x:.2g}%"


def show(cell: dict) -> dict:
    eps = float(cell["epsilon"])
    return {"ε": f"{eps:g}" if math.isfinite(eps) else "∞ (no DP)"}


CURVATURE = Study(
    name="curvature", title="The decelerator over training",
    question="Is the decelerator σ²C²tr(H)/(B²c²) the largest term of the improvement's denominator early in "
             "training at small ε, and negligible at large ε?",
    axes={"epsilon": (1.0, 8.0, math.inf)},
    fields=fields, base=dict(strategy="fft", checkpoint_every=12, keep_weights="checkpoints"),
    measures=(Measure(name="dominant_early", label="early checkpoints where the decelerator dominates", fmt=".2f",
                      private=True),
              Measure(name="share_first", label="decelerator's share of D, first checkpoint", private=True),
              Measure(name="share_last", label="decelerator's share of D, last checkpoint", private=True),
              Measure(name="trace_first", label="tr(H), first checkpoint", fmt=".3g", private=True),
              Measure(name="trace_last", label="tr(H), last checkpoint", fmt=".3g", private=True),
              Measure(name="best_batch", label="predicted best B", fmt=".0f", private=True)),
    measure=measure, read=read, seed_paper="004", show=show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(CURVATURE)
