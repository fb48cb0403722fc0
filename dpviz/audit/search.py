"""Audit a private search: the whole mechanism — K trials with canaries among the private examples, each
scored by its noisy held-out count, the best released — and the released model's canaries bounded.

The claim it tests is the search's: the released model is (total ε, total δ)-DP. So every trial trains with
the same canaries (the same inclusion bits: a canary is in or out of the private data, for the whole
search), the selection is the search's own (`dpviz.sweeps.private`), and only the released trial's canary
scores are read: the white-box threat sees the released trial's updates, the black-box one its final
model. Nothing is stored but the report (`Store.put_audit`, keyed by the search and the spec).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict

from dpviz.audit.run import AuditSpec, _canaries, mechanism_hash
from dpviz.store import Store
from dpviz.sweeps import private


def key(search: private.PrivateSearch, spec: AuditSpec) -> str:
    doc = json.dumps({"search": search.key(), **asdict(spec), "mechanism": mechanism_hash()}, sort_keys=True)
    return "search-" + hashlib.sha256(doc.encode()).hexdigest()[:16]


def audit_search(search: private.PrivateSearch, spec: AuditSpec | None = None, *, store: Store,
                 progress=None, cancel=None) -> dict:
    """Run ``search`` with ``spec``'s canaries, unstored, and bound ε from the released trial's canaries.

    Returns the report: the search's total ε and ε spent, the trials drawn, ε_lb by both one-run bounds
    (at the search's δ; the larger of the two holds at ``spec.confidence``, `bounds.family`) and the ceiling
    the canary count allows.
    """
    from dpviz.audit import bounds
    from dpviz.audit import canaries as canary_mod
    from dpviz.runner import resolved
    from dpviz.training import execute

    spec = spec or AuditSpec()
    private.check(search)
    k_ = key(search, spec)
    if (hit := store.get_audit(k_)) is not None:
        return {**hit, "cached": True}
    t0 = time.perf_counter()
    included = canary_mod.inclusion_bits(spec.canaries, spec.seed)
    # the included canaries are records of the trials' data: the plan is made for that n, as the trials are
    plan = private.plan(search, extra_records=int(included.sum()))
    draws = private.draw_count(search)
    noise, best = private.score_noise(search), None
    for i, cfg in enumerate(private.trial_configs(search, plan, draws)):
        if progress is not None:
            progress(i, draws)
        cfg, _ = resolved(cfg, store)
        summary, prep = execute.train_unstored(cfg.replace(checkpoint_every=0), cache_dir=store.root,
                                               canaries=_canaries(spec, included, cfg), cancel=cancel)
        private.check_sigma(summary, plan)
        score = private.noisy_score(summary, noise, plan.score_sigma)
        if best is None or score > best[0]:
            best = (score, summary, prep.canaries.final_scores(prep.model, prep.device))
    report = {"audit_key": k_, "search_key": search.key(), "config_hash": search.key(), "audit": True,
              "search": True, **asdict(spec), "mechanism": mechanism_hash(), "epsilon": search.total_epsilon,
              "epsilon_spent": plan.search_epsilon, "per_trial_epsilon": plan.trial_epsilon,
              "delta": search.total_delta, "trials_drawn": draws, "distribution": search.distribution,
              "mean_trials": search.mean_trials, "wall_time_s": None}
    if best is None:  # K = 0: nothing released, nothing to audit
        report.update(epsilon_lb=0.0, epsilon_lb_fdp=0.0, released=False)
    else:
        scores = best[2]
        report.update(bounds.best_bounds(scores, included, delta=search.total_delta, confidence=spec.confidence),
                      released=True, test_accuracy=best[1]["test_accuracy"], auc=bounds.auc(scores, included),
                      ceiling=bounds.ceiling(m=spec.canaries, delta=search.total_delta, confidence=spec.confidence),
                      **bounds.family(spec.canaries, spec.confidence))
    report["wall_time_s"] = round(time.perf_counter() - t0, 3)
    store.put_audit(k_, search.key(), report)
    return {**report, "cached": False}
