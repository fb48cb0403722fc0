"""The everyday command-line paths, timed as a user takes them: a fresh `python -m dpviz` process each.

1. first `run --json` on a fresh store (the default config; the shipped backbone, or pretraining when
   the recipe changed);
2. `run --strategy fft --epsilon 8 --json` with the backbone cached: the command's wall time beside the
   training loop's own (`wall_time_s` of the summary), and what the command adds on top;
3. the same command answered from the cache;
4. a training command as a person watches it (no --quiet): its first line on the terminal, and its exit after the
   answer is printed.
Each path is timed ``--tries`` times on fresh stores; the table gives the median and the range.
The dashboard's first page is `bench/bench_dashboard.py`; the suite's time is `bash .ci/run` on a clone.
Usage: python bench/bench_paths.py [--tries 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from results import record  # noqa: E402


def dpviz(cache: Path, *args: str) -> tuple[float, dict]:
    """(seconds, JSON summary) of one ``python -m dpviz --cache-dir cache run … --json`` process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "dpviz", "--cache-dir", str(cache), "run", *args, "--json",
                          "--quiet"], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    return time.perf_counter() - t0, json.loads(out.stdout)


def watch(cache: Path, *args: str) -> tuple[float, float]:
    """(seconds to the first line on the terminal, seconds from the last line of the answer to the exit) of one
    ``python -m dpviz run …`` as a person runs it: progress on stderr, the answer on stdout."""
    import selectors

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "dpviz", "--cache-dir", str(cache), "run", *args], env=env, cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    sel.register(p.stderr, selectors.EVENT_READ)
    first = answered = None
    while sel.get_map():
        for key, _ in sel.select():
            chunk = key.fileobj.read1(65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            now = time.perf_counter() - t0
            first = first if first is not None else now
            if key.fileobj is p.stdout:
                answered = now
    p.wait()
    if p.returncode:
        raise SystemExit(f"dpviz run failed with {p.returncode}")
    return first, time.perf_counter() - t0 - answered


def settle(cache: Path) -> None:
    """Wait for the detached background analyses of ``cache``'s runs (`cli.runs` starts them at low priority):
    timed alone, the next command measures the command, not its share of two cores."""
    time.sleep(1.0)
    while subprocess.run(["pgrep", "-f", f"{cache}.*analyze all"], capture_output=True).returncode == 0:
        time.sleep(0.5)


def row(name: str, secs: list[float], goal: str, extra: str = "") -> list[str]:
    return [name, f"{statistics.median(secs):.2f} s ({min(secs):.2f}–{max(secs):.2f}){extra}", goal]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tries", type=int, default=3)
    a = ap.parse_args()
    first, fft, loop, cached, said, gone = [], [], [], [], [], []
    for _ in range(a.tries):
        cache = Path(tempfile.mkdtemp(prefix="dpviz-bench-"))
        try:
            first.append(dpviz(cache)[0])
            settle(cache)
            t, s = dpviz(cache, "--strategy", "fft", "--epsilon", "8")
            fft.append(t)
            loop.append(s["wall_time_s"])
            settle(cache)
            t, s = dpviz(cache, "--strategy", "fft", "--epsilon", "8")
            assert s["cached"]
            cached.append(t)
            settle(cache)
            line, exit_after = watch(cache, "--strategy", "fft", "--epsilon", "8", "--seed", "1")
            said.append(line)
            gone.append(exit_after)
            settle(cache)  # before rm
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    over = [t - w for t, w in zip(fft, loop)]
    columns = ["path", "measured (median, range)", "goal"]
    rows = [row("first `run --json` on a fresh store", first, "≤ 6 s"),
            row("`run --strategy fft --epsilon 8 --json`, backbone cached", fft, "≤ training loop + 2 s",
                f"; training loop {statistics.median(loop):.2f} s, command − loop {statistics.median(over):.2f} s"),
            row("the same command answered from the cache", cached, "≤ 0.3 s"),
            row("a training command's first line on the terminal", said, "≤ 2 s"),
            row("a training command's exit after its answer", gone, "≤ 2 s")]
    print("| " + " | ".join(columns) + " |\n|---|---|---|")
    print("\n".join("| " + " | ".join(r) + " |" for r in rows))
    record("paths", title="Everyday command-line paths", columns=columns, rows=rows,
           notes=f"Each path a fresh `python -m dpviz` process, {a.tries} tries on fresh stores; each command "
           "timed alone (the previous one's detached analyses finished first).")


if __name__ == "__main__":
    main()
