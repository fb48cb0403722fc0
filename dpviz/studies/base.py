"""What a study is: a declared grid of runs, what is read from each finished run, and how the numbers read.

A `Study` is data plus pure functions, declared once in one module and registered by name
(`dpviz.studies.register_study`):

* its **axes**: the variables it compares (ε, the mechanism's bands, the LP share p, …), each with the values
  it takes by default, and `fields`, which turns one cell (a value per axis) into `RunConfig` fields;
* ``base``: fields every run sets over the task's (the strategy, the checkpoint interval);
* its **measures**: the numbers `measure` reads from one finished run (test accuracy, the kNN dip, ρ, …),
  each marked when it is a statistic of private data that ε does not cover;
* its **reading**: `read`, a pure function from the per-seed numbers (`dpviz.studies.results.Results`) to a
  verdict and a sentence, tested on planted values;
* its **figure**: `figure`, drawn from the same numbers.

Nothing here imports torch: the CLI lists studies and the pages draw shipped results without loading a model.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Callable

from dpviz.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Measure:
    """One number a study reads from each finished run.

    Attributes:
        name: its key in the results (``accuracy``).
        label: a column's heading (``test accuracy``).
        fmt: how a value is shown (``.3f``).
        private: a statistic of private data the DP guarantee does not cover (kNN, separability, curvature).
    """

    name: str
    label: str
    fmt: str = ".3f"
    private: bool = False


@dataclass(frozen=True, kw_only=True)
class Study:
    """One study, declared once (see the module).

    Attributes:
        name: the registry key (``python -m dpviz study run NAME``).
        title: a few words for menus.
        question: what the study asks, in one sentence.
        axes: axis → the values it takes by default, in order (``--vary AXIS=v1,v2`` picks others).
        fields: a cell (axis → value) → the `RunConfig` fields it sets.
        base: fields every run sets over its task's (before ``--set``).
        measures: the numbers read from each run.
        measure: (store, the run's summary, its `RunConfig`) → {measure name: value}; a value may be None
            (not defined for this run: DP-LP moves no feature, so it has no kNN dip).
        read: `Results` → (verdict, sentence); pure.
        figure: `Results` → a plotly figure (None: the study draws none).
        seed_paper: the seed paper (``000`` … ``004``) whose question it asks again, or "".
        show: a cell → {column: text} for tables (default: one column per axis).
        execute: (cell, config, store, cancel) → the summary of what the cell releases, for a cell that is more
            than one run (a private search over the config's rates); None: the run of its config.
        kinds: axes that set no field but choose how `execute` treats a cell (so cells apart in them stay apart).
        choices: axis → the values it may take, for an axis whose values no `RunConfig` check covers.
    """

    name: str
    title: str
    question: str
    axes: dict[str, tuple]
    fields: Callable[[dict], dict]
    base: dict = field(default_factory=dict)
    measures: tuple[Measure, ...] = ()
    measure: Callable
    read: Callable
    figure: Callable | None = None
    seed_paper: str = ""
    show: Callable[[dict], dict] | None = None
    execute: Callable | None = None
    kinds: tuple[str, ...] = ()
    choices: dict = field(default_factory=dict)

    def columns(self, cell: dict) -> dict:
        """A cell as its table shows it: column → text (`show`, else one column per axis)."""
        if self.show is not None:
            return self.show(cell)
        return {k: f"{v:g}" if isinstance(v, float) else str(v) for k, v in cell.items()}

    def cells(self, vary: dict | None = None) -> list[dict]:
        """Every cell (axis → value) of the grid, in the axes' order; ``vary`` replaces an axis's values. Cells
        that set the same fields are one (DP-SGD under every correlated family), written in a canonical form:
        an axis whose value changes nothing takes its first default value."""
        axes = self.axis_values(vary)
        out, seen = [], set()
        for values in itertools.product(*axes.values()):
            cell = self.canonical(dict(zip(axes, values)))
            same = self._identity(cell)
            if same not in seen:
                seen.add(same)
                out.append(cell)
        return out

    def _identity(self, cell: dict) -> str:
        return json.dumps([self.fields(cell), [cell[k] for k in self.kinds]], sort_keys=True, default=str)

    def canonical(self, cell: dict) -> dict:
        """``cell`` with each axis that changes none of its fields set to the axis's first default value."""
        out = dict(cell)
        for axis, defaults in self.axes.items():
            if axis in self.kinds or out.get(axis) == defaults[0]:
                continue
            other = {**out, axis: defaults[0]}
            try:
                if self._identity(other) == self._identity(out):
                    out = other
            except (TypeError, ValueError, KeyError):
                continue
        return out

    def axis_values(self, vary: dict | None = None) -> dict[str, tuple]:
        """The axes with ``vary``'s values in place of the defaults. An unknown axis, a value of the wrong kind
        (text for a number, a fraction for a count) or outside the axis's `choices` is a `ConfigError` naming
        ``vary``."""
        for k, v in (vary or {}).items():
            if k not in self.axes:
                raise ConfigError("vary", f"one of this study's axes ({', '.join(self.axes)})", k)
            if not v:
                raise ConfigError("vary", f"at least one value for {k}", "none")
            for x in v:
                _check_value(k, x, self.axes[k], self.choices.get(k))
        return {k: tuple((vary or {}).get(k, v)) for k, v in self.axes.items()}

    def measure_named(self, name: str) -> Measure:
        return next(m for m in self.measures if m.name == name)

    @property
    def private(self) -> bool:
        """Whether any of its numbers is a statistic of private data that ε does not cover."""
        return any(m.private for m in self.measures)


def _check_value(axis: str, value, defaults: tuple, choices) -> None:
    """One value ``--vary`` gives an axis: a number where the axis holds numbers (a whole one where it holds
    counts), one of ``choices`` where the axis declares them."""
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    if all(number(d) for d in defaults):
        whole = all(isinstance(d, int) for d in defaults)
        if not number(value) or whole and float(value) != int(value):
            raise ConfigError("vary", f"{'whole numbers' if whole else 'numbers'} for {axis}", value)
    elif choices is not None and value not in choices:
        raise ConfigError("vary", f"values of {axis} among {', '.join(map(str, choices))}", value)


def cell_key(cell: dict) -> str:
    """A cell's identity: its axis values as canonical JSON (numbers as floats, so 1 and 1.0 are one cell)."""
    return json.dumps({k: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
                       for k, v in sorted(cell.items())}, sort_keys=True)


def parse_value(text: str):
    """A value given on the command line: a number where it reads as one, else the text."""
    try:
        number = float(text)
    except ValueError:
        return text
    return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number


def parse_sets(items) -> dict:
    """``FIELD=VALUE`` words → {field: value} (JSON values as such, anything else as text); a word that is not
    FIELD=VALUE with FIELD a `RunConfig` field is a `ConfigError` naming ``set``. A bad value is refused when the
    study plans its runs, before anything trains."""
    from dpviz.config import RunConfig

    out = {}
    for item in items or ():
        name, eq, value = item.partition("=")
        if not eq or name not in RunConfig.__dataclass_fields__:
            raise ConfigError("set", "FIELD=VALUE with FIELD a RunConfig field", item)
        try:
            out[name] = json.loads(value)
        except ValueError:
            out[name] = value
    return out
