"""``parts``: what BandMF's assignment of records to parts costs: ``independent`` (each record's part drawn on its
own, valid for add-or-remove neighbours) beside ``equal`` (an equal split, valid for zero-out neighbours only),
BandMF b = 4, per ε. Every run takes the shipped grid's rates: the two differ only in parts. The gap is
paired by seed (the same seed's data order and noise stream under both assignments).
"""

from __future__ import annotations

import statistics

from dpviz.studies.base import Measure, Study


def fields(cell: dict) -> dict:
    return {"epsilon": float(cell["epsilon"]), "mechanism": "bandmf", "bands": int(cell["bands"]),
            "parts": cell["parts"]}


def measure(store, summary: dict, cfg) -> dict:
    return {"accuracy": summary["test_accuracy"], "epsilon_spent": summary["epsilon_spent"]}


def paired_gaps(res) -> dict:
    """(ε, b) → [independent − equal accuracy, per seed both have]; a pair only from one source (a store cell
    is never paired with a shipped one, run on another machine and code)."""
    runs, source = {}, {}
    for e in res.cells.values():
        c = e["cell"]
        k = (float(c["epsilon"]), int(c["bands"]), c["parts"])
        runs[k] = {s: r["values"]["accuracy"] for s, r in e.get("runs", {}).items()}
        source[k] = e.get("source")
    out = {}
    for (eps, b, parts), by_seed in sorted(runs.items()):
        other = runs.get((eps, b, "equal"))
        if parts == "independent" and other and source[(eps, b, parts)] == source[(eps, b, "equal")]:
            out[(eps, b)] = [by_seed[s] - other[s] for s in sorted(by_seed, key=int) if s in other]
    return out


def read(res) -> tuple[str, str]:
    """Per ε, the mean gap independent − equal over seeds, paired by seed, and a paired t-test of it (two-sided,
    95 %): the pairs share their data order and noise, so the gap's own spread is what a difference is judged by.

    Verdict: "independent parts cost accuracy" / "independent parts gain accuracy" (a significant gap at some ε,
    all one way), "mixed", or "no difference beyond chance"."""
    from scipy import stats

    said, ways = [], set()
    for (eps, b), gaps in paired_gaps(res).items():
        if not gaps:
            continue
        m = statistics.mean(gaps)
        sd = statistics.stdev(gaps) if len(gaps) > 1 else 0.0
        n = len(gaps)
        t = m / (sd / n ** 0.5) if n > 1 and sd > 0 else float("nan")
        beyond = n > 1 and abs(t) > stats.t.ppf(0.975, n - 1)
        said.append(f"at ε = {eps:g} (b = {b}) independent parts are {100 * abs(m):.1f} points "
                    f"{'below' if m < 0 else 'above'} an equal split ({m:+.3f} ± {sd:.3f} over {n} paired seeds"
                    + (f"; paired t = {t:.1f}, {'beyond' if beyond else 'within'} chance at 95 %" if n > 1 else
                       "; one seed: no test") + ")")
        if beyond:
            ways.add("cost" if m < 0 else "gain")
    if not said:
        return "not read", "No ε has both assignments read on the same seed yet."
    verdict = ("independent parts cost accuracy" if ways == {"cost"} else
               "independent parts gain accuracy" if ways == {"gain"} else
               "mixed" if ways else "no difference beyond chance")
    text = "; ".join(said) + "."
    return verdict, text[0].upper() + text[1:]


def show(cell: dict) -> dict:
    return {"ε": f"{float(cell['epsilon']):g}", "mechanism": f"BandMF b={int(cell['bands'])}", "parts": cell["parts"]}


PARTS = Study(
    name="parts", title="BandMF's parts: independent beside equal",
    question="What does drawing each record's BandMF part on its own (valid for add-or-remove neighbours) cost "
             "against an equal split (valid for zero-out neighbours only)?",
    axes={"epsilon": (1.0, 8.0), "parts": ("independent", "equal"), "bands": (4,)},
    fields=fields, base=dict(strategy="lp-fft"),
    measures=(Measure(name="accuracy", label="test accuracy"), Measure(name="epsilon_spent", label="ε spent")),
    measure=measure, read=read, seed_paper="", show=show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(PARTS)
