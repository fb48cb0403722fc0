"""The two paper presets of `dpviz.experiments` as studies, on any image task, with the presets' ViT:

* ``distortion`` (Ke et al. 2024, seed 000): DP-LP, DP-FFT and DP-LP-FFT at ε ∈ {1, 8}, a feature checkpoint
  every 6 steps; read: test accuracy and the kNN accuracy of the features along the run (at step 0, its
  lowest and where, at the end, the early dip), statistics of private data ε does not cover.
* ``law`` (the anonymous ViT study, seed 002): the last k = 1 … 4 blocks tuned at ε ∈ {1, 8} with δ = 1/n,
  at the rate tuned per ε or one constant rate; read: the separation law's fit of log D_l against depth
  (ρ, R², private statistics) and test accuracy.

Both keep the presets' backbone, dpviz's ViT, on every task: its blocks are what ``law`` counts, and
`TUNED_LR` are its rates. They train on the task's own data (on ``default``, the presets' digits: the same
runs, so the store answers runs the Experiments page trained); a task whose data the ViT cannot read (text)
is refused, naming the field. The presets' settings are repeated here, not imported: a plugin may register a
study while `dpviz.config` is importing, so no study module imports it (nor `dpviz.experiments`, which does);
a test checks that these studies plan exactly the presets' runs and read the same constants.
"""

from __future__ import annotations

from dpviz.studies.base import Measure, Study

COMMON = dict(backbone="vit", epochs=20, eval_every=6)
"""`dpviz.experiments.BASE` but its dataset (the task gives the data)."""
TUNED_LR = {1.0: (0.3, 0.01), 8.0: (1.0, 0.1)}
"""`dpviz.experiments.TUNED_LR`: the ViT's (lr_lp, lr_ft) per ε."""
CONSTANT_LR = 0.05
"""`dpviz.experiments.CONSTANT_LR`: the law preset's one rate for every ε and k."""
LP_FRACTION = 0.3
"""DP-LP-FFT's LP share in the ``distortion`` preset."""
NAMES = {"lp": "DP-LP", "fft": "DP-FFT", "lp-fft": "DP-LP-FFT"}
RATES = ("tuned", "constant")


def tuned(eps: float) -> tuple[float, float]:
    """The presets' (lr_lp, lr_ft) for ``eps``: `TUNED_LR` at the nearer of its ε (on the log scale)."""
    import math

    return TUNED_LR[min(TUNED_LR, key=lambda e: abs(math.log(e / eps)))]


def _eps(cell: dict) -> str:
    return f"{float(cell['epsilon']):g}"


def _stat(st) -> str:
    m, s, n = st
    return f"{m:.3f} ± {s:.3f}" if n > 1 else f"{m:.3f}"


# --- distortion ---------------------------------------------------------------------------------------------
def distortion_fields(cell: dict) -> dict:
    """The strategy at ε with the rates it reads (an unread rate is refused by `RunConfig`)."""
    eps, s = float(cell["epsilon"]), cell["strategy"]
    lr_lp, lr_ft = tuned(eps)
    return {"strategy": s, "epsilon": eps, **({"lr_lp": lr_lp} if s != "fft" else {}),
            **({"lr_ft": lr_ft} if s != "lp" else {}), **({"lp_fraction": LP_FRACTION} if s == "lp-fft" else {})}


def distortion_measure(store, summary: dict, cfg) -> dict:
    """Test accuracy; the features' kNN accuracy at step 0, its lowest (and the step), at the end, and the
    early dip as the scorecard's 000-dip claim reads it: step 0's minus the lowest in the run's first half."""
    from dpviz.analyses import analyze

    rid = summary["run_id"]
    out = {"accuracy": summary["test_accuracy"], "knn0": None, "knn_min": None, "knn_min_step": None,
           "knn_final": None, "dip": None}
    steps = store.feature_steps(rid)
    if not steps:
        return out
    knn = [analyze(store, rid, "knn", step=t)["accuracy"] for t in steps]
    lo = min(range(len(knn)), key=knn.__getitem__)
    early = [k for t, k in zip(steps, knn) if 0 < t <= steps[-1] / 2]
    return {**out, "knn0": knn[0], "knn_min": knn[lo], "knn_min_step": steps[lo], "knn_final": knn[-1],
            "dip": knn[0] - min(early) if early else 0.0}


