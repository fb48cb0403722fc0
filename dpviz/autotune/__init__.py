"""Learning rates that follow ε and spend no privacy: ``lr_* = "auto"`` resolved on public data only.

A config whose learning rates are "auto" (the default) is resolved before it runs, from the first
of these that applies:

1. **shipped**: the grid `dpviz/autotune/grid.json` that `scripts/build_auto_grid.py` computed for the
   built-in backbones × strategies × ε on the default task, interpolated in log ε (and linearly in
   a strategy's `auto_axes`, e.g. the LP share of lp-fft) — instant;
2. **search**: a small TPE search (`sweeps.create_search`) over the auto fields, every trial an
   ordinary DP run of the *same* configuration — ε, δ, B, epochs, strategy and its fields,
   clipping, C, optimizer, backbone — on a public dataset dpviz generates instead of the private
   one. The study is named by its inputs, so a second resolution reopens it and trains nothing.
   Where the best trial sits at an end of its range, 3 more trials cover the decade beyond that end;
   a best still at the (new) end is said in the resolution's ``warning``;
3. **default**: where dpviz has no public stand-in for the dataset, the fixed defaults, said so.

No step reads a private record, so resolving costs no privacy — unlike tuning on the private data,
whose cost no run's ε includes. The proxy must look like the private data to the backbone: glyphs
(generated digit glyphs, 16×16 grey, n = 1 500 vs 1 437) stand in for the embedded digits.
"""

from __future__ import annotations

from dpviz.autotune.grid import (  # noqa: F401  (the shipped grid: read first)
    GRID_PATH, PLAIN_RANGES, RANGES, interpolate, key_of, lookup, power_law, shipped, smooth)
from dpviz.autotune.proxy import (  # noqa: F401  (the search, run when neither the grid nor a finished search answers)
    EDGE, EXTEND_TRIALS, TRIALS_PER_FIELD, at_edges, best_trial, chance_warning, edge_warning, extension,
    finished_search, proxy_for, search, search_base, space_of, start_points, proxy_study_name, trials_for)
from dpviz.autotune.policy import DEFAULTS, Query, Resolution, query, resolve, used_fields  # noqa: F401

__all__ = ["annotations", "GRID_PATH", "PLAIN_RANGES", "RANGES", "interpolate", "key_of", "lookup", "power_law",
           "shipped", "smooth", "EDGE", "EXTEND_TRIALS", "TRIALS_PER_FIELD", "at_edges", "best_trial",
           "chance_warning", "edge_warning", "extension", "finished_search", "proxy_for", "search", "search_base",
           "space_of", "start_points", "proxy_study_name", "trials_for", "DEFAULTS", "Query", "Resolution", "query",
           "resolve", "used_fields"]
