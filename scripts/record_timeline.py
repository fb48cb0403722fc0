"""Record a run's progress timeline for the time-left test (`tests/test_estimates.py`).

Trains one run of a task's preset (seed 101) in a fresh store after two runs of the same setting (seeds 99 and
100; the first warms the process up), whose step times are the prior `dpviz.jobs.eta.prior` reads, and writes every progress report's (step, seconds
since the start) and the moment the run returned: what a page or the command line sees, and when the answer
came. Run it on a quiet machine, as a user would train:

    python scripts/record_timeline.py tests/fixtures/timeline_default.json --task default
    python scripts/record_timeline.py tests/fixtures/timeline_default_fft.json --task default --set strategy=fft
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dpviz  # noqa: E402
from dpviz import tasks  # noqa: E402
from dpviz.jobs import eta  # noqa: E402
from dpviz.store import Store  # noqa: E402


def record(task: str, fields: dict) -> dict:
    store = Store(tempfile.mkdtemp(prefix="dpviz-timeline-"))
    for seed in (99, 100):  # the first run of a process warms it up (allocations, lazy imports): not a pace
        dpviz.run(tasks.config(task, **fields, seed=seed), store=store)
    cfg = tasks.config(task, **fields, seed=101)
    prior, marks, plan = eta.prior(store, cfg), [], []
    t0 = time.time()

    def progress(step, total, last):
        plan[:] = plan or last.get("plan") or []
        marks.append([step, round(time.time() - t0, 4)])

    dpviz.run(cfg, store=store, progress=progress)
    return {"config": cfg.to_dict(), "end": round(time.time() - t0, 4), "plan": plan, "eval_every": cfg.eval_every,
            "prior": prior, "marks": marks,
            "recorded": {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"),
                         "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores"}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--task", default="default")
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE")
    a = p.parse_args()
    fields = dict(kv.split("=", 1) for kv in a.set)
    fields = {k: json.loads(v) if v[:1].isdigit() else v for k, v in fields.items()}
    doc = record(a.task, fields)
    Path(a.out).write_text(json.dumps(doc, indent=None) + "\n")
    print(a.out, doc["end"], len(doc["marks"]), doc["plan"], doc["prior"])


if __name__ == "__main__":
    main()
