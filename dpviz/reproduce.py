"""The reproduction scorecard: every headline claim of the seed papers, measured on the default task.

Each `Claim` names its seed file, the sentence it tests and the experiment (`configs`: ordinary
`RunConfig`s with "auto" learning rates, one per seed); `measure` reads the finished runs (and cached
analyses) from the store, and `judge` — a pure function of that measurement, tested on planted
values — returns the verdict and a reading. `run` trains whatever is missing (finished runs answer
from the cache, so a stopped scorecard resumes) and returns one row per claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .config import RunConfig

AGREES, PARTLY, DOES_NOT = "agrees", "partly", "does not"
SEED_FILES = {"000": "000_c4e19def002afd7a.txt", "001": "001_6453452e78d6a51a.txt", "002": "002_0f4d90728d2cb6ec.txt",
              "003": "003_c62981ce2cee69bd.txt", "004": "004_207f8f735464075b.txt"}
"""The seed papers' files (shared/seeds/) each claim comes from."""
PAPERS = {"000": ("Ke et al. 2024", "Characterizing the Training Dynamics of Private Fine-tuning with "
                  "Langevin diffusion"),
          "001": ("Ke et al. 2024 (arXiv v1)", "On the Convergence of Differentially-Private Fine-tuning: "
                  "To Linearly Probe or to Fully Fine-tune?"),
          "002": ("Anonymous ViT study", "Why Does Private Fine-Tuning Resist Differential Privacy Noise? "
                  "A Representation Learning Perspective"),
          "003": ("Makni et al. 2025", "SPARTA: An Optimization Framework for Differentially Private "
                  "Sparse Fine-Tuning"),
          "004": ("Bu et al. 2024", "Pre-training Differentially Private Models with Limited Public Data")}
