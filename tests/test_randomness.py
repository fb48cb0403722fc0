"""Where a run's private draws come from (`dpviz.privacy.randomness`), BandMF's parts (`RunConfig.parts`) and the
privacy check's switch: new fields that leave every stored run's key and meaning as they were."""

import json

import pytest
import torch

from dpviz import RunConfig
from dpviz.errors import ConfigError
from dpviz.privacy import bandmf, randomness, release
from dpviz.store.checks import legacy_parts


def test_stored_keys_keep_their_meaning():
    """Keys of configurations stored before these fields (read off the code before they existed)."""
    assert RunConfig().hash() == "1e34406b82fa3d06"
    assert RunConfig(mechanism="bandmf", bands=4, parts="equal").hash() == "df8f269d1cee5f9f"
    assert RunConfig(mechanism="bandmf", bands=4).hash() != "df8f269d1cee5f9f"  # independent: another mechanism
    assert RunConfig(randomness="secure").hash() != RunConfig().hash()
    assert RunConfig(privacy_check=0).hash() == RunConfig().hash()  # the check decides nothing computed
    assert RunConfig(parts="equal").hash() == RunConfig().hash()  # parts mean nothing at b = 1


def test_a_bandmf_run_stored_before_parts_reads_as_an_equal_split():
    old = {k: v for k, v in RunConfig(mechanism="bandmf", bands=4).to_dict().items() if k != "parts"}
    legacy_parts(old)
    assert old["parts"] == "equal"
    assert RunConfig.from_dict(old).hash() == "df8f269d1cee5f9f"
    assert release.statement({"config": old})["neighbours"] == "zero-out"
    dpsgd_run = {k: v for k, v in RunConfig().to_dict().items() if k != "parts"}
    legacy_parts(dpsgd_run)
    assert "parts" not in dpsgd_run


def test_bad_values_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="randomness: one of seeded, secure"):
        RunConfig(randomness="urandom")
    with pytest.raises(ConfigError, match="parts: one of independent, equal"):
        RunConfig(mechanism="bandmf", bands=2, parts="split")
    with pytest.raises(ConfigError, match=r"privacy_check: must be an integer in \[0, 64\]"):
        RunConfig(privacy_check=-1)


def test_seeded_streams_repeat_and_secure_ones_do_not():
    assert randomness.seeds(randomness="seeded", seed=7) == {"sampling": 7, "noise": 8, "parts": 10}
    a, b = randomness.seeds(randomness="secure", seed=7), randomness.seeds(randomness="secure", seed=7)
    assert a != b and all(0 <= v < 2**63 for v in a.values())
    assert randomness.line("seeded") == randomness.SEEDED_LINE
    assert "not private against anyone who holds this configuration" in randomness.SEEDED_LINE


def test_independent_parts_move_no_other_record_when_one_is_added():
    """The add-or-remove neighbour: with independent parts, a record added at the end leaves every other record's
    part where it was; an equal split of a permutation moves most of them."""
    n, b = 1000, 4
    ind, ind_plus = bandmf.parts(n, b, 3, "independent"), bandmf.parts(n + 1, b, 3, "independent")
    assert torch.equal(ind, ind_plus[:n])
    eq, eq_plus = bandmf.parts(n, b, 3, "equal"), bandmf.parts(n + 1, b, 3, "equal")
    assert (eq != eq_plus[:n]).float().mean() > 0.5
    assert bandmf.neighbours(bands=4, parts="independent") == "add-or-remove"
    assert bandmf.neighbours(bands=4, parts="equal") == "zero-out"
    assert bandmf.neighbours(bands=1, parts="equal") == "add-or-remove"


def test_the_statement_says_what_epsilon_does_not_cover():
    s = release.statement({"config": json.loads(json.dumps(RunConfig().to_dict()))})
    assert s["neighbours"] == "add-or-remove" and s["randomness"] == "seeded"
    assert any("regenerates" in x for x in s["not_covered"])
    assert release.metric_label("clip_fraction") == "clip_fraction (not covered by ε)"
    assert release.metric_label("step_ms") == "step_ms"
    secure = release.statement({"config": RunConfig(randomness="secure").to_dict()})
    assert not any("regenerates" in x for x in secure["not_covered"])
