"""The claims: each seed paper's headline claims, the runs each needs and how it is measured.

A `Claim` names the paper it comes from, the sentence it tests and the experiment, declared once for
every task (`configs(task, seeds)`: ordinary `RunConfig`s of the task at its scorecard scale `SCALE`, with
"auto" learning rates, one per seed); `measure` reads the finished runs (and cached analyses) from the
store; `judge` is one of `verdicts`. A claim that cannot be read on a task says why (`Claim.why_not`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from dpviz import catalog
from dpviz import tasks as _tasks
from dpviz.config import RunConfig
from dpviz.reproduce.verdicts import (fit_r2, fit_rho, judge_decelerator, judge_dip, judge_interior, judge_law, judge_law_breaks,
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
        preset: the experiment, in words; ``{model}`` stands for the task's model and data (`MODELS`).
        configs: (task, seeds) → the runs it needs (named by group).
        measure: (store, {group: [summaries]}) → measurement dict (``groups``: name → [values], and more).
        judge: measurement → (verdict, reading); pure.
        private: its measurement reads statistics of private data (kNN, separability, curvature), which
            the DP guarantee does not cover.
        needs_public: its experiment has a public phase, so a task needs public data of its own modality.
        scales: the sizes (`SCALES`) it is read at: the scale-sensitive claims all three, the rest small.
    """

    id: str
    seed: str
    sentence: str
    preset: str
    configs: Callable[[str, tuple[int, ...]], dict[str, list[RunConfig]]]
    measure: Callable
    judge: Callable[[dict], tuple[str, str]]
    private: bool = False
    needs_public: bool = False
    scales: tuple[str, ...] = ("small",)

    def experiment(self, task: str, scale: str = "small") -> str:
        """The experiment on ``task`` at ``scale``, in words."""
        model = MODELS.get(task, task)
        fractions, epsilons = SWEEPS.get(task, SWEEPS["default"])
        sweep = (f"p ∈ {{{fractions[0]:g}, {fractions[1]:g}, …, {fractions[-1]:g}}}, "
                 f"ε ∈ {{{', '.join(f'{e:g}' for e in epsilons)}}}")
        size = SCALES.get(scale, {}).get(task) if scale != "small" else None
        text = self.preset.format(model=model, law="built-in ViT" if task == "default" else model, sweep=sweep,
                                  knn_every=6 * (size or {}).get("every", 1))
        if size:
            text += f"; {scale}: {size['train_size']:,} examples, ≈ {steps_of(size):,} DP steps"
        return text

    def why_not(self, task: str, scale: str = "small") -> str | None:
        """Why the claim cannot be read on ``task`` at ``scale`` (one sentence), or None when it can."""
        from dpviz import catalog

        t = _tasks.task(task)
        if scale != "small" and task not in SCALES.get(scale, {}):
            sizes = [s for s in SCALES if task in SCALES[s] or s == "small"]
            return f"task {task} has no size {scale} (its sizes: {', '.join(sizes)})"
        if scale not in self.scales:
            return f"read at {', '.join(self.scales)} only: it is not among the scale-sensitive claims"
        if self.needs_public:
            public = t.public and catalog.DATASETS.get(t.public)
            if not public or public.modality != t.modality:
                return (f"needs public {t.modality} data for its public phase, and task {task} has none "
                        f"(a public dataset of another modality cannot warm up this backbone)")
        return None


# --- the claims --------------------------------------------------------------------------
SCALE: dict[str, dict] = {
    "default": {},
    "real-text": dict(train_size=1000, max_length=32, batch_size=64, epochs=3),
    "real-vision": dict(train_size=1000, batch_size=64, epochs=3),
}
"""Per task, what every scorecard run sets beyond the task's own fields: the real tasks' scorecards train
3 epochs (sparse's schedule needs 3, and every claim compares at equal epochs) on 1,000 examples (32
tokens for text) with B = 64 — the presets' sampling rate q = B/n = 0.064 — so that 3 seeds of every
claim finish in under 90 minutes on a 2-core CPU (README, "The claims on real models")."""
SCALES: dict[str, dict[str, dict]] = {
    "small": SCALE,
    "medium": {"real-vision": dict(train_size=11000, batch_size=64, epochs=3, every=4)},
    "large": {"real-vision": dict(train_size=43000, batch_size=64, epochs=3, every=8)},
}
"""The scorecard's sizes: per size, per task that has it, what every run sets beyond the task's own fields.
``small`` is `SCALE`. The larger sizes keep its 3 epochs at B = 64 and grow the training set, so the
number of DP steps grows with it: on real-vision ≈ 48 (1,000 images), ≈ 516 (11,000) and ≈ 2,016
(43,000 of Fashion-MNIST's 60,000). ``every`` multiplies the checkpoint and test intervals of the runs
whose features a claim reads (kNN every 6 steps at small: every 24 at medium, 48 at large, so 21 to 42
readings a run instead of 8; a test pass every 40 and 80 steps instead of 10). Only the claims that name a size in `Claim.scales` are read at it: the
budget sweep's 132 runs a size stay at small."""
SCALE_NAMES = tuple(SCALES)
SCALED = ("small", "medium", "large")  # a scale-sensitive claim's sizes (`Claim.scales`)