"""Each seed file's paper as (key used in the code, title), for display; full citations in docs/papers.md."""
VERDICTS = (AGREES, PARTLY, DOES_NOT)
PRIVATE_NOTE = "measured on statistics of private data: NOT covered by the DP guarantee"


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One claim of a seed paper and how dpviz tests it.

    Attributes:
        id: short key (``000-lpfft``).
        seed: the seed file it comes from.
        sentence: the claim in one sentence.
        preset: the experiment, in words.
        configs: seeds → the runs it needs (named by group).
        measure: (store, {group: [summaries]}) → measurement dict (``groups``: name → [values], and more).
        judge: measurement → (verdict, reading); pure.
        private: its measurement reads statistics of private data (kNN, separability, curvature), which
            the DP guarantee does not cover.
    """

    id: str
    seed: str
    sentence: str
    preset: str
    configs: Callable[[tuple[int, ...]], dict[str, list[RunConfig]]]
    measure: Callable
    judge: Callable[[dict], tuple[str, str]]
    private: bool = False


def mean_std(values) -> tuple[float, float]:
    v = np.asarray([x for x in values if x is not None], dtype=float)
    return (float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0) if len(v) else (float("nan"), 0.0)


def fmt(values) -> str:
    m, s = mean_std(values)
    return f"{m:.3f} ± {s:.3f}"


def compare(a, b) -> str:
    """AGREES when mean(a) − mean(b) exceeds one pooled std, DOES_NOT when it is below −(that), else PARTLY."""
    (ma, sa), (mb, sb) = mean_std(a), mean_std(b)
    noise = float(np.hypot(sa, sb)) / np.sqrt(2)
    d = ma - mb
    return AGREES if d > noise else DOES_NOT if d < -noise else PARTLY


def fit_r2(values, start: int = 0) -> float:
    """R² of the straight-line fit of log(values[start:]) against the layer index."""
    y = np.log(np.maximum(np.asarray(values[start:], dtype=float), 1e-12))
    if len(y) < 3:
        return float("nan")
    if np.ptp(y) == 0:
        return 0.0  # no decay at all: depth explains nothing
    x = np.arange(len(y))
    r = np.corrcoef(x, y)[0, 1]
    return float(r * r)


# --- planted-testable verdicts ---------------------------------------------------------
def judge_pair(m: dict) -> tuple[str, str]:
    """Claims of the form "A ≥ B": ``groups`` has exactly the two, A first."""
    (na, a), (nb, b) = list(m["groups"].items())[:2]
    v = compare(a, b)
    text = {AGREES: "higher than", PARTLY: "within one standard deviation of", DOES_NOT: "lower than"}[v]
    return v, f"{na} {fmt(a)} is {text} {nb} {fmt(b)}."


def judge_dip(m: dict) -> tuple[str, str]:
    """``dips``: group → [early drop of kNN accuracy below step 0, per seed] (positive = a dip)."""
    fft, lpfft = m["dips"]["fft"], m["dips"]["lp-fft"]
    f, l = mean_std(fft)[0], mean_std(lpfft)[0]
    tol = m.get("tolerance", 0.01)
    reading = f"early kNN drop below the pretrained features: FFT {f:+.3f}, LP-FFT {l:+.3f} (mean over seeds)."
    if f > tol and l < f - tol:
        return AGREES, reading
    if f > tol or l < f - tol:
        return PARTLY, reading + " Only one half of the claim shows."
    return DOES_NOT, reading + " FFT's features do not dip at this scale."


def best_p(curve: dict) -> float:
    """The LP share with the highest mean accuracy ({p: [accuracies]})."""
    return max(curve, key=lambda p: (mean_std(curve[p])[0], -p))


def judge_interior(m: dict) -> tuple[str, str]:
    """``curves``: ε → {p: [accuracies]}; interior optimum at each ε."""
    bests = {e: best_p(c) for e, c in m["curves"].items()}
    inner = {e: 0 < p < 1 for e, p in bests.items()}
    reading = "best LP share " + ", ".join(f"p = {p:g} at ε = {e}" for e, p in bests.items()) + "."
    return (AGREES if all(inner.values()) else PARTLY if any(inner.values()) else DOES_NOT), reading


def judge_shift(m: dict) -> tuple[str, str]:
    """The best LP share at the smallest ε is larger than at the largest."""
    eps = sorted(m["curves"], key=float)
    lo, hi = best_p(m["curves"][eps[0]]), best_p(m["curves"][eps[-1]])
    reading = f"best p = {lo:g} at ε = {eps[0]} vs {hi:g} at ε = {eps[-1]}."
    return (AGREES if lo > hi else PARTLY if lo == hi else DOES_NOT), reading


def judge_law(m: dict) -> tuple[str, str]:
    """``r2_from_1`` and ``r2_all``: per-seed R² of the geometric fit from layer 1 on and over all layers."""
    a, b = mean_std(m["r2_from_1"])[0], mean_std(m["r2_all"])[0]
    reading = f"R² of log D_l vs depth: {a:.2f} from layer 1 on, {b:.2f} over all layers (goal ≥ 0.9)."
    return (AGREES if a >= 0.9 and b >= 0.9 else PARTLY if max(a, b) >= 0.9 else DOES_NOT), reading


def judge_law_breaks(m: dict) -> tuple[str, str]:
    """The law's R² (from layer 1 on) with a constant rate at ε = 1 is below 0.9 and below the tuned runs'."""
    c, t = mean_std(m["r2_constant"])[0], mean_std(m["r2_tuned"])[0]
    reading = f"R² from layer 1 on at ε = 1: constant rate {c:.2f}, auto rate {t:.2f}."
    if c < 0.9 and c < t:
        return AGREES, reading
    return (PARTLY if c < 0.9 else DOES_NOT), reading + (" Both fit poorly." if t < 0.9 else "")


def judge_decelerator(m: dict) -> tuple[str, str]:
    """``dominant``: the dominant term of D at the early checkpoints (all seeds)."""
    d = m["dominant"]
    share = sum(x == "decelerator" for x in d) / max(len(d), 1)
    reading = f"the decelerator dominates D at {share:.0%} of the early checkpoints ({len(d)} in all)."
    return (AGREES if share > 0.5 else PARTLY if share > 0 else DOES_NOT), reading


def judge_public_first(m: dict) -> tuple[str, str]:
    """``gains``: ε → (continual accuracies, pure DP-FFT accuracies); helps at small ε."""
    vs = {e: compare(c, f) for e, (c, f) in m["gains"].items()}
    reading = "; ".join(f"ε = {e}: continual {fmt(c)} vs DP-FFT {fmt(f)}" for e, (c, f) in m["gains"].items()) + "."
    if all(v == AGREES for v in vs.values()):
        return AGREES, reading
    return (PARTLY if any(v == AGREES for v in vs.values()) else DOES_NOT), reading


# --- the claims --------------------------------------------------------------------------
def _runs(**kw) -> Callable[[tuple[int, ...]], list[RunConfig]]:
    return lambda seeds: [RunConfig(**kw, seed=s) for s in seeds]


def _acc(groups: dict) -> dict:
    return {g: [s["test_accuracy"] for s in runs] for g, runs in groups.items()}


def _pair(store, groups) -> dict:
    return {"groups": _acc(groups)}


def _knn_dip(store, groups) -> dict:
    from .analyses.service import analyze

    dips, series = {}, {}
    for g, runs in groups.items():
        dips[g] = []
        for s in runs:
            steps = store.feature_steps(s["run_id"])
            knn = {st: analyze(store, s["run_id"], "knn", step=st)["accuracy"] for st in steps}
            early = [v for st, v in knn.items() if 0 < st <= steps[-1] / 2]
            dips[g].append(knn[steps[0]] - min(early) if early else 0.0)
            series.setdefault(g, []).append(knn)
    return {"dips": dips, "series": series}


def _curves(store, groups) -> dict:
    curves: dict = {}
    for g, runs in groups.items():  # group "ε=1 p=0.2"
        eps, p = g.split(" ")
        curves.setdefault(eps[2:], {})[float(p[2:])] = [s["test_accuracy"] for s in runs]
    return {"curves": curves}


def _law(store, groups) -> dict:
    from .analyses.service import analyze

    out = {}
    for g, runs in groups.items():
        fz = [analyze(store, s["run_id"], "separability")["fuzziness"] for s in runs]
        out[g] = {"r2_from_1": [fit_r2(f, 1) for f in fz], "r2_all": [fit_r2(f) for f in fz], "fuzziness": fz}
    return out


def _law_tuned(store, groups) -> dict:
    m = _law(store, groups)["tuned"]
    return {**m, "groups": {"R² from layer 1": m["r2_from_1"], "R² all layers": m["r2_all"]}}


def _law_constant(store, groups) -> dict:
    m = _law(store, groups)
    return {"r2_constant": m["constant"]["r2_from_1"], "r2_tuned": m["tuned"]["r2_from_1"],
            "groups": {"constant rate": m["constant"]["r2_from_1"], "auto rate": m["tuned"]["r2_from_1"]}}


def _decelerator(store, groups) -> dict:
    from .analyses.service import analyze

    dominant = []
    for s in groups["fft"]:
        steps = store.feature_steps(s["run_id"])
        dominant += [analyze(store, s["run_id"], "hessian", step=st)["dominant"] for st in steps
                     if 0 < st <= steps[-1] / 2]
    return {"dominant": dominant}


def _public(store, groups) -> dict:
    acc = _acc(groups)
    eps = sorted({g.split(" ")[1] for g in acc}, key=lambda e: float(e[2:]))  # "ε=1", "ε=2"
    return {"gains": {e[2:]: (acc[f"continual {e}"], acc[f"fft {e}"]) for e in eps}, "groups": acc}


FRACTIONS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
_BUDGET = {f"ε={e:g} p={p:g}": _runs(strategy="lp-fft", epsilon=e, lp_fraction=p) for e in (1.0, 8.0)
           for p in FRACTIONS}
_VIT = dict(backbone="vit", strategy="fft")
CLAIMS: tuple[Claim, ...] = (
    Claim(id="000-lpfft", seed="000", sentence="At small ε, DP-LP-FFT is at least as accurate as DP-FFT.",
          preset="CNN, ε = 1, LP-FFT (p = 0.3) vs FFT", measure=_pair, judge=judge_pair,
          configs=lambda s: {"DP-LP-FFT": _runs(strategy="lp-fft", epsilon=1.0)(s),
                             "DP-FFT": _runs(strategy="fft", epsilon=1.0)(s)}),
    Claim(id="000-dip", private=True, seed="000", sentence="DP-FFT's feature quality (kNN) dips early; DP-LP-FFT's does not.",
          preset="CNN, ε = 8, kNN of the backbone features every 6 steps", measure=_knn_dip, judge=judge_dip,
          configs=lambda s: {g: _runs(strategy=g, epsilon=8.0, checkpoint_every=6)(s) for g in ("fft", "lp-fft")}),
    Claim(id="001-interior", seed="001", sentence="The budget-split utility curve has an interior optimum.",
          preset="CNN, LP-FFT at p ∈ {0, 0.2, …, 1}, ε ∈ {1, 8}", measure=_curves, judge=judge_interior,
          configs=lambda s: {g: f(s) for g, f in _BUDGET.items()}),
    Claim(id="001-shift", seed="001", sentence="The best LP share grows as ε shrinks.",
          preset="the same sweep", measure=_curves, judge=judge_shift,
          configs=lambda s: {g: f(s) for g, f in _BUDGET.items()}),
    Claim(id="002-law", private=True, seed="002", sentence="Under DP with tuned hyperparameters, log D_l is linear in depth "
          "(R² ≥ 0.9 from layer 1 on and over all layers).", preset="built-in ViT, DP-FFT, ε = 8, auto rates",
          measure=_law_tuned, judge=judge_law, configs=lambda s: {"tuned": _runs(**_VIT, epsilon=8.0)(s)}),
    Claim(id="002-constant", private=True, seed="002", sentence="With a constant learning rate at ε = 1 the law breaks.",
          preset="built-in ViT, DP-FFT, ε = 1, lr 0.05 vs auto", measure=_law_constant, judge=judge_law_breaks,
          configs=lambda s: {"constant": _runs(**_VIT, epsilon=1.0, lr_ft=0.05)(s),
                             "tuned": _runs(**_VIT, epsilon=1.0)(s)}),
    Claim(id="003-sparse", seed="003", sentence="At ε = 1, sparse fine-tuning (SPARTA) is at least as accurate "
          "as DP-FFT.", preset="CNN, ε = 1, SPARTA s = 0.2 vs FFT", measure=_pair, judge=judge_pair,
          configs=lambda s: {"SPARTA": _runs(strategy="sparse", epsilon=1.0)(s),
                             "DP-FFT": _runs(strategy="fft", epsilon=1.0)(s)}),
    Claim(id="003-selection", seed="003", sentence="SPARTA's private row selection beats random rows at the same "
          "sparsity.", preset="CNN, ε = 1, s = 0.2", measure=_pair, judge=judge_pair,
          configs=lambda s: {"SPARTA rows": _runs(strategy="sparse", epsilon=1.0)(s),
                             "random rows": _runs(strategy="sparse", selection="random", epsilon=1.0)(s)}),
    Claim(id="004-decelerator", private=True, seed="004", sentence="Early in training at small ε, the decelerator is the "
          "largest term of the improvement's denominator.", preset="CNN, DP-FFT, ε = 1, curvature every 12 steps",
          measure=_decelerator, judge=judge_decelerator,
          configs=lambda s: {"fft": _runs(strategy="fft", epsilon=1.0, checkpoint_every=12)(s)}),
    Claim(id="004-public", seed="004", sentence="A public phase first (continual) helps at small ε.",
          preset="CNN, continual (automatic switch) vs DP-FFT at ε ∈ {1, 2}", measure=_public,
          judge=judge_public_first,
          configs=lambda s: {f"{k} ε={e:g}": _runs(strategy=k, epsilon=e)(s) for k in ("continual", "fft")
                             for e in (1.0, 2.0)}),
)
REGISTRY = {c.id: c for c in CLAIMS}


def plan(claims, seeds) -> dict[str, dict[str, list[RunConfig]]]:
    """claim id → group → its runs' configs."""
    return {c.id: c.configs(tuple(seeds)) for c in claims}


