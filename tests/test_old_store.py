"""A store written before the layering change answers its runs from the cache: cache keys, stored
configs and summaries are unchanged by the move of resolving "auto" above the run core.

`tests/data/store_before_layers/runs.sqlite` holds the `runs` rows of seven small runs (every strategy,
each accountant, no DP, explicit and "auto" rates) made by the commit before the change (metrics and
files dropped to keep it small); `requests.json` lists the request each was made from.
"""

import json
import shutil
from pathlib import Path

import pytest

from dpviz import runner
from dpviz.config import RunConfig
from dpviz.store import Store

OLD = Path(__file__).parent / "data" / "store_before_layers"
REQUESTS = json.loads((OLD / "requests.json").read_text())


@pytest.fixture
def old_store(tmp_path):
    shutil.copy(OLD / "runs.sqlite", tmp_path / "runs.sqlite")
    return Store(tmp_path)


@pytest.mark.parametrize("made", REQUESTS, ids=[r["request"]["strategy"] for r in REQUESTS])
def test_the_same_request_is_answered_from_the_old_store(made, old_store):
    """The request resolves to the same config hash as then, and is answered without training."""
    hit = runner.cached(RunConfig(**made["request"]), store=old_store)
    assert hit is not None, f"{made['request']} no longer finds its run {made['run_id']}"
    assert hit["run_id"] == made["run_id"] and hit["config_hash"] == made["config_hash"]
    assert hit["cached"] is True and hit["test_accuracy"] == made["test_accuracy"]


def test_every_old_row_reads_back_as_a_valid_config(old_store):
    """Stored configs load under today's rules (a field the strategy ignores is reset, never an error)."""
    for run in old_store.list_runs():
        cfg = RunConfig.from_dict(run["config"], reset_unread=True)
        assert cfg.hash() == run["config_hash"]
