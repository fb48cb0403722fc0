"""Audit sweeps: one audit per (strategy, ε, threat), each stored, so a stopped sweep resumes.

Every point is the base configuration with only its strategy and ε replaced, so a sweep's audits share the
base's noise mechanism, bands and parts (keyed by the configuration's hash, an audit of another mechanism never
answers for a point). A sweep row is the small part of an audit report that a table or a figure of ε_lb against
ε needs, the mechanism named; `stored` gives the rows already in the store without training (for pages that
redraw every second).
"""

from __future__ import annotations

import math
import threading
from typing import Callable

from dpviz.privacy import names
from dpviz.config import RunConfig
from dpviz.errors import Cancelled, ConfigError
from dpviz.store import Store
from dpviz.audit.run import THREATS, AuditSpec, audit, stored as stored_report

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, math.inf)
"""The issue's grid; ∞ trains without noise (the canaries' visibility: ε_lb should near the ceiling)."""


def plan(base: RunConfig, *, strategies, epsilons=EPSILONS, threats=THREATS) -> list[tuple[RunConfig, str]]:
    """Every (configuration, threat) of the sweep, strategy by strategy, in increasing ε.

    Raises:
        ConfigError: an empty axis, or a value a configuration rejects (named by its field).
    """
    for field, values in (("strategies", strategies), ("epsilons", epsilons), ("threats", threats)):
        if not values:
            raise ConfigError(field, "at least one value", list(values))
    bad = [t for t in threats if t not in THREATS]
    if bad:
        raise ConfigError("threats", f"some of {', '.join(THREATS)}", bad)
    eps = sorted({float(e) for e in epsilons})
    return [(point(base, s, e), t) for s in strategies for e in eps for t in threats]


def point(base: RunConfig, strategy: str, epsilon: float) -> RunConfig:
    """``base`` run by ``strategy`` at ``epsilon``; fields that strategy ignores go back to unset."""
    return RunConfig.from_dict({**base.to_dict(), "strategy": strategy, "epsilon": epsilon}, reset_unread=True)


def row(report: dict) -> dict:
    """The sweep row of one audit report: ε, the strategy, the noise mechanism (its bands and parts), the threat
    and the bounds (ε_lb: the larger of the two, at ``confidence`` for both together; ``bound_significance``: each
    bound's, None in a report from before)."""
    c = report["config"]
    ideal = report.get("ideal") or {}
    return {
        "strategy": c["strategy"], "mechanism": names.mechanism_of(c), "bands": c.get("bands", 1),
        "parts": c.get("parts"), "epsilon": report["epsilon"], "threat": report["threat"],
        "canaries": report["canaries"], "epsilon_spent": report["epsilon_spent"],
        "epsilon_lb": max(report["epsilon_lb"], report["epsilon_lb_fdp"]),
        "epsilon_lb_one_run": report["epsilon_lb"], "epsilon_lb_fdp": report["epsilon_lb_fdp"],
        "ideal_epsilon_lb": max(ideal.get("epsilon_lb", 0.0), ideal.get("epsilon_lb_fdp", 0.0)) if ideal else None,
        "ceiling": report["ceiling"], "auc": report["auc"], "wall_time_s": report["wall_time_s"],
        "confidence": report["confidence"], "bound_significance": report.get("bound_significance"),
        "audit_key": report["audit_key"],
    }


def sweep(base: RunConfig, spec: AuditSpec | None = None, *, strategies, epsilons=EPSILONS, threats=THREATS,
          cache_dir=None, store: Store | None = None, progress: Callable | None = None,
          cancel: threading.Event | None = None) -> list[dict]:
    """Audit every point of the sweep (stored audits answer at once) and return their rows.

    Args:
        base: the configuration every point starts from (its strategy and ε are replaced).
        spec: canaries, confidence and seed of every audit (its threat is each point's).
        strategies, epsilons, threats: the sweep's axes.
        progress: called with (audits done, audits in all, the point being audited).
        cancel: a `threading.Event`; set, the sweep stops inside the current audit (rows so far).
    """
    spec, store = spec or AuditSpec(), store or Store(cache_dir)
    points = plan(base, strategies=strategies, epsilons=epsilons, threats=threats)
    rows = []
    for i, (cfg, threat) in enumerate(points):
        if progress:
            progress(i, len(points), label(cfg, threat))
        try:
            rows.append(row(audit(cfg, spec.for_threat(threat), store=store, cancel=cancel)))
        except Cancelled:
            return rows
    if progress:
        progress(len(points), len(points), "done")
    return rows


def stored(base: RunConfig, spec: AuditSpec | None = None, *, strategies, epsilons=EPSILONS, threats=THREATS,
           cache_dir=None, store: Store | None = None) -> list[dict]:
    """The rows of the sweep's audits that are in the store, training nothing."""
    spec, store = spec or AuditSpec(), store or Store(cache_dir)
    hits = (stored_report(cfg, spec.for_threat(threat), store=store)
            for cfg, threat in plan(base, strategies=strategies, epsilons=epsilons, threats=threats))
    return [row(h) for h in hits if h]


def _point_of(base: RunConfig, r: dict) -> RunConfig:
    return point(base, r["strategy"], math.inf if r["epsilon"] is None else r["epsilon"])


def configs(base: RunConfig, rows: list[dict]) -> list[dict]:
    """The configurations of the sweep's ``rows`` (its points that are stored): what an export's caption names."""
    return [_point_of(base, r).to_dict() for r in rows]


def row_label(base: RunConfig, r: dict) -> str:
    """`label` of the point of the sweep of ``base`` that row ``r`` holds."""
    return label(_point_of(base, r), r["threat"])


def label(cfg: RunConfig, threat: str) -> str:
    """A point as the progress line says it: strategy, ε, the mechanism where it is not DP-SGD, threat."""
    eps = "∞" if not cfg.private else f"{cfg.epsilon:g}"
    noise = names.named(cfg.to_dict())
    return f"{cfg.strategy} ε={eps}{' ' + noise if noise else ''} {threat}"
