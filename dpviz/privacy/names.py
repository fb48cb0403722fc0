"""How every surface names a run's noise mechanism: one helper for labels, tables, readings, captions, titles and
the command line, so that a BandMF run is never read as a DP-SGD one.

The mechanism's name says its bands ("BandMF b=4"); a caption adds its parts ("BandMF b=4, parts equal"). A label
names DP-SGD, the default, only beside a run of another mechanism (`named`), so DP-SGD runs keep short labels;
a table's column and a caption name it always. Imports nothing heavy: the command line prints with it.
"""

from __future__ import annotations

MECHANISM_NAMES = {"dp-sgd": "DP-SGD", "bandmf": "BandMF", "bandmf-momentum": "BandMF-momentum"}
"""The name each `RunConfig.mechanism` is printed with (a mechanism not listed: its own value)."""
DEFAULT = "dp-sgd"


def mechanism_of(c: dict) -> str:
    """The config's mechanism value (a config stored before the field existed: DP-SGD)."""
    return c.get("mechanism") or DEFAULT


def mechanism(c: dict, *, parts: bool = False) -> str:
    """The config ``c``'s mechanism as printed: "DP-SGD", "BandMF b=4"; with ``parts``, a banded one's parts too
    ("BandMF b=4, parts independent")."""
    m = mechanism_of(c)
    name = MECHANISM_NAMES.get(m, m)
    if m == DEFAULT:
        return name
    text = f"{name} b={c.get('bands', 1)}"
    return f"{text}, parts {c['parts']}" if parts and c.get("parts") else text


def key(c: dict) -> tuple:
    """What tells two configs' noise apart: the mechanism, its bands and its parts."""
    m = mechanism_of(c)
    return (m, c.get("bands", 1), c.get("parts")) if m != DEFAULT else (m,)


def mixed(configs) -> bool:
    """Whether ``configs`` differ in their noise mechanism (then every label names its own, DP-SGD too)."""
    return len({key(c) for c in configs}) > 1


def named(c: dict, always: bool = False) -> str:
    """The mechanism as a label says it: "" for DP-SGD unless ``always`` (runs of other mechanisms beside it)."""
    return mechanism(c) if always or mechanism_of(c) != DEFAULT else ""
