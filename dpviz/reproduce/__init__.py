"""The reproduction scorecard: every headline claim of the seed papers, measured on a task (the default
toy task or a real pretrained model on real data, `dpviz.tasks`).

One module per part: `claims` (what each claim needs and measures), `verdicts` (pure judges),
`scorecard` (training what is missing and reading the rows). Its rows are filed as study results by
`dpviz.studies.scorecard` (one writer, one reader, with provenance, shipped in ``dpviz/studies/shipped/``).

Each `Claim` names its seed file, the sentence it tests and the experiment, declared once for every
task (`configs(task, seeds)`: ordinary `RunConfig`s with "auto" learning rates, one per seed);
`measure` reads the finished runs (and cached analyses) from the store, and `judge` — a pure function of that measurement, tested on planted
values — returns the verdict and a reading. `run` trains whatever is missing (finished runs answer
from the cache, so a stopped scorecard resumes) and returns one row per claim.
"""

from __future__ import annotations

from dpviz.reproduce.claims import (CLAIMS, FRACTIONS, MODELS, PAPERS, PRIVATE_NOTE, REGISTRY, SCALE, SCALE_NAMES, SCALES,
                     SEED_FILES, SWEEPS, Claim, at_scale, scorecard_config, size_fields, steps_of)
from dpviz.reproduce.scorecard import ONE_SEED, plan, row, run, stored_rows, unreadable_row, variant
from dpviz.reproduce.verdicts import (AGREES, DOES_NOT, NOT_READ, PARTLY, VERDICTS, best_p, compare, fit_r2, fit_rho, fmt, judge_decelerator,
                       judge_dip, judge_interior, judge_law, judge_law_breaks, judge_pair, judge_public_first,
                       judge_shift, mean_std)

__all__ = ["AGREES", "CLAIMS", "Claim", "DOES_NOT", "FRACTIONS", "MODELS", "NOT_READ", "ONE_SEED", "PAPERS", "PARTLY",
           "PRIVATE_NOTE", "REGISTRY", "SCALE", "SCALES", "SCALE_NAMES", "SEED_FILES", "SWEEPS", "VERDICTS", "best_p", "compare", "fit_r2", "fit_rho",
           "fmt", "judge_decelerator", "judge_dip", "judge_interior", "judge_law", "judge_law_breaks", "judge_pair",
           "judge_public_first", "judge_shift", "mean_std", "plan", "row", "run", "scorecard_config", "stored_rows",
           "unreadable_row", "variant", "at_scale", "size_fields", "steps_of"]