def distortion_read(res) -> tuple[str, str]:
    """Per ε, the early kNN dip of DP-FFT and of DP-LP-FFT judged as the scorecard judges claim 000-dip
    (`dpviz.reproduce.verdicts.judge_dip`: FFT drops more than 0.01 below step 0, LP-FFT at least 0.01 less).

    Verdict: "FFT dips, LP-FFT does not" (at every ε read), "no early dip" (FFT dips at none), or "partly"."""
    from dpviz.reproduce.verdicts import AGREES, DOES_NOT, judge_dip

    by_eps: dict = {}
    for e in res.cells.values():
        by_eps.setdefault(float(e["cell"]["epsilon"]), {})[e["cell"]["strategy"]] = e["cell"]
    said, verdicts = [], []
    for eps, cells in sorted(by_eps.items()):
        dips = {s: res.values(cells[s], "dip") for s in ("fft", "lp-fft") if s in cells}
        if len(dips) < 2 or not all(dips.values()):
            continue
        v, _ = judge_dip({"dips": dips})
        verdicts.append(v)
        said.append(f"at ε = {eps:g} " + "; ".join(_curve(res, s, cells[s]) for s in ("fft", "lp-fft"))
                    + {AGREES: ": DP-FFT dips, DP-LP-FFT does not", DOES_NOT: ": DP-FFT does not dip"}.get(
                        v, ": only one half of the claim shows") + _accuracies(res, cells))
    if not said:
        return "not read", "No ε has both DP-FFT's and DP-LP-FFT's kNN curves read yet."
    verdict = ("FFT dips, LP-FFT does not" if set(verdicts) == {AGREES} else
               "no early dip" if set(verdicts) == {DOES_NOT} else "partly")
    text = ("; ".join(said) + ". The early dip is step 0's kNN accuracy minus the lowest of the run's first half "
            "(negative: it rose); kNN accuracy is a statistic of the private data, not covered by ε.")
    return verdict, text[0].upper() + text[1:]


def _curve(res, strategy: str, cell: dict) -> str:
    """One run's kNN curve in words: from step 0 to its lowest (where) and its end, and the early dip."""
    st = {n: res.stats(cell, n) for n in ("knn0", "knn_min", "knn_min_step", "knn_final", "dip")}
    return (f"{NAMES[strategy]}'s kNN accuracy goes from {_stat(st['knn0'])} at step 0 to its lowest "
            f"{_stat(st['knn_min'])} (at step {st['knn_min_step'][0]:.0f}"
            + (" on average" if st["knn_min_step"][2] > 1 else "") + ") and ends at "
            f"{_stat(st['knn_final'])}, an early dip of {_stat(st['dip'])}")


def _accuracies(res, cells: dict) -> str:
    acc = [f"{NAMES[s]} {_stat(st)}" for s in NAMES if s in cells and (st := res.stats(cells[s], "accuracy"))]
    return f"; test accuracy {', '.join(acc)}" if acc else ""


def distortion_show(cell: dict) -> dict:
    return {"ε": _eps(cell), "strategy": NAMES.get(cell["strategy"], cell["strategy"])}


DISTORTION = Study(
    name="distortion", title="Early feature distortion (kNN)",
    question="Does DP-FFT distort the pretrained features early in training (the kNN accuracy of the features "
             "dipping below its start) where DP-LP-FFT, whose head is trained first, does not?",
    axes={"strategy": tuple(NAMES), "epsilon": (1.0, 8.0)},
    fields=distortion_fields, base=dict(**COMMON, checkpoint_every=6), choices={"strategy": tuple(NAMES)},
    measures=(Measure(name="accuracy", label="test accuracy"),
              Measure(name="knn0", label="kNN accuracy at step 0", private=True),
              Measure(name="knn_min", label="lowest kNN accuracy", private=True),
              Measure(name="knn_min_step", label="step of the lowest kNN", fmt=".0f", private=True),
              Measure(name="knn_final", label="final kNN accuracy", private=True),
              Measure(name="dip", label="early kNN dip", private=True)),
    measure=distortion_measure, read=distortion_read, seed_paper="000", show=distortion_show)


# --- law ----------------------------------------------------------------------------------------------------
def law_fields(cell: dict) -> dict:
    eps = float(cell["epsilon"])
    return {"tune_blocks": int(cell["tune_blocks"]), "epsilon": eps,
            "lr_ft": tuned(eps)[1] if cell["lr"] == "tuned" else CONSTANT_LR}


def law_config(cfg):
    """``cfg`` at δ = 1/n of its training set, as the preset sets it (a δ given with ``--set`` is kept)."""
    from dpviz.config import RunConfig
    from dpviz.training.calibration import task_shape

    if cfg.delta != RunConfig.__dataclass_fields__["delta"].default:
        return cfg
    return cfg.replace(delta=1 / task_shape(cfg)[0].n)


def law_execute(cell: dict, cfg, store, cancel) -> dict:
    """The cell's run at δ = 1/n (n is the task's: no field of a cell can say it)."""
    from dpviz.runner import run

    return run(law_config(cfg), store=store, cancel=cancel, resume=True, rates="grid")


def law_measure(store, summary: dict, cfg) -> dict:
    """Test accuracy; the fit of log D_l against depth at the last checkpoint as the scorecard reads the law:
    ρ and R² from layer 1 on, and R² over all layers."""
    import math

    from dpviz.analyses import analyze
    from dpviz.reproduce.verdicts import fit_r2, fit_rho

    rid = summary["run_id"]
    out = {"accuracy": summary["test_accuracy"], "rho": None, "r2": None, "r2_all": None}
    steps = store.feature_steps(rid)
    if not steps:
        return out
    fz = analyze(store, rid, "separability", step=steps[-1])["fuzziness"]
    fit = {"rho": fit_rho(fz, 1), "r2": fit_r2(fz, 1), "r2_all": fit_r2(fz)}
    return {**out, **{k: (v if math.isfinite(v) else None) for k, v in fit.items()}}  # too few layers: no fit