def steps_of(fields: dict) -> int:
    """DP steps of a run of ``fields`` (train_size, batch_size, epochs): the expected batch is B, so
    ⌈n / B⌉ a pass."""
    return -(-fields["train_size"] // fields["batch_size"]) * fields["epochs"]


def size_fields(task: str, scale: str = "small") -> dict:
    """What every run of ``scale`` on ``task`` sets (its `SCALES` fields, ``every`` left out)."""
    return {k: v for k, v in SCALES[scale].get(task, {}).items() if k != "every"}


def at_scale(cfg: RunConfig, task: str, scale: str) -> RunConfig:
    """``cfg`` (a claim's run at small) at ``scale``: the size's data and epochs, and checkpoint and test
    intervals ``every`` times small's where the run has them (and no weights kept)."""
    if scale == "small":
        return cfg
    every = SCALES[scale][task].get("every", 1)
    extra = {"checkpoint_every": cfg.checkpoint_every * every} if cfg.checkpoint_every > 0 else {}
    if cfg.eval_every < ONLY_PHASE_ENDS:  # the test pass too: 1,000 images every 10 steps would cost a third
        extra["eval_every"] = cfg.eval_every * every
    if cfg.keep_weights == "checkpoints":  # only the curvature claim reads weights, and it is read at small
        extra["keep_weights"] = "none"
    return cfg.replace(**size_fields(task, scale), **extra)
MODELS = {"default": "CNN", "real-text": "MiniLM on tweets", "real-vision": "EfficientNet-Lite0 on Fashion-MNIST"}
"""How an experiment names each task's model and data."""


def scorecard_config(task: str, **fields) -> RunConfig:
    """The `RunConfig` of one scorecard run on ``task``: the task's fields, its `SCALE`, then ``fields``."""
    return _tasks.config(task, **{**SCALE.get(task, {}), **fields})


ONLY_PHASE_ENDS = 10**6  # eval_every beyond any schedule: tested at phase ends only, as a proxy trial is
KEEP = {"accuracy": dict(checkpoint_every=-1, keep_weights="none", eval_every=ONLY_PHASE_ENDS),
        "features": dict(keep_weights="none"), "weights": {}}
"""What a real task's scorecard run stores, by what its claim reads: a real backbone's trained weights are
43 MB a checkpoint (MiniLM), so a run whose claim reads its accuracy keeps metrics and the start and end
features and is tested at its phase ends only (each test pass through MiniLM costs ~1.4 s, 5.5 s of a
45 s DP-FFT run; its training metrics are still recorded every step), one that reads features (kNN,
separability) keeps every feature checkpoint, and only the curvature claim keeps weights. The default
task's runs keep everything, as they always did (their hashes do not change)."""


def _runs(on: dict | None = None, reads: str = "accuracy", **kw) -> Callable[[str, tuple[int, ...]], list[RunConfig]]:
    """The runs of one group, one per seed; ``on``: task → fields that differ on that task only; ``reads``:
    what the claim reads of them (`KEEP`)."""
    def runs(task, seeds):
        keep = KEEP[reads] if task != "default" else {}
        return [scorecard_config(task, **{**keep, **kw, **(on or {}).get(task, {})}, seed=s) for s in seeds]
    return runs


def _acc(groups: dict) -> dict:
    return {g: [s["test_accuracy"] for s in runs] for g, runs in groups.items()}


def _pair(store, groups) -> dict:
    return {"groups": _acc(groups)}


def _knn_dip(store, groups) -> dict:
    from dpviz.analyses.service import analyze

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
    from dpviz.analyses.service import analyze

    out = {}
    for g, runs in groups.items():
        fz = [analyze(store, s["run_id"], "separability")["fuzziness"] for s in runs]
        out[g] = {"r2_from_1": [fit_r2(f, 1) for f in fz], "r2_all": [fit_r2(f) for f in fz],
                  "rho_from_1": [fit_rho(f, 1) for f in fz], "fuzziness": fz}
    return out


def _law_tuned(store, groups) -> dict:
    m = _law(store, groups)["tuned"]
    return {**m, "groups": {"R² from layer 1": m["r2_from_1"], "R² all layers": m["r2_all"]},
            "depth": {"auto rate": m["fuzziness"]}}


def _law_constant(store, groups) -> dict:
    m = _law(store, groups)
    return {"r2_constant": m["constant"]["r2_from_1"], "r2_tuned": m["tuned"]["r2_from_1"],
            "rho_constant": m["constant"]["rho_from_1"], "rho_tuned": m["tuned"]["rho_from_1"],
            "groups": {"constant rate": m["constant"]["r2_from_1"], "auto rate": m["tuned"]["r2_from_1"]},
            "depth": {"constant rate": m["constant"]["fuzziness"], "auto rate": m["tuned"]["fuzziness"]}}


def _decelerator(store, groups) -> dict:
    from dpviz.analyses.service import analyze

    dominant = []
    for s in groups["fft"]:
        steps = store.feature_steps(s["run_id"])
        params = REAL_HESSIAN if catalog.backbone(s["backbone"]).source == "package" else {}
        dominant += [analyze(store, s["run_id"], "hessian", step=st, **params)["dominant"] for st in steps
                     if 0 < st <= steps[-1] / 2]
    return {"dominant": dominant}


def _public(store, groups) -> dict:
    acc = _acc(groups)
    eps = sorted({g.split(" ")[1] for g in acc}, key=lambda e: float(e[2:]))  # "ε=1", "ε=2"
    return {"gains": {e[2:]: (acc[f"continual {e}"], acc[f"fft {e}"]) for e in eps}, "groups": acc}


FRACTIONS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
SWEEPS = {"default": (FRACTIONS, (1.0, 8.0)),
          "real-text": (tuple(i / 10 for i in range(11)), (0.5, 1.0, 2.0, 8.0)),
          "real-vision": (tuple(i / 10 for i in range(11)), (0.5, 1.0, 2.0, 8.0))}
"""Per task, the budget split's LP shares and ε of seed 001's sweep (the real tasks: the issue's finer one)."""


def _budget(task: str, seeds) -> dict[str, list[RunConfig]]:
    fractions, epsilons = SWEEPS.get(task, SWEEPS["default"])
    return {f"ε={e:g} p={p:g}": _runs(strategy="lp-fft", epsilon=e, lp_fraction=p)(task, seeds)
            for e in epsilons for p in fractions}


def _public_first(task, seeds) -> dict:
    """Continual vs DP-FFT at ε ∈ {1, 2}; DP-FFT at ε = 1 is `_FFT1`'s runs."""
    return {**{f"continual ε={e:g}": _runs(strategy="continual", epsilon=e)(task, seeds) for e in (1.0, 2.0)},
            "fft ε=1": _FFT1(task, seeds), "fft ε=2": _runs(strategy="fft", epsilon=2.0)(task, seeds)}


REAL = ("real-text", "real-vision")
# DP-FFT at ε = 1 keeps its features: the same runs are 002-constant's tuned group, trained once. On a
# real task they also keep weights every 12 steps, so they are 004-decelerator's runs too (a DP-FFT run
# of MiniLM costs 50 s; the default task's runs keep their hashes)
_FFT1 = _runs(strategy="fft", epsilon=1.0, reads="features",
              on={t: dict(checkpoint_every=12, keep_weights="checkpoints") for t in REAL})
# the law: the toy task's ViT; a real task's own model, read at the end of runs other claims train
# anyway: 000-dip's DP-FFT at ε = 8 (features every 6 steps) and `_FFT1` at ε = 1
_LAW = dict(strategy="fft", on={"default": dict(backbone="vit")}, reads="features")
_LAW8 = _runs(**{**_LAW, "on": {**_LAW["on"], **{t: dict(checkpoint_every=6) for t in REAL}}}, epsilon=8.0)


def _law_tuned1(task, seeds) -> list[RunConfig]:
    return (_runs(**_LAW, epsilon=1.0) if task == "default" else _FFT1)(task, seeds)
REAL_HESSIAN = dict(max_probes=30)
"""The curvature claim's Hutchinson probes on a backbone from a package (MiniLM, EfficientNet-Lite0): 30
at most (the analysis's default is 100; a probe through MiniLM takes about half a second, and the
result's standard error says what 30 buy); dpviz's own backbones keep the default (and their stored
analyses)."""
CLAIMS: tuple[Claim, ...] = (
    Claim(id="000-lpfft", scales=SCALED, seed="000", sentence="At small ε, DP-LP-FFT is at least as accurate as DP-FFT.",
          preset="{model}, ε = 1, LP-FFT (p = 0.3) vs FFT", measure=_pair, judge=judge_pair,
          configs=lambda t, s: {"DP-LP-FFT": _runs(strategy="lp-fft", epsilon=1.0)(t, s),
                                "DP-FFT": _FFT1(t, s)}),
    Claim(id="000-dip", scales=SCALED, private=True, seed="000", sentence="DP-FFT's feature quality (kNN) dips early; DP-LP-FFT's "
          "does not.", preset="{model}, ε = 8, kNN of the backbone features every {knn_every} steps", measure=_knn_dip,
          judge=judge_dip,
          configs=lambda t, s: {g: _runs(strategy=g, epsilon=8.0, checkpoint_every=6, reads="features")(t, s)
                               for g in ("fft", "lp-fft")}),
    Claim(id="001-interior", seed="001", sentence="The budget-split utility curve has an interior optimum.",
          preset="{model}, LP-FFT at {sweep}", measure=_curves,
          judge=judge_interior, configs=_budget),
    Claim(id="001-shift", seed="001", sentence="The best LP share grows as ε shrinks.",
          preset="the same sweep", measure=_curves, judge=judge_shift, configs=_budget),
    Claim(id="002-law", scales=SCALED, private=True, seed="002", sentence="Under DP with tuned hyperparameters, log D_l is linear in "
          "depth (R² ≥ 0.9 from layer 1 on and over all layers).", preset="{law}, DP-FFT, ε = 8, auto rates",
          measure=_law_tuned, judge=judge_law, configs=lambda t, s: {"tuned": _LAW8(t, s)}),
    Claim(id="002-constant", scales=SCALED, private=True, seed="002", sentence="With a constant learning rate at ε = 1 the law breaks.",
          preset="{law}, DP-FFT, ε = 1, lr 0.05 vs auto", measure=_law_constant, judge=judge_law_breaks,
          configs=lambda t, s: {"constant": _runs(**_LAW, epsilon=1.0, lr_ft=0.05)(t, s),
                                "tuned": _law_tuned1(t, s)}),
    Claim(id="003-sparse", seed="003", sentence="At ε = 1, sparse fine-tuning (SPARTA) is at least as accurate "
          "as DP-FFT.", preset="{model}, ε = 1, SPARTA s = 0.2 vs FFT", measure=_pair, judge=judge_pair,
          configs=lambda t, s: {"SPARTA": _runs(strategy="sparse", epsilon=1.0)(t, s),
                                "DP-FFT": _FFT1(t, s)}),
    Claim(id="003-selection", seed="003", sentence="SPARTA's private row selection beats random rows at the same "
          "sparsity.", preset="{model}, ε = 1, s = 0.2", measure=_pair, judge=judge_pair,
          configs=lambda t, s: {"SPARTA rows": _runs(strategy="sparse", epsilon=1.0)(t, s),
                                "random rows": _runs(strategy="sparse", selection="random", epsilon=1.0)(t, s),
                                # seed 003's other fixed baseline, shown beside the verdict's pair
                                "magnitude rows": _runs(strategy="sparse", selection="magnitude", epsilon=1.0)(t, s)}),
    Claim(id="004-decelerator", private=True, seed="004", sentence="Early in training at small ε, the decelerator is "
          "the largest term of the improvement's denominator.", preset="{model}, DP-FFT, ε = 1, curvature every 12 "
          "steps", measure=_decelerator, judge=judge_decelerator,
          configs=lambda t, s: {"fft": _runs(strategy="fft", epsilon=1.0, checkpoint_every=12,
                                             reads="weights")(t, s) if t == "default" else _FFT1(t, s)}),
    Claim(id="004-public", seed="004", sentence="A public phase first (continual) helps at small ε.", needs_public=True,
          preset="{model}, continual (automatic switch) vs DP-FFT at ε ∈ {{1, 2}}", measure=_public,
          judge=judge_public_first,
          configs=_public_first),
)
REGISTRY = {c.id: c for c in CLAIMS}
