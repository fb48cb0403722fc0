"""``public-first``: continual training (non-private steps on public data, then DP-SGD on the private data) beside
pure DP-FFT at the same ε (Bu et al. 2024, seed 004). The continual run's ε counts only its private phase, which
has as many steps as the DP-FFT run, so the two spend the same budget. The public phase stops automatically once
the decelerator measured on public data has fallen to half its peak.
"""

from __future__ import annotations

from dpviz.studies.base import Measure, Study


def fields(cell: dict) -> dict:
    return {"epsilon": float(cell["epsilon"]), "strategy": cell["strategy"]}


def measure(store, summary: dict, cfg) -> dict:
    public = (summary.get("public_phase") or {}).get("step")
    return {"accuracy": summary["test_accuracy"], "epsilon_spent": summary["epsilon_spent"],
            "public_steps": None if public is None else float(public)}


def read(res) -> tuple[str, str]:
    """Per ε, continual against pure DP-FFT: the gap in test accuracy against the seeds' spread (the larger sd).

    Verdict: "public first helps" (continual ahead beyond the spread at some ε, behind at none), "public first
    hurts" (the reverse), "mixed", or "within the spread"."""
    by_eps: dict = {}
    for e in res.cells.values():
        c = e["cell"]
        if (st := res.stats(c, "accuracy")) is not None:
            by_eps.setdefault(float(c["epsilon"]), {})[c["strategy"]] = st
    said, ways = [], set()
    for eps, got in sorted(by_eps.items()):
        if {"continual", "fft"} - set(got):
            continue
        (mc, sc, _), (mf, sf, _) = got["continual"], got["fft"]
        gap = mc - mf
        beyond = round(abs(gap), 9) > max(sc, sf)
        said.append(f"at ε = {eps:g} public-then-private reaches {mc:.3f} ± {sc:.3f} against pure DP-FFT's "
                    f"{mf:.3f} ± {sf:.3f} ({100 * gap:+.1f} points, {'beyond' if beyond else 'within'} the spread)")
        if beyond:
            ways.add("helps" if gap > 0 else "hurts")
    if not said:
        return "not read", "No ε has both the continual run and its pure DP-FFT twin read yet."
    verdict = ("public first helps" if ways == {"helps"} else "public first hurts" if ways == {"hurts"} else
               "mixed" if ways else "within the spread")
    text = "; ".join(said) + "."
    return verdict, text[0].upper() + text[1:]


def show(cell: dict) -> dict:
    return {"ε": f"{float(cell['epsilon']):g}",
            "training": "public, then private" if cell["strategy"] == "continual" else "pure DP-FFT"}


PUBLIC_FIRST = Study(
    name="public-first", title="Public, then private, beside pure DP-FFT",
    question="Does a non-private phase on public data before DP-SGD on the private data buy accuracy at the same ε?",
    axes={"epsilon": (1.0, 8.0), "strategy": ("continual", "fft")},
    fields=fields, base=dict(keep_weights="none"),
    measures=(Measure(name="accuracy", label="test accuracy"), Measure(name="epsilon_spent", label="ε spent"),
              Measure(name="public_steps", label="public steps before the switch", fmt=".0f")),
    measure=measure, read=read, seed_paper="004", show=show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(PUBLIC_FIRST)
