"""Empirical privacy audits: canaries in one training run, a statistically valid lower bound on ε.

`run.audit` trains a configuration once with m canaries (`canaries`), scores them, and turns the scores
into ε_lb with `bounds` — beside the accountant's ε (an upper bound) and the ceiling m canaries allow.
An audit's training run is not the user's run: it is never stored among the runs, only its result.
"""

from dpviz.audit.run import (MAX_CANARIES, AuditSpec, THREATS, KINDS, audit, best_per_config, roc, stored,  # noqa: F401
                             time_estimate)
from dpviz.audit.search import audit_search  # noqa: F401
from dpviz.audit import readings, sweep  # noqa: F401  (the readings under an audit, and sweeps of audits)
from dpviz.audit import verify  # noqa: F401  (a run's own privacy check, read back or replayed)

__all__ = ["MAX_CANARIES", "AuditSpec", "THREATS", "KINDS", "audit", "best_per_config", "roc", "stored", "time_estimate",
           "audit_search", "readings", "sweep", "verify"]
