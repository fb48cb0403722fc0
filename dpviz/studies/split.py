"""``split``: the best LP share under each mechanism (seed 001's budget split, asked again of BandMF).

DP-LP-FFT's test accuracy over the LP share p, DP-SGD beside BandMF, per ε. Every run takes the shipped grid's
DP-LP-FFT rates at its ε (the same for every mechanism: no search); p = 0 is DP-FFT and p = 1 is DP-LP, both
through the LP-FFT strategy.
"""

from __future__ import annotations

from dpviz.studies.base import Measure, Study
from dpviz.studies.noise import fields as _noise_fields
from dpviz.studies.noise import mechanism


def fields(cell: dict) -> dict:
    return {**_noise_fields(cell), "lp_fraction": float(cell["lp_fraction"])}


def show(cell: dict) -> dict:
    return {"ε": f"{float(cell['epsilon']):g}", "mechanism": mechanism(cell), "LP share p": f"{float(cell['lp_fraction']):g}"}


def measure(store, summary: dict, cfg) -> dict:
    return {"accuracy": summary["test_accuracy"], "epsilon_spent": summary["epsilon_spent"]}


def curves(res) -> dict:
    """(ε, mechanism) → [(p, (mean, sd, seeds))] over the p read, in order of p."""
    out: dict = {}
    for e in res.cells.values():
        c = e["cell"]
        if (st := res.stats(c, "accuracy")) is not None:
            out.setdefault((float(c["epsilon"]), mechanism(c)), {})[float(c["lp_fraction"])] = st
    return {k: sorted(v.items()) for k, v in sorted(out.items(), key=lambda kv: (kv[0][0], kv[0][1] != "DP-SGD"))}


def read(res) -> tuple[str, str]:
    """Per ε and mechanism, the best LP share, and whether the curve over p is flat within the seeds' spread
    (its best minus its worst no more than the largest sd), where the "best" p is no finding.

    Verdict: "an interior optimum" (some curve, not flat, peaks strictly between p = 0 and 1), "an end is best"
    (curves not flat peak at 0 or 1), or "flat within the spread"."""
    said, interior, ends = {}, False, False
    for (eps, mech), pts in curves(res).items():
        if len(pts) < 2:
            continue
        best, (m, _, _) = max(pts, key=lambda kv: kv[1][0])
        flat = round(m - min(v[0] for _, v in pts), 9) <= max(v[1] for _, v in pts)
        said.setdefault(eps, []).append(f"p = {best:g} under {mech}" + (" (its curve flat within the spread)" if flat
                                                                         else ""))
        if not flat:
            if 0 < best < 1 and best not in (pts[0][0], pts[-1][0]):
                interior = True
            else:
                ends = True
    if not said:
        return "not read", "No curve over p has two shares read yet."
    text = "; ".join(f"at ε = {eps:g} the best LP share is " + " and ".join(parts) for eps, parts in said.items())
    verdict = "an interior optimum" if interior else "an end is best" if ends else "flat within the spread"
    return verdict, text[0].upper() + text[1:] + "."


def figure(res):
    from dpviz.figures.studies import split_figure

    return split_figure(curves(res))


SPLIT = Study(
    name="split", title="The best LP share per mechanism",
    question="Where does the best share of the budget for linear probing lie under DP-SGD and under BandMF?",
    axes={"epsilon": (1.0, 8.0), "bands": (1, 4), "lp_fraction": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
          "family": ("bandmf",)},
    fields=fields, base=dict(strategy="lp-fft", keep_weights="none"),
    measures=(Measure(name="accuracy", label="test accuracy"), Measure(name="epsilon_spent", label="ε spent")),
    measure=measure, read=read, figure=figure, seed_paper="001", show=show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(SPLIT)
