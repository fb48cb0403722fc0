"""What a run imports, and when: the privacy check's end (dp_accounting's PLD accountant, ≈ 1 s on a CPU) is
imported beside the training steps, in a daemon thread, not after the last step."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.subprocess  # a fresh process: nothing imported yet

CHILD = r"""
import json, sys, threading
from dpviz.privacy import check
before = [m for m in check._ENDING if m in sys.modules]
check.prefetch()
thread = check._prefetching
check.prefetch()  # a second call starts nothing more
again = check._prefetching is thread
thread.join(120)
print(json.dumps({"before": before, "after": [m for m in check._ENDING if m in sys.modules], "again": again,
                  "daemon": thread.daemon, "name": thread.name}))
"""


def test_the_checks_end_is_imported_beside_the_steps():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["before"] == [] and got["after"] == ["dp_accounting.dp_event", "dp_accounting.pld.pld_privacy_accountant",
                                                     "scipy.special"]
    assert got["again"] and got["daemon"] and got["name"] == "dpviz-check-imports"
