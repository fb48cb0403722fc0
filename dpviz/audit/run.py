"""`audit(cfg, …)`: train a configuration once with canaries and report ε_lb beside the accountant's ε."""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from dpviz.config import RunConfig
from dpviz.errors import ConfigError
from dpviz.store import Store

THREATS = ("white-box", "black-box")
KINDS = ("mislabeled", "ood")  # black-box canary images
MAX_CANARIES = 20000


@dataclass(frozen=True, kw_only=True)
class AuditSpec:
    """What an audit adds to a run configuration (validated on construction).

    Attributes:
        canaries: m, the number of canaries (each included with probability ½).
        threat: "white-box" (gradient canaries, every release seen) or "black-box" (input canaries,
            only the final model's losses).
        kind: black-box canary images: "mislabeled" private-distribution images or "ood" patterns.
        confidence: the confidence of the reported ε_lb, the larger of the two bounds: one Bonferroni correction
            covers both (each bound at (1 − confidence)/2; `dpviz.audit.bounds.significance`).
        seed: the auditor's seed (inclusion bits, canaries, directions), never shown to training.
    """

    canaries: int = 1000
    threat: str = "white-box"
    kind: str = "mislabeled"
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self):
        if isinstance(self.canaries, bool) or not isinstance(self.canaries, int) or \
                not 10 <= self.canaries <= MAX_CANARIES:
            raise ConfigError("canaries", f"an integer in [10, {MAX_CANARIES}]", self.canaries)
        if self.threat not in THREATS:
            raise ConfigError("threat", f"one of {', '.join(THREATS)}", self.threat)
        if self.kind not in KINDS:
            raise ConfigError("kind", f"one of {', '.join(KINDS)}", self.kind)
        if self.threat == "white-box" and self.kind != KINDS[0]:  # else ignored, yet keyed apart
            raise ConfigError("kind", "only for black-box audits (white-box canaries are gradients, not images); "
                              "leave it out", self.kind)
        if not isinstance(self.confidence, (int, float)) or not 0.5 <= self.confidence < 1:
            raise ConfigError("confidence", "a number in [0.5, 1)", self.confidence)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2 ** 31:
            raise ConfigError("seed", "an integer in [0, 2^31)", self.seed)

    def for_threat(self, threat: str) -> "AuditSpec":
        """This spec for ``threat`` (a sweep's point): the black-box canary kind only where it applies."""
        return replace(self, threat=threat, kind=self.kind if threat == "black-box" else KINDS[0])

    def key(self, cfg: RunConfig) -> str:
        """The stored audit's key: the run configuration's hash, this spec and the code of the mechanism,
        so a stored audit never answers for a mechanism that has changed since."""
        doc = json.dumps({"config": cfg.hash(), **asdict(self), "mechanism": mechanism_hash()}, sort_keys=True)
        return hashlib.sha256(doc.encode()).hexdigest()[:16]


# The files whose code makes the released updates (sampling, clipping, noise, accounting, the loop and
# the strategies' phases) and the canaries and bounds of the audit itself: any change re-audits.
MECHANISM_FILES = ("training/calibration.py", "training/prepare.py", "training/execute.py", "training/loop.py",
                   "models/sparse.py", "models/lora.py",
                   "privacy/*.py", "strategies/*.py", "audit/canaries.py", "audit/bounds.py", "audit/run.py")


