"""Plain, JSON/CSV-ready views of stored runs for figures, pages and notebooks.

Everything here reads the store and returns pandas DataFrames or dicts — the
tables figures are built from, the "matching run" (twin) lookups, and the
one-line readings and verdicts pages print under their figures; no plotting,
no Streamlit, no torch. One module per subject, as in `dpviz.figures`, each
reading beside its table: `labels` (how every surface names a run: labels and captions), `runs` (curves, seed
bands, the run table, twins, the budget split), `analyses` (cached representation analyses), `curvature`
(curvature and accountants) and `sparse` (masks, step times, the sparse
profile). Every public name is re-exported here: ``results.curves(...)``.
"""

from __future__ import annotations

from dpviz.results.analyses import (analysis_curves, cached_analysis, embedding_frames, embedding_table, feature_texts,
                       knn_dip_reading,
                       law_reading, law_series, law_table, layer_table)
from dpviz.results.curvature import (CURVATURE_FIELDS, accountants_reading, batch_prediction_reading, curvature_reading,
                        curvature_table)
from dpviz.results.labels import caption, config_label, config_labels, launch_label, run_label, run_labels
from dpviz.results.runs import (CURVE_METRICS, best_run_reading, budget_reading, curves, final_table, group_key,
                                matching_run, offered, phase_switch, runs_of, seed_bands, shown_runs, stored_ids,
                                switch_step)
from dpviz.results.sparse import method_of, profile_table, sparse_mask, sparse_verdict, step_time_ms, step_time_reading

__all__ = ["CURVATURE_FIELDS", "CURVE_METRICS", "accountants_reading", "analysis_curves", "batch_prediction_reading",
           "best_run_reading", "budget_reading", "cached_analysis", "caption", "curvature_reading", "curvature_table",
           "curves", "embedding_frames", "embedding_table", "feature_texts", "final_table", "group_key",
           "knn_dip_reading", "law_reading", "law_series", "law_table", "layer_table", "matching_run", "method_of",
           "offered", "phase_switch", "profile_table", "config_label", "config_labels", "launch_label", "run_label", "run_labels",
           "runs_of", "seed_bands", "shown_runs", "sparse_mask", "sparse_verdict", "step_time_ms",
           "step_time_reading", "stored_ids", "switch_step"]
