"""Studies: the comparisons behind dpviz's findings, declared once, run on any task, read from numbers.

A study (`Study`, one module each) is a grid of `RunConfig`s over the variables it compares, what is read from
each finished run, a pure reading and a figure. Registered by name (`register_study`), it is found by
``python -m dpviz study …``, by `run` from Python, by the Studies page and by the documentation; a module of your
own named in ``DPVIZ_PLUGINS`` registers one the same way.

* `run` trains each configuration once (the store answers the rest), writes the numbers per cell and per seed
  after every run (`results`), and stops between runs when asked (``stop_after``, ``cancel``); a stopped
  study resumes.
* `stored` reads the results so far, training nothing; the shipped results answer where the store has none.

Built in: ``noise`` (DP-SGD beside BandMF's correlated noise), ``split`` (the best LP share per mechanism),
``parts`` (BandMF's independent parts beside an equal split), ``lora`` (DP-LoRA's rank) and
``public-first`` (public, then private, beside pure DP-FFT), ``private-tuning`` (tuning within one total ε),
``distortion`` (the early kNN dip), ``law`` (the separation law across tuned blocks) and ``proxy-tuning``
(tuning on the public proxy or on the private data), ``depth`` (the separation law at three depths of
EfficientNet-Lite) and ``curvature`` (the decelerator over DP-FFT training), ``decelerator`` (the noise alone of K steps against the
curvature formula) and ``sparse-selection`` (SPARTA's private row choice against the noiseless one).
"""

from __future__ import annotations

from dpviz.studies.base import Measure, Study, cell_key, parse_sets, parse_value
from dpviz.studies.registry import (AXIS_LABELS, STUDIES, available, axis_label, figure, get, names, reading,
                                    register_study, run, stored)
from dpviz.studies.results import Results, load, results_name, said, save
from dpviz.studies.report import report_pdf, runs_report, study_report, write_report
from dpviz.studies.runner import command_line, counts, plan, set_words

from dpviz.studies import noise, split, parts, lora, public, tuning  # noqa: E402,F401,I001  (the built-in studies
from dpviz.studies import presets, proxy, depth, curvature, decelerator, selection  # noqa: E402,F401,I001  register)
from dpviz.studies import scorecard  # noqa: E402,I001  (the scorecard's rows, filed as study results)

__all__ = ["AXIS_LABELS", "Measure", "Results", "STUDIES", "Study", "available", "axis_label", "cell_key",
           "command_line", "counts", "figure", "get", "load", "names", "parse_sets", "parse_value", "plan", "reading",
           "register_study", "report_pdf", "results_name", "run", "runs_report", "said", "save", "scorecard",
           "set_words", "stored", "study_report", "write_report"]
