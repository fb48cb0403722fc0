"""The scorecard rows dpviz ships (`dpviz.studies.scorecard`: study results in ``dpviz/studies/shipped/``), for
pages that show a measured pass beside the user's store."""

from __future__ import annotations

from dpviz.studies import said
from dpviz.studies import scorecard as filed


def scorecard_rows(task: str, size: str = "small", changes: dict | None = None) -> dict[str, dict]:
    """The shipped rows of ``task`` at ``size`` (claim id → row), or {} where none ship; ``changes``: a pass with
    fields set on every run (`--set`, e.g. mechanism bandmf)."""
    return filed.rows(filed.load(task=task, scale=size, changes=changes))


def scorecard_verdicts(task: str, size: str = "small", changes: dict | None = None) -> dict[str, dict]:
    """`scorecard_rows`, each marked ``"file": True`` (a table cell says where its verdict comes from)."""
    return {k: {**r, "file": True} for k, r in scorecard_rows(task, size, changes).items()}


def provenance(task: str, size: str = "small", changes: dict | None = None) -> str | None:
    """Where ``task``'s shipped scorecard comes from, in one line (None: none ships)."""
    res = filed.load(task=task, scale=size, changes=changes)
    return said(res.shipped_provenance) if res.cells else None
