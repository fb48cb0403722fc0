"""A training process keeps the buffers its steps free (`dpviz.runtime.memory`): measured by page faults in a
fresh process, where glibc's thresholds are still its defaults, over the built-in CNN's DP step at B = 256; a
user's own setting wins."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc")]

CHILD = r"""
import json, resource, sys
import torch
from torch import nn
from dpviz.runtime import memory
kept = memory.keep_freed_memory() if sys.argv[1] == "keep" else None
from dpviz.models.cnn import SmallCNN
from dpviz.privacy import dpsgd
torch.manual_seed(0)
model = nn.Sequential(*SmallCNN(1).blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
x, y = torch.randn(256, 1, 16, 16), torch.randint(0, 10, (256,))
stepper, gen = dpsgd.Stepper(model, "bk"), torch.Generator().manual_seed(0)
step = lambda: dpsgd.private_step(stepper, x, y, clip_norm=1.0, noise_multiplier=1.0, expected_batch=256.0,
                                  generator=gen)
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(json.dumps({"kept": kept, "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10}))
"""


def _child(mode: str, **env) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env})
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_process_that_keeps_its_freed_memory_stops_faulting_it_in():
    default, kept = _child("default"), _child("keep")
    assert kept["kept"] is True
    assert default["faults"] > 200  # pages faulted in again each DP step (measured: 1,500–2,400 a step)
    assert kept["faults"] < default["faults"] / 20


def test_the_users_own_allocator_setting_wins():
    assert _child("keep", MALLOC_TRIM_THRESHOLD_="131072")["kept"] is False
