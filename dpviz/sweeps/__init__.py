"""Sweeps and searches as Optuna studies; every trial is an ordinary dpviz run.

The package re-exports `dpviz.sweeps.design` (studies), `dpviz.sweeps.trials` (their workers) and
`dpviz.sweeps.journal` (their storage).
"""

from __future__ import annotations

from dpviz.sweeps import private  # noqa: F401  (private searches: a search inside one ε)
from dpviz.sweeps.journal import journal_path, storage  # noqa: F401
from dpviz.sweeps.trials import TS, run_local, start_workers, work  # noqa: F401
from dpviz.sweeps.design import (  # noqa: F401
    budget_grid, study_name, check_points, preview_points, distinct_schedules,
    create_grid_sweep, sparse_points, noise_points, create_budget_sweep, check_space, check_ranges, preview_corners,
    proxy_base, search_name, create_search, table, best_config, private_trials, search_cost, studies
)

__all__ = ["storage", "TS", "run_local", "start_workers", "work", "budget_grid", "study_name", "check_points",
           "preview_points", "distinct_schedules",
           "create_grid_sweep", "sparse_points", "noise_points", "create_budget_sweep", "check_space", "check_ranges",
           "preview_corners", "proxy_base", "search_name", "create_search", "table", "best_config",
           "private_trials", "search_cost", "studies", "private", "journal_path"]
