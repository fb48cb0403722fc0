"""``noise``: DP-SGD beside BandMF's correlated noise, per ε (seed 000's dynamics asked again of each mechanism).

DP-FFT by default (``--set strategy=lp-fft`` for another), every run at the shipped grid's rates for its
strategy and ε (the same for every mechanism: no search), a feature checkpoint every 6 steps. Read: test
accuracy, σ, the early dip of the features' kNN accuracy, and the separation law's decay ρ of the per-layer
fuzziness D_l with its fit's R² (statistics of private data, not covered by ε).
"""

from __future__ import annotations

from dpviz.studies.base import Measure, Study


def fields(cell: dict) -> dict:
    """ε, and the mechanism: b = 1 is DP-SGD, b > 1 the correlated family with b bands."""
    b = int(cell["bands"])
    return {"epsilon": float(cell["epsilon"]), **({"mechanism": cell["family"], "bands": b} if b > 1 else {})}


def mechanism(cell: dict) -> str:
    """The cell's mechanism in words: "DP-SGD", "BandMF b=4" (`dpviz.privacy.names`)."""
    from dpviz.privacy import names

    return names.mechanism(fields(cell))


def show(cell: dict) -> dict:
    return {"ε": f"{float(cell['epsilon']):g}", "mechanism": mechanism(cell)}


def measure(store, summary: dict, cfg) -> dict:
    """Accuracy, σ and ε spent of a finished run; where it stores features, the early kNN dip and ρ, R²."""
    from dpviz.analyses import analyze

    rid, phases = summary["run_id"], summary["phases"]
    out = {"accuracy": summary["test_accuracy"], "sigma": phases[0]["noise_multiplier"],
           "epsilon_spent": summary["epsilon_spent"], "dip": None, "rho": None, "r2": None}
    steps = store.feature_steps(rid)
    if cfg.checkpoint_every <= 0 or len(steps) < 2:  # DP-LP keeps no checkpoints: its features do not move
        return out
    knn = [analyze(store, rid, "knn", step=t)["accuracy"] for t in steps]
    # The dip lies in the first third of the phase that moves the features: the whole run under DP-FFT, the
    # FFT phase after DP-LP's steps under LP-FFT (LP leaves the features where they were).
    start = sum(p["steps"] for p in phases if p["name"] == "lp")
    end = start + (sum(p["steps"] for p in phases) - start) / 3
    early = [k for t, k in zip(steps, knn) if t <= end] or knn[:2]
    sep = analyze(store, rid, "separability", step=steps[-1])
    return {**out, "dip": knn[0] - min(early), "rho": sep["rho"], "r2": sep["r2"]}


def _by_epsilon(res) -> dict:
    """ε → [(mechanism, cell)] of the cells with numbers, DP-SGD once."""
    out: dict = {}
    for e in res.cells.values():
        c = e["cell"]
        if res.stats(c, "accuracy") is None:
            continue
        rows = out.setdefault(float(c["epsilon"]), [])
        if mechanism(c) not in [m for m, _ in rows]:
            rows.append((mechanism(c), c))
    return dict(sorted(out.items()))


def read(res) -> tuple[str, str]:
    """Per ε, the most accurate mechanism and by how much against the seeds' spread (the larger sd of the two);
    whether any mechanism shows an early kNN dip beyond its spread; whether ρ moves beyond the spread.

    Verdict: "BandMF ahead" (a correlated mechanism beyond the spread at some ε, DP-SGD at none), "DP-SGD ahead"
    (the reverse), "mixed", or "within the spread"."""
    said, ahead, dips, rhos = [], set(), [], []
    for eps, rows in _by_epsilon(res).items():
        acc = {m: res.stats(c, "accuracy") for m, c in rows}
        if "DP-SGD" not in acc or len(acc) < 2:
            continue
        best = max(acc, key=lambda m: acc[m][0])
        other = max((m for m in acc if m != "DP-SGD"), key=lambda m: acc[m][0]) if best == "DP-SGD" else "DP-SGD"
        (m1, s1, _), (m2, s2, _) = acc[best], acc[other]
        gap, beyond = m1 - m2, round(m1 - m2, 9) > max(s1, s2)
        against = (f"the best correlated mechanism ({other}: {m2:.3f} ± {s2:.3f})" if best == "DP-SGD" else
                   f"DP-SGD ({m2:.3f} ± {s2:.3f})")
        said.append(f"at ε = {eps:g} {best} is the most accurate ({m1:.3f} ± {s1:.3f}), {100 * gap:.1f} points above "
                    f"{against}, " + ("beyond the seeds' spread" if beyond else "within the seeds' spread"))
        if beyond:
            ahead.add("DP-SGD" if best == "DP-SGD" else "BandMF")
        for m, c in rows:
            d = res.stats(c, "dip")
            if d and d[0] >= 0.01 and d[0] > d[1]:
                dips.append(f"{m} at ε = {eps:g}")
        rho = [(m, v) for m, c in rows if (v := res.stats(c, "rho"))]
        if len(rho) > 1:
            (lo_m, lo), (hi_m, hi) = min(rho, key=lambda r: r[1][0]), max(rho, key=lambda r: r[1][0])
            if round(hi[0] - lo[0], 9) > max(v[1] for _, v in rho):
                rhos.append(f"at ε = {eps:g} from {lo[0]:.3f} ({lo_m}) to {hi[0]:.3f} ({hi_m})")
    if not said:
        return "not read", "No ε has both DP-SGD and a correlated mechanism read yet."
    text = "; ".join(said) + "."
    if any(res.stats(c, "dip") for rows in _by_epsilon(res).values() for _, c in rows):
        text += (" An early kNN dip beyond its spread under " + ", ".join(dips) + "." if dips else
                 " No mechanism shows an early kNN dip beyond the seeds' spread.")
        text += (" ρ (the D_l decay over depth) moves by more than the spread " + "; ".join(rhos) + "." if rhos else
                 " ρ (the D_l decay over depth) is the same under every mechanism within the spread.")
    verdict = ("mixed" if len(ahead) == 2 else "BandMF ahead" if ahead == {"BandMF"} else
               "DP-SGD ahead" if ahead == {"DP-SGD"} else "within the spread")
    return verdict, text[0].upper() + text[1:]


def figure(res):
    from dpviz.figures.studies import noise_figure

    return noise_figure({eps: {m: res.stats(c, "accuracy") for m, c in rows} for eps, rows in _by_epsilon(res).items()})


NOISE = Study(
    name="noise", title="DP-SGD beside BandMF",
    question="Does BandMF's correlated noise train a more accurate model than DP-SGD at the same ε, and does it "
             "change how the features move?",
    axes={"epsilon": (1.0, 8.0), "bands": (1, 2, 4), "family": ("bandmf",)},
    fields=fields, base=dict(strategy="fft", keep_weights="none", checkpoint_every=6),
    measures=(Measure(name="accuracy", label="test accuracy"), Measure(name="sigma", label="σ"),
              Measure(name="epsilon_spent", label="ε spent"),
              Measure(name="dip", label="early kNN dip", private=True),
              Measure(name="rho", label="ρ (D_l decay)", private=True),
              Measure(name="r2", label="R² of the fit", fmt=".2f", private=True)),
    measure=measure, read=read, figure=figure, seed_paper="000", show=show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(NOISE)
