"""The strategy registry is the one list: what each strategy declares is real, and nothing else names them."""

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from dpviz import strategies
from dpviz.cli import build_parser
from dpviz.config import RunConfig
from dpviz.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {f.name for f in fields(RunConfig)}
MODULES = {c.__module__.rsplit(".", 1)[-1] for c in strategies.REGISTRY.values()}


def names_in(path: Path) -> tuple[set[str], set[str]]:
    """Modules imported by a source file, and its string constants."""
    tree = ast.parse(path.read_text())
    mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            mods |= {f"{n.module or ''}.{a.name}" for a in n.names} | {n.module or ""}
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return mods, strings


@pytest.mark.parametrize("path,allowed", [("dpviz/training/loop.py", set()), ("dpviz/training/prepare.py", set()),
                                          ("dpviz/config.py", {"lp-fft"})])  # config: only its default
def test_the_loop_and_config_name_no_strategy(path, allowed):
    mods, strings = names_in(ROOT / path)
    assert not {m for m in mods if m.split(".")[-1] in MODULES}, "imports a strategy module"
    assert strings & set(strategies.names()) <= allowed


@pytest.mark.parametrize("name", [n for n in strategies.names() if strategies.get(n).__module__.startswith("dpviz.")])
def test_each_declaration_is_real(name):
    cls = strategies.get(name)
    assert set(cls.fields()) <= FIELDS and set(cls.lr_fields) <= FIELDS and cls.lr_fields
    assert cls.color.startswith("#") and len(cls.color) == 7 and cls.label
    flags = {a.dest: a for a in build_parser()._subparsers._group_actions[0].choices["run"]._actions}
    for p in cls.params:  # the CLI shows each of its fields in the strategy's own group, with its help
        assert p.name in flags and (not p.help or p.help in flags[p.name].help)
        if p.kind == "choice":
            assert getattr(RunConfig(), p.name) in p.choices
        else:
            assert p.low <= getattr(RunConfig(), p.name) <= p.high


def test_colors_are_distinct_and_unknown_names_list_the_registry():
    assert len(set(strategies.colors().values())) == len(strategies.REGISTRY)
    with pytest.raises(ConfigError, match="strategy: one of " + ", ".join(strategies.names())):
        RunConfig(strategy="nope")
