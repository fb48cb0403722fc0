"""The studies' registry by name, and what the faces call: run, read, list what results there are."""

from __future__ import annotations

from dpviz.errors import ConfigError
from dpviz.studies.base import Study
from dpviz.studies.results import Results

STUDIES: dict[str, Study] = {}
"""The registered studies by name, in registration order."""

AXIS_LABELS = {"epsilon": "ε", "parts": "BandMF parts", "lora_rank": "LoRA rank r", "bands": "bands b (1: DP-SGD)", "lp_fraction": "LP share p", "family": "correlated noise",
               "strategy": "strategy", "mechanism": "mechanism",
               "tuned_on": "tuned on", "tune_blocks": "blocks tuned k", "lr": "learning rate",
               "backbone": "backbone", "phase": "features read",
               "horizon": "K noise steps"}


def register_study(study: Study) -> Study:
    """Add ``study`` to the registry (a name taken by another study is a `ConfigError`); returns it."""
    if not isinstance(study, Study):
        raise ConfigError("study", "a dpviz.studies.Study", type(study).__name__)
    if study.name in STUDIES and STUDIES[study.name] is not study:
        raise ConfigError("study", f"a name no other study has ({study.name} is registered already)", study.name)
    STUDIES[study.name] = study
    return study


def get(name: str, field: str = "study") -> Study:
    """The study called ``name``; a `ConfigError` naming ``field`` and the choices otherwise."""
    if name not in STUDIES:
        raise ConfigError(field, f"one of {', '.join(STUDIES)}", name)
    return STUDIES[name]


def names() -> list[str]:
    return list(STUDIES)


def axis_label(axis: str) -> str:
    return AXIS_LABELS.get(axis, axis)


def run(study, **kw) -> Results:
    """Run a study (`dpviz.studies.runner.run`): ``dpviz.studies.run("noise", task="default", seeds=(0, 1, 2))``."""
    from dpviz.studies.runner import run as _run

    return _run(get(study) if isinstance(study, str) else study, **kw)


def stored(study, **kw) -> Results:
    """A study's results so far, training nothing (`dpviz.studies.runner.stored`)."""
    from dpviz.studies.runner import stored as _stored

    return _stored(get(study) if isinstance(study, str) else study, **kw)


def available(task: str | None = None, *, store_root=None) -> list[Results]:
    """Every study's results there are (on ``task``, or on every task): the shipped files and the store's, one
    `Results` per (study, task, size, fields set), the store's cells over the shipped ones; registered studies
    only, in registry order then by name."""
    import json
    from pathlib import Path

    from dpviz.studies import results as _results

    from dpviz.errors import StoreError

    heads = {}  # file name → (study, task, size, fields set): one entry per results file name
    folders = [_results.SHIPPED] + ([Path(store_root) / "studies"] if store_root is not None else [])
    for folder in folders:
        for p in sorted(folder.glob("*.json")):
            try:
                d = json.loads(p.read_text())
                head = (d["study"], d["task"], d.get("scale"),
                        {k: v for k, v in (d.get("sets") or {}).items() if k != "device"})
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if head[0] in STUDIES and (task is None or head[1] == task):
                heads.setdefault(_results.results_name(*head), head)
    order = {n: i for i, n in enumerate(STUDIES)}
    out = []
    for s, t, sc, sets in sorted(heads.values(), key=lambda h: (order[h[0]], h[1], h[2] or "", len(h[3]),
                                                                json.dumps(h[3], sort_keys=True))):
        try:
            out.append(_results.load(s, t, sc, sets, store_root=store_root))
        except StoreError:  # a damaged or foreign file in the store: `study show` names it; the pages go on
            continue
    return [r for r in out if r.cells]


def figure(study, results: Results):
    """The study's figure of ``results``: its own, or its first measure per cell (mean ± sd over seeds), grouped
    by the cell's first column; None where no cell has a number yet."""
    study = get(study) if isinstance(study, str) else study
    if study.figure is not None:
        return study.figure(results)
    first = study.measures[0]
    rows = []
    for e in results.cells.values():
        if (st := results.stats(e["cell"], first.name)) is not None:
            shown = list(study.columns(e["cell"]).items())
            rows.append((f"{shown[0][0]} = {shown[0][1]}", ", ".join(f"{k} {v}" for k, v in shown[1:]) or first.label,
                         st))
    if not rows:
        return None
    from dpviz.figures.studies import cells_figure

    return cells_figure(rows, first.label)


def reading(study, results: Results) -> tuple[str, str]:
    """(verdict, sentence) of ``results`` by ``study``'s reading; "not read" where no cell has numbers yet."""
    study = get(study) if isinstance(study, str) else study
    if not any(e.get("runs") or e.get("summary") for e in results.cells.values()):
        return "not read", "No run of this study has finished yet."
    return study.read(results)
