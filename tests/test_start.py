"""What a run imports, and when: the privacy check's end (dp_accounting's PLD accountant, ≈ 1 s on a CPU) is
imported beside the training steps, in a daemon thread, not after the last step; what torch.optim's first optimizer
imports (torch._dynamo, 1.2–1.6 s) is imported beside the run's preparation."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.subprocess  # a fresh process: nothing imported yet

CHILD = r"""
import json, sys, threading
from dpviz.privacy import check
from dpviz.runtime import imports
before = [m for m in check._ENDING if m in sys.modules]
check.prefetch()
thread = imports._PREFETCHING[check._ENDING]
check.prefetch()  # a second call starts nothing more
again = imports._PREFETCHING[check._ENDING] is thread and threading.active_count() <= 2
thread.join(120)
print(json.dumps({"before": before, "after": [m for m in check._ENDING if m in sys.modules], "again": again,
                  "daemon": thread.daemon, "name": thread.name}))
"""

PREPARED = r"""
import json, sys, tempfile
from dpviz.config import RunConfig
from dpviz.runtime import imports
from dpviz.training import prepare
before = "torch._dynamo" in sys.modules
prep = prepare.prepare(RunConfig(epochs=1).fixed_rates(), cache_dir=sys.argv[1], with_curve=False)
thread = imports._PREFETCHING[imports.OPTIMIZERS]
thread.join(120)
print(json.dumps({"before": before, "name": thread.name, "after": "torch._dynamo" in sys.modules}))
"""


def test_the_checks_end_is_imported_beside_the_steps():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["before"] == [] and got["after"] == ["dp_accounting.dp_event", "dp_accounting.pld.pld_privacy_accountant",
                                                     "scipy.special"]
    assert got["again"] and got["daemon"] and got["name"] == "dpviz-prefetch-check"


def test_what_the_first_optimizer_imports_is_imported_beside_the_preparation(cache_dir):
    """A fresh process that imports dpviz has not imported torch._dynamo; preparing a run starts importing it in a
    daemon thread, so the run's first optimizer (torch.optim's methods import it on their first call) finds it."""
    done = subprocess.run([sys.executable, "-c", PREPARED, str(cache_dir)], capture_output=True, text=True, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"before": False, "name": "dpviz-prefetch-optimizers", "after": True}
