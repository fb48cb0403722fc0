"""The scorecard's rows as study results: written by the studies' one writer (`dpviz.studies.results.save`) and
read by their one reader (`dpviz.studies.results.load`), with the same provenance.

A pass on a task writes ``<store>/studies/scorecard_<task>[_<size>][_<variant>].json``: a results file of the
study ``scorecard`` whose cells are the claims (``{"claim": "000-dip"}``), each holding its row: the verdict
and reading, the per-seed numbers of each group (``measured``), the measurement its judge reads
(``measurement``) and the curves its figure draws. The scorecard dpviz ships is the same file in
``dpviz/studies/shipped/``; a claim read in the user's store replaces the shipped one, claim by claim.

A row's verdict is its judge's on its own measurement (`rejudge`), so the verdict a page shows follows from the
numbers stored beside it.
"""

from __future__ import annotations

from dpviz.studies import results as _results

NAME = "scorecard"
"""The study name the scorecard's results files carry."""


def _scale(scale: str | None) -> str | None:
    """The scorecard's small size is a task's own size: no size in the file's name."""
    return None if scale in (None, "small") else scale


def _sets(changes: dict | None) -> dict:
    return {k: v for k, v in (changes or {}).items() if k != "device"}


def file_name(task: str, scale: str = "small", changes: dict | None = None) -> str:
    """``scorecard_<task>[_<size>][_<variant>]`` (`dpviz.reproduce.variant`): scorecard_default_bandmf-b2."""
    return _results.results_name(NAME, task, _scale(scale), _sets(changes))


def results_of(rows: list[dict], *, task: str, scale: str = "small", changes: dict | None = None,
               seeds) -> _results.Results:
    """``rows`` as the scorecard's results on ``task`` at ``scale``: one cell per claim holding its row."""
    res = _results.Results(study=NAME, task=task, scale=_scale(scale), sets=_sets(changes),
                           seeds=sorted(int(s) for s in seeds))
    for r in rows:
        res.cells[_results.cell_key({"claim": r["id"]})] = {"cell": {"claim": r["id"]}, "row": r, "source": "store"}
    return res


def save_rows(rows: list[dict], *, task: str, scale: str = "small", changes: dict | None = None, store,
              command: str, seeds) -> _results.Results:
    """Write ``rows`` (`dpviz.reproduce.run`'s) into the store's scorecard file for this task, size and
    variant, merged with the claims it holds already, with their provenance; return what was written."""
    res = results_of(rows, task=task, scale=scale, changes=changes, seeds=seeds)
    before = load(task=task, scale=scale, changes=changes, store_root=store.root, shipped=False)
    ids = [rid for r in rows for group in r.get("run_ids", {}).values() for rid in group]
    res.provenance = _results.provenance(command, store, ids, before=before.provenance)
    private = sorted({k for r in rows if r.get("private_statistics") for k in r.get("measured", {})})
    return _results.save(res, store.root, private=private)


def load(*, task: str, scale: str = "small", changes: dict | None = None, store_root=None,
         shipped: bool = True) -> _results.Results:
    """The scorecard's results on ``task`` at ``scale``: the store's claims, then the shipped ones."""
    return _results.load(NAME, task, _scale(scale), _sets(changes), store_root=store_root, shipped=shipped)


def rows(res: _results.Results) -> dict[str, dict]:
    """claim id → its row, each marked with where it comes from (``source``: store or shipped) and carrying
    the file's provenance (``provenance``)."""
    out = {}
    for e in res.cells.values():
        if "row" not in e:
            continue
        prov = res.provenance if e.get("source") == "store" else (res.shipped_provenance or res.provenance)
        out[e["cell"]["claim"]] = {**e["row"], "source": e.get("source"), "provenance": prov}
    return out


def rejudge(row: dict) -> tuple[str, str] | None:
    """(verdict, reading) of ``row``'s claim judged again on the measurement the row keeps (None where the row
    keeps none: a row converted from a table, or a claim its task cannot read)."""
    from dpviz.reproduce.claims import REGISTRY
    from dpviz.reproduce.scorecard import ONE_SEED

    if "measurement" not in row or row["id"] not in REGISTRY:
        return None
    verdict, reading = REGISTRY[row["id"]].judge(row["measurement"])
    return verdict, reading + (f" {ONE_SEED}" if row.get("seeds", 0) < 2 else "")
