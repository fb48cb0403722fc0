"""A background job's run over several local processes: ``torchrun -m dpviz run`` in a child, watched through
the store (rank 0 writes it as any run; `dpviz.training.distributed`), started by the pool's one torchrun
launcher (`dpviz.runtime.pool.torchrun`: each rank with its share of the cores).

The job's thread resolves "auto" rates first (a search, if one must train, runs here and reports its trials
as in one process), writes the concrete config to a file, starts ``python -m torch.distributed.run
--nproc-per-node N -m dpviz run --config FILE --json``, and follows the run's row in the store for its id
and step. Cancelling sends the launcher SIGINT, which reaches every rank: rank 0 stores the run as
cancelled. Analyses of its checkpoints are not queued beside it (pages compute what they miss).
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
import warnings

from dpviz.errors import Cancelled
from dpviz.runtime import pool
from dpviz.runner import PrivacyBudgetWarning, resolved

FORCED = "dpviz: --force: "  # how `python -m dpviz run` prints what a forced run spends (`dpviz.cli.runs`)


def argv(cfg_file: str, cache_dir, force: bool) -> list[str]:
    """What each rank runs: ``python -m dpviz run`` on the concrete config, its summary as JSON."""
    return ["-m", "dpviz", "--cache-dir", str(cache_dir), "run", "--config", cfg_file, "--json", "--quiet",
            *(["--force"] if force else [])]


def run(job, store, *, force: bool, search_progress, started) -> dict:
    """Train ``job.cfg`` over ``job.processes`` processes; its summary (raises `Cancelled` or RuntimeError)."""
    cfg, auto = resolved(job.cfg, store, search_progress=search_progress, cancel=job.cancel_event)
    if job.cancel_event.is_set():
        raise Cancelled()
    since = time.time()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg.to_dict(), f)
    proc = pool.torchrun(argv(f.name, store.root, force), job.processes, env={"DPVIZ_BACKGROUND_ANALYSES": "off"})
    try:
        while proc.poll() is None:
            if job.cancel_event.is_set():
                proc.send_signal(signal.SIGINT)
            _follow(job, store, cfg.hash(), since, started)
            time.sleep(0.5)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        os.unlink(f.name)
    _say_forced(err)
    if job.cancel_event.is_set():
        raise Cancelled()
    if proc.returncode:
        tail = [line for line in err.strip().splitlines() if "error" in line.lower()] or err.strip().splitlines()
        raise RuntimeError(f"{job.processes} processes: {(tail or ['exit ' + str(proc.returncode)])[-1][:300]}")
    return {**json.loads(out[out.index("{"):]), **auto}


def _say_forced(err: str) -> None:
    """What rank 0 said of a forced run's budget (`dpviz.runner.Forced`, on its stderr), said again here as
    `runner.run` says it in one process: a `PrivacyBudgetWarning`."""
    for line in err.splitlines():
        if line.startswith(FORCED):
            warnings.warn(line[len(FORCED):], PrivacyBudgetWarning, stacklevel=3)


def _follow(job, store, config_hash: str, since: float, started) -> None:
    """The job's run id and step, from the newest run of its config that rank 0 created since ``since``
    (looked for until found, then read by its id)."""
    if job.run_id is None:
        runs = [r for r in store.list_runs(kind=None) if r["config_hash"] == config_hash
                and (r.get("created") or 0) >= since - 1]
        if not runs:
            return
        started(max(runs, key=lambda r: r.get("created") or 0)["run_id"])
    r = store.get_run(job.run_id)
    job.step, job.total_steps = r["step"] or 0, r["total_steps"]