def _law_groups(res) -> dict:
    """(ε, rate) → {measure: [every value over its k and seeds]}, and "k" → the k read."""
    out: dict = {}
    for e in res.cells.values():
        c = e["cell"]
        g = out.setdefault((float(c["epsilon"]), c["lr"]), {"r2": [], "r2_all": [], "rho": [], "accuracy": [],
                                                            "k": []})
        if res.values(c, "r2"):
            for n in ("r2", "r2_all", "rho", "accuracy"):
                g[n] += res.values(c, n)
            g["k"].append(int(c["tune_blocks"]))
    return {k: g for k, g in out.items() if g["r2"]}


def law_read(res) -> tuple[str, str]:
    """With the tuned rate, whether the law holds at each ε (`judge_law`: R² ≥ 0.9 from layer 1 on and over all
    layers, ρ < 1); at the smallest ε with both rates, whether the constant rate breaks it where the tuned one
    keeps it (`judge_law_breaks`). Values pooled over k and seeds.

    Verdict: "tuned rates keep the law, a constant rate breaks it", "the law holds at both rates", "the law
    does not hold" (not with the tuned rate at any ε), "partly", or "no tuned rate read"."""
    from statistics import mean

    from dpviz.reproduce.verdicts import AGREES, DOES_NOT, judge_law, judge_law_breaks

    groups = _law_groups(res)
    if not groups:
        return "not read", "No run's separation law is read yet."
    said, kept = [], []
    for (eps, rate), g in sorted(groups.items()):
        ks = sorted(set(g["k"]))
        said.append(f"at ε = {eps:g} with the {rate} rate (k = {', '.join(map(str, ks))}): R² of log D_l against "
                    f"depth {_stat(_pool(g['r2']))} from layer 1 on, {_stat(_pool(g['r2_all']))} over all layers, "
                    f"ρ {_stat(_pool(g['rho']))}; test accuracy {_stat(_pool(g['accuracy']))}")
        if rate == "tuned":
            kept.append(judge_law({"r2_from_1": g["r2"], "r2_all": g["r2_all"], "rho_from_1": g["rho"]})[0])
    both = sorted(e for e, r in groups if r == "constant" and (e, "tuned") in groups)
    breaks = None
    if both:
        t, c = groups[(both[0], "tuned")], groups[(both[0], "constant")]
        breaks = judge_law_breaks({"r2_constant": c["r2"], "r2_tuned": t["r2"], "rho_constant": c["rho"],
                                   "rho_tuned": t["rho"]})[0]
        said.append(f"at ε = {both[0]:g} the constant rate's R² from layer 1 on is {mean(c['r2']):.2f} against the "
                    f"tuned rate's {mean(t['r2']):.2f}: " + {AGREES: "the constant rate breaks the law",
                                                              DOES_NOT: "the constant rate keeps the law"}.get(
                        breaks, "both fit it poorly"))
    verdict = ("no tuned rate read" if not kept else "the law does not hold" if set(kept) == {DOES_NOT} else
               "partly" if set(kept) != {AGREES} else
               "tuned rates keep the law, a constant rate breaks it" if breaks == AGREES else
               "the law holds at both rates" if breaks == DOES_NOT else "partly")
    text = "; ".join(said) + " (D_l: a statistic of the private data, not covered by ε)."
    return verdict, text[0].upper() + text[1:]


def _pool(values: list) -> tuple[float, float, int]:
    from statistics import mean, stdev

    return mean(values), (stdev(values) if len(values) > 1 else 0.0), len(values)


def law_show(cell: dict) -> dict:
    return {"ε": _eps(cell), "blocks tuned k": str(int(cell["tune_blocks"])),
            "learning rate": f"{cell['lr']} ({law_fields(cell)['lr_ft']:g})"}


LAW = Study(
    name="law", title="The separation law across tuned blocks",
    question="Does the per-layer fuzziness D_l decay geometrically with depth (the separation law) whichever "
             "blocks are tuned, with a learning rate tuned per ε, and does one constant rate break it at ε = 1?",
    axes={"tune_blocks": (1, 2, 3, 4), "epsilon": (1.0, 8.0), "lr": RATES},
    fields=law_fields, base=dict(**COMMON, strategy="partial", checkpoint_every=12), choices={"lr": RATES},
    execute=law_execute,
    measures=(Measure(name="r2", label="R² of log D_l vs depth, from layer 1", fmt=".2f", private=True),
              Measure(name="rho", label="ρ (D_l decay per layer)", private=True),
              Measure(name="r2_all", label="R² over all layers", fmt=".2f", private=True),
              Measure(name="accuracy", label="test accuracy")),
    measure=law_measure, read=law_read, seed_paper="002", show=law_show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(DISTORTION)
register_study(LAW)
