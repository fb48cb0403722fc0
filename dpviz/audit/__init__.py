"""Empirical privacy audits: canaries in one training run, a statistically valid lower bound on ε.

`run.audit` trains a configuration once with m canaries (`canaries`), scores them, and turns the scores
into ε_lb with `bounds` — beside the accountant's ε (an upper bound) and the ceiling m canaries allow.
An audit's training run is not the user's run: it is never stored among the runs, only its result.
"""

from dpviz.audit.run import (MAX_CANARIES, AuditSpec, THREATS, KINDS, audit, best_per_config, roc, stored,  # noqa: F401
                             time_estimate)
