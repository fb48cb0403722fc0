"""A strategy's knobs are declared once (`dpviz.strategies.Param`): the config's default, the type text is
read as, the range check and the form's widget come from the declaration, and a knob is hashed only for the
strategies that read it unless stored runs already hold it."""

import dataclasses
import json

import pytest

from dpviz import RunConfig, strategies
from dpviz.config import HASHED_FOR_EVERY_STRATEGY
from dpviz.errors import ConfigError
from dpviz.fields import numeric_types
from dpviz.strategies import Param

KNOBS = strategies.knobs()
DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_a_knobs_default_and_type_are_its_declaration(name):
    p = KNOBS[name]
    assert DEFAULTS[name] == p.default
    assert numeric_types().get(name, str) is p.type
    assert isinstance(getattr(RunConfig(), name), p.type)


def _outside(p: Param):
    """A value just outside the declared range (or a choice that is none), and one at an allowed end."""
    if p.kind == "choice":
        return "no-such-choice", p.choices[0]
    lo, hi = p.valid or (p.low, p.high)
    step = 1 if p.kind == "int" else 1e-9
    bad = lo if p.bounds[0] == "(" else lo - step
    good = lo + step if p.bounds[0] == "(" else lo
    return bad, good


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_a_knobs_range_is_checked_as_declared(name):
    p = KNOBS[name]
    owner = next(s for s in strategies.REGISTRY.values() if name in s.fields())
    base = {"strategy": owner.name, **({"public_dataset": "synthetic"} if owner.name == "continual" else {})}
    bad, good = _outside(p)
    with pytest.raises(ConfigError) as e:
        RunConfig(**{**base, name: bad})
    assert e.value.field == name and p.allowed() in str(e.value)
    assert getattr(RunConfig(**{**base, name: good}), name) == good


def test_the_declared_range_decides_and_can_fail():
    p = Param(name="x", default=0.5, label="x", low=0.01, high=1.0, valid=(0, 1), bounds="(]", means="a share")
    assert p.holds(1.0) and p.holds(0.001) and not p.holds(0.0) and not p.holds(1.01)
    assert p.allowed() == "must be in (0, 1] (a share)"
    q = Param(name="k", default=1, label="k", kind="int", low=1, high=64, valid=(1, None))
    assert q.holds(10**6) and not q.holds(0) and q.allowed() == "must be an integer >= 1"


def _hashed(cfg: RunConfig) -> dict:
    return json.loads(cfg.to_json(hashed_only=True))


def test_a_knob_not_held_by_stored_runs_is_hashed_only_for_its_strategies():
    """Only the knobs stored runs were keyed with are hashed for every strategy; any other (lora_rank, and
    every knob declared from now on) is in the key of its own strategies' runs only."""
    assert HASHED_FOR_EVERY_STRATEGY == {"lp_fraction", "tune_blocks", "public_dataset", "switch_step",
                                         "switch_threshold", "switch_batch", "sparsity", "selection"}
    owner_only = set(KNOBS) - HASHED_FOR_EVERY_STRATEGY
    assert "lora_rank" in owner_only
    for cls in strategies.REGISTRY.values():
        cfg = RunConfig(strategy=cls.name, **({"public_dataset": "synthetic"} if cls.name == "continual" else {}))
        keys = set(_hashed(cfg))
        assert owner_only & set(cls.fields()) <= keys
        assert not (owner_only - set(cls.fields())) & keys, cls.name