def row(claim: Claim, store, groups: dict[str, list[dict]]) -> dict:
    """The scorecard row of ``claim`` from its runs' summaries (JSON-ready)."""
    m = claim.measure(store, groups)
    verdict, reading = claim.judge(m)
    stats = {g: dict(zip(("mean", "std"), mean_std(v))) for g, v in m.get("groups", {}).items()}
    if "curves" in m:
        stats = {f"ε={e} p={p:g}": dict(zip(("mean", "std"), mean_std(v))) for e, c in m["curves"].items()
                 for p, v in sorted(c.items())}
    if "dips" in m:
        stats = {f"{g} kNN dip": dict(zip(("mean", "std"), mean_std(v))) for g, v in m["dips"].items()}
    if "dominant" in m:
        stats = {"decelerator dominant (share)": {"mean": float(np.mean([d == "decelerator" for d in m["dominant"]]
                                                                          or [0.0])), "std": 0.0}}
    return {"id": claim.id, "seed": claim.seed, "seed_file": SEED_FILES[claim.seed], "claim": claim.sentence, "preset": claim.preset, "verdict": verdict,
            "reading": reading, "measured": stats, "private_statistics": claim.private,
            **({"note": PRIVATE_NOTE} if claim.private else {}), "seeds": len(next(iter(groups.values()), [])),
            "run_ids": {g: [s["run_id"] for s in runs] for g, runs in groups.items()}}


