import json
import math

import pytest

from dpviz.config import RunConfig, load_config_file
from dpviz.errors import ConfigError


def test_hash_is_stable_and_ignores_device_only():
    a, b = RunConfig(), RunConfig(device="cpu")
    assert a.hash() == b.hash() == RunConfig().hash()
    assert RunConfig(epsilon=2.0).hash() != a.hash()
    assert RunConfig(seed=1).hash() != a.hash()
    assert len(a.hash()) == 16


def test_canonical_json_round_trips_and_is_sorted():
    c = RunConfig(strategy="fft", epsilon="inf", lr_ft=0.05)
    text = c.to_json()
    d = json.loads(text)
    assert list(d) == sorted(d)
    assert d["epsilon"] == "inf"
    back = RunConfig.from_dict(d)
    assert back == c and math.isinf(back.epsilon) and not back.private
    assert back.hash() == c.hash()


def test_strings_from_flags_are_coerced():
    c = RunConfig(epsilon="2", batch_size="128", lp_fraction="0.25")
    assert (c.epsilon, c.batch_size, c.lp_fraction) == (2.0, 128, 0.25)


@pytest.mark.parametrize("suffix,text", [
    (".json", '{"strategy": "lp", "epsilon": 4, "seed": 3}'),
    (".toml", 'strategy = "lp"\nepsilon = 4.0\nseed = 3\n'),
    (".toml", '[run]\nstrategy = "lp"\nepsilon = 4\nseed = 3\n'),
])
def test_config_files(tmp_path, suffix, text):
    p = tmp_path / f"c{suffix}"
    p.write_text(text)
    c = RunConfig.from_file(p)
    assert (c.strategy, c.epsilon, c.seed) == ("lp", 4.0, 3)


@pytest.mark.parametrize("kw,field", [
    (dict(epsilon=0), "epsilon"), (dict(epsilon=-1), "epsilon"), (dict(epsilon="abc"), "epsilon"),
    (dict(delta=0), "delta"), (dict(delta=1.5), "delta"),
    (dict(lp_fraction=1.2), "lp_fraction"), (dict(lp_fraction=-0.1), "lp_fraction"),
    (dict(strategy="magic"), "strategy"), (dict(accountant="zcdp"), "accountant"),
    (dict(batch_size=0), "batch_size"), (dict(epochs=1.5), "epochs"), (dict(clip_norm=0), "clip_norm"),
    (dict(dataset="cifar10"), "data_dir"), (dict(backbone="resnet18"), "weights"),
    (dict(tune_blocks=0), "tune_blocks"), (dict(device="tpu"), "device"),
])
def test_bad_values_name_their_field(kw, field):
    with pytest.raises(ConfigError) as e:
        RunConfig(**kw)
    assert e.value.field == field
    assert str(e.value).startswith(field + ":") and "\n" not in str(e.value)


def test_unknown_field_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="colour"):
        RunConfig.from_dict({"colour": 1})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="config"):
        load_config_file(bad)
    with pytest.raises(ConfigError, match="config"):
        load_config_file(tmp_path / "missing.toml")