@functools.lru_cache(maxsize=4)
def mechanism_hash(root: str | None = None) -> str:
    """SHA-256 (16 hex) of the mechanism's source files under the package folder ``root``."""
    base = Path(root) if root else Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for pattern in MECHANISM_FILES:
        for f in sorted(base.glob(pattern)):
            h.update(f.relative_to(base).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _canaries(spec: AuditSpec, included: np.ndarray, cfg: RunConfig):
    """The canaries of an audit of ``cfg``, made from its private bundle. White-box canaries take BandMF's parts
    as ``cfg`` splits its records (`RunConfig.parts`); black-box ones are records of the training split."""
    from dpviz.audit.canaries import GradientCanaries, InputCanaries

    if spec.threat == "white-box":
        return lambda bundle: GradientCanaries(included, seed=spec.seed, split=cfg.parts)
    return lambda bundle: InputCanaries(included, seed=spec.seed, kind=spec.kind, bundle=bundle)


def audit(cfg: RunConfig, spec: AuditSpec | None = None, *, cache_dir=None, store: Store | None = None,
          force: bool = False, progress: Callable | None = None,
          cancel: threading.Event | None = None) -> dict:
    """Audit ``cfg``: one training run with ``spec.canaries`` canaries, scored and bounded.

    Returns the report (also stored, keyed by the config's hash and ``spec``; an identical request is
    answered from the store unless ``force``): ε and the accountant's ε spent, ε_lb by both bounds with
    the guesses made and right (the larger of the two at ``spec.confidence``: `bounds.family`'s fields say
    what that confidence covers and what the f-DP bound assumes), the ceiling, AUC, TPR at FPR 1 % and 0.1 %,
    the scores, and for the white-box threat the ideal ε_lb of scores from the mechanism's exact distribution.
    """
    from dpviz.training import execute
    from dpviz.runner import resolved
    from dpviz.audit import canaries as canary_mod  # torch: only when an audit trains

    spec = spec or AuditSpec()
    store = store or Store(cache_dir)
    cfg, _ = resolved(cfg, store)
    key = spec.key(cfg)
    if not force and (hit := store.get_audit(key)):
        return {**hit, "cached": True}
    included = canary_mod.inclusion_bits(spec.canaries, spec.seed)
    t0 = time.perf_counter()
    # not the user's run: nothing of it is stored but the audit's report
    summary, prep = execute.train_unstored(cfg.replace(checkpoint_every=0), cache_dir=store.root,
                                           canaries=_canaries(spec, included, cfg), progress=progress, cancel=cancel)
    scores = prep.canaries.final_scores(prep.model, prep.device)
    report = _report(key, cfg, spec, included, scores, summary, prep, time.perf_counter() - t0)
    store.put_audit(key, cfg.hash(), report)
    return {**report, "cached": False}


def stored(cfg: RunConfig, spec: AuditSpec | None = None, *, cache_dir=None, store: Store | None = None) -> dict | None:
    """The stored report ``audit(cfg, spec)`` would answer with, or None when it would train (imports no torch)."""
    from dpviz.runner import resolved

    spec, store = spec or AuditSpec(), store or Store(cache_dir)
    cfg, _ = resolved(cfg, store, search_ok=False)
    return None if cfg.auto else store.get_audit(spec.key(cfg))


def time_estimate(store: Store, cfg: RunConfig) -> str:
    """How long an audit of ``cfg`` should take here, from what this store measured: its audits of the same
    strategy, dataset and backbone, else its finished runs of them (an audit trains the configuration once),
    else a sentence saying there is no measurement yet."""
    same = {f: getattr(cfg, f) for f in ("strategy", "dataset", "backbone")}

    def like(c: dict) -> bool:
        return all(c.get(f) == v for f, v in same.items())

    took = [r["wall_time_s"] for r in store.audits() if like(r["config"]) and r.get("wall_time_s")]
    what = "audits"
    if not took:
        took = [r["summary"]["wall_time_s"] for r in store.list_runs() if r["status"] == "finished"
                and like(r["config"]) and (r.get("summary") or {}).get("wall_time_s")]
        what = "runs"
    if not took:
        return "No audit or run of this strategy, dataset and backbone has been timed here yet."
    from dpviz.jobs import duration

    return (f"Stored {what} of {cfg.strategy} on {cfg.dataset} ({cfg.backbone}) took {duration(float(np.median(took)))}"
            f" here (median of {len(took)}); the progress bar counts the audit's steps and the time left.")


def roc(report: dict) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of a stored report's canary scores, "in if score ≥ t" over every threshold."""
    from dpviz.audit import bounds

    scores = np.array(report["scores_in"] + report["scores_out"])
    return bounds.roc(scores, np.arange(len(scores)) < len(report["scores_in"]))


def best_per_config(store: Store) -> dict[str, dict]:
    """Per run configuration hash, its stored audit with the highest ε_lb (the strongest evidence)."""
    best: dict[str, dict] = {}
    for r in store.audits():
        lb = max(r["epsilon_lb"], r["epsilon_lb_fdp"])
        if r["config_hash"] not in best or lb > best[r["config_hash"]]["epsilon_lb_best"]:
            best[r["config_hash"]] = {"epsilon_lb_best": lb, "threat": r["threat"], "canaries": r["canaries"],
                                      "confidence": r["confidence"]}
    return best


def _report(key, cfg, spec, included, scores, summary, prep, wall) -> dict:
    from dpviz.audit import bounds  # scipy.stats: not on the path of pages that only read stored audits

    delta = cfg.delta
    best = bounds.best_bounds(scores, included, delta=delta, confidence=spec.confidence)
    out = {
        "audit_key": key, "config_hash": cfg.hash(), "config": cfg.to_dict(), **asdict(spec),
        "mechanism": mechanism_hash(),
        "epsilon": cfg.epsilon if cfg.private else None, "epsilon_spent": summary["epsilon_spent"],
        "delta": delta, **best, "ceiling": bounds.ceiling(m=spec.canaries, delta=delta, confidence=spec.confidence),
        **bounds.family(spec.canaries, spec.confidence),
        "included": int(included.sum()), "sample_rate": prep.sample_rate,
        "n_train": prep.bundle.n + prep.canaries.virtual_records,  # canaries included
        "steps": sum(p.steps for p in prep.phases), "noise_multiplier": prep.phases[0].noise_multiplier,
        "auc": bounds.auc(scores, included), "tpr_at_fpr_1pct": bounds.tpr_at_fpr(scores, included, 0.01),
        "tpr_at_fpr_01pct": bounds.tpr_at_fpr(scores, included, 0.001),
        "test_accuracy": summary["test_accuracy"], "wall_time_s": round(wall, 3),
        "scores_in": scores[included].round(6).tolist(), "scores_out": scores[~included].round(6).tolist(),
        "audit": True,
    }
    if spec.threat == "white-box" and cfg.private:
        # the exact mechanism: DP-SGD's, or the DP-SGD schedule a BandMF phase is exactly as private as
        sigma, q, _ = prep.phases[0].accounted()
        steps = sum(p.accounted()[2] for p in prep.phases)
        exact = {"steps": steps, "sample_rate": q, "noise_multiplier": sigma, "seed": spec.seed}
        ideal = bounds.ideal_scores(included, **exact)
        out["ideal"] = bounds.best_bounds(ideal, included, delta=delta, confidence=spec.confidence)
        out["ideal"]["spread"] = bounds.ideal_spread(included, **exact, delta=delta, confidence=spec.confidence)
    return out
