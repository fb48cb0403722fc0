"""The claims: each seed paper's headline claims, the runs each needs and how it is measured.

A `Claim` names the paper it comes from, the sentence it tests and the experiment (`configs`: ordinary
`RunConfig`s with "auto" learning rates, one per seed); `measure` reads the finished runs (and cached
analyses) from the store; `judge` is one of `verdicts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config import RunConfig
from .verdicts import (fit_r2, judge_decelerator, judge_dip, judge_interior, judge_law, judge_law_breaks,
                       judge_pair, judge_public_first, judge_shift)

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


# --- the claims --------------------------------------------------------------------------
def _runs(**kw) -> Callable[[tuple[int, ...]], list[RunConfig]]:
    return lambda seeds: [RunConfig(**kw, seed=s) for s in seeds]


def _acc(groups: dict) -> dict:
    return {g: [s["test_accuracy"] for s in runs] for g, runs in groups.items()}


def _pair(store, groups) -> dict:
    return {"groups": _acc(groups)}


def _knn_dip(store, groups) -> dict:
    from ..analyses.service import analyze

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
    from ..analyses.service import analyze

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
    from ..analyses.service import analyze

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
