"""A run on a shared machine: its training time alone, beside a CPU burner on each core, and beside a second
identical run at once, as ratios to alone — under libgomp's own spin (what a process got before dpviz set
its wait policy) and under dpviz's default (`dpviz.runtime.threads`), side by side in one run.

    python bench/bench_contention.py              # the default CNN run, a real-text DP-LP run, a dashboard job
    python bench/bench_contention.py --only cnn   # one workload

Each figure is the run summary's ``wall_time_s`` (the training loop; loading and calibration excluded), the
median over ``--repeats``; every run is a fresh process (``--force``) on one throwaway store. Nothing else
should run meanwhile: the burners are the only load this measures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORES = os.cpu_count() or 1
# The repository first, then whatever the caller's PYTHONPATH already holds (packages installed beside it).
PYTHONPATH = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)

# GOMP_SPINCOUNT=300000 is libgomp's default: set explicitly, it stands against dpviz's setdefault.
POLICIES = {"libgomp default": {"GOMP_SPINCOUNT": "300000"}, "dpviz default": {}}

CLI = [sys.executable, "-m", "dpviz", "--cache-dir", "{store}", "run", "--force", "--json", "--quiet"]
# One dashboard job: the dashboard's JobManager (its two workers, their torch threads, its analysis threads)
# training the default config; "pair" submits a second identical one beside it (force: a second job).
JOB = """
import json, sys, time
import dpviz
from dashboard.state import MAX_WORKERS
from dpviz.jobs import JobManager
from dpviz.config import RunConfig
jm = JobManager(sys.argv[1], max_workers=MAX_WORKERS)
jobs = [jm.submit(RunConfig(), force=True) for _ in range(int(sys.argv[2]))]
print(json.dumps([j.wait()["wall_time_s"] for j in jobs]))
jm.shutdown(cancel=False)
"""

WORKLOADS = {
    "cnn": ("default CNN run (python -m dpviz run)", CLI),
    "text": ("real-text DP-LP run (--preset real-text --strategy lp)", CLI + ["--preset", "real-text",
                                                                          "--strategy", "lp"]),
    "job": ("one dashboard job (the default config, JobManager as the dashboard holds it)",
            [sys.executable, "-c", JOB, "{store}"]),
}


def times(cmd: list[str], env: dict, store: str, pair: bool) -> list[float]:
    """Training seconds of ``cmd`` (two at once when ``pair``)."""
    argv = [a.replace("{store}", store) for a in cmd]
    if cmd[1] == "-c":  # the dashboard job: the pair is two jobs of one server
        out = subprocess.run(argv + ["2" if pair else "1"], env=env, capture_output=True, text=True, cwd=ROOT)
        if out.returncode:
            raise RuntimeError(out.stderr[-2000:])
        return json.loads(out.stdout.strip().splitlines()[-1])
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2 if pair else 1)]
    outs = [p.communicate() for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode:
            raise RuntimeError(err[-2000:])
    return [json.loads(out)["wall_time_s"] for out, _ in outs]


def burners() -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(CORES)]


def measure(cmd, policy: dict, store: str, repeats: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    env.update(policy, PYTHONPATH=PYTHONPATH, DPVIZ_BACKGROUND_ANALYSES="off")
    out = {"alone": [], "burners": [], "pair": []}
    for _ in range(repeats):
        out["alone"] += times(cmd, env, store, pair=False)
        hogs = burners()
        try:
            out["burners"] += times(cmd, env, store, pair=False)
        finally:
            for h in hogs:
                h.kill()
        out["pair"] += times(cmd, env, store, pair=True)
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=WORKLOADS, nargs="*", default=list(WORKLOADS))
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    # A `timeout` or kill ends the benchmark through its `finally` blocks, so no burner outlives it (orphaned
    # burners would load every later measurement on the machine).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"# {CORES} cores; load average before: {os.getloadavg()[0]:.2f}; medians of {a.repeats} repeat(s)")
    print(f"{'workload':<58} {'policy':<16} {'alone s':>8} {'burners':>8} {'pair':>8}")
    with tempfile.TemporaryDirectory() as store:
        for name in a.only:
            label, cmd = WORKLOADS[name]
            warm = {**os.environ, "PYTHONPATH": PYTHONPATH, "DPVIZ_BACKGROUND_ANALYSES": "off"}
            times(cmd, warm, store, pair=False)  # warm: tokens, backbones
            for policy, env in POLICIES.items():
                m = measure(cmd, env, store, a.repeats)
                print(f"{label[:58]:<58} {policy:<16} {m['alone']:>8.2f} {m['burners'] / m['alone']:>7.2f}× "
                      f"{m['pair'] / m['alone']:>7.2f}×", flush=True)


if __name__ == "__main__":
    main()