def run(claims=None, *, seeds=(0, 1, 2), cache_dir=None, progress: Callable | None = None, cancel=None) -> list[dict]:
    """Train what the chosen claims need (finished runs answer from the cache) and return their rows.

    Args:
        claims: claim ids (default: all of `CLAIMS`).
        seeds: the seeds of every experiment (≥ 3 for a mean ± std).
        cache_dir: the store.
        progress: called with (runs done, runs in all, the claim id being run).
        cancel: a `threading.Event`; set, the scorecard stops after the current run (rows so far).
    """
    from .runner import run as run_one
    from .store import Store

    chosen = [REGISTRY[c] for c in (claims or REGISTRY)]
    store = Store(cache_dir)
    todo = plan(chosen, seeds)
    total = sum(len(v) for g in todo.values() for v in g.values())
    done, rows, memo = 0, [], {}
    for claim in chosen:
        groups = {}
        for g, cfgs in todo[claim.id].items():
            groups[g] = []
            for cfg in cfgs:
                if cancel is not None and cancel.is_set():
                    return rows
                key = cfg.to_json()
                memo[key] = memo.get(key) or run_one(cfg, store=store)
                groups[g].append(memo[key])
                done += 1
                if progress:
                    progress(done, total, claim.id)
        rows.append(row(claim, store, groups))
    return rows


def stored_rows(claims=None, *, seeds=(0, 1, 2), cache_dir=None) -> list[dict]:
    """The rows whose runs are all finished in the store, training nothing (for pages)."""
    from .store import Store

    store = Store(cache_dir)
    out = []
    for claim in [REGISTRY[c] for c in (claims or REGISTRY)]:
        groups = {}
        for g, cfgs in claim.configs(tuple(seeds)).items():
            hits = [_finished(store, cfg) for cfg in cfgs]
            if any(h is None for h in hits):
                break
            groups[g] = hits
        else:
            try:
                out.append(row(claim, store, groups))
            except Exception:  # an analysis not computable yet (e.g. a checkpoint being written)
                continue
    return out


def _finished(store, cfg: RunConfig) -> dict | None:
    from .runner import lookup

    hit = lookup(cfg, store)[2]
    return {**hit["summary"], "run_id": hit["run_id"]} if hit else None
