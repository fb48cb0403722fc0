"""Where a real-vision run's time goes, outside its training loop and in it: the real-vision small run
(``python -m dpviz run --preset real-vision --strategy fft --epsilon 8 --train-size 1000 --batch-size 64 --epochs 1
--lr-ft 0.005``) under cProfile, in a fresh process, on a store that already holds the backbone's kept network (a
first run builds it, unprofiled), as a user's second run meets it.

Prints and records the wall time of each part: the imports (torch, timm, transformers, scipy, dp_accounting,
Opacus), the run's preparation (data, backbone, calibration) and, in the loop, the first step, the evaluations,
the checkpoints' feature passes and the privacy check; "outside the loop" is the command's wall time less the
summary's ``wall_time_s``, timed in an unprofiled third run. cProfile inflates Python-heavy parts, so the parts
are shares to compare, and the unprofiled row is the figure.
Usage: python bench/profile_start.py [--device cpu|cuda] [--data-dir DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results import ROOT, record

RUN = ["--preset", "real-vision", "--strategy", "fft", "--epsilon", "8", "--train-size", "1000", "--batch-size",
       "64", "--epochs", "1", "--lr-ft", "0.005", "--json"]
PARTS = {  # part: (file suffix, function name) whose cumulative time it is
    "import torch": ("torch/__init__.py", "<module>"),
    "import timm": ("timm/__init__.py", "<module>"),
    "import transformers": ("transformers/__init__.py", "<module>"),
    "import scipy.stats": ("scipy/stats/__init__.py", "<module>"),
    "import dp_accounting": ("dp_accounting/__init__.py", "<module>"),
    "import opacus": ("opacus/__init__.py", "<module>"),
    "prepare (data, backbone, calibration)": ("dpviz/training/prepare.py", "prepare"),
    "  the backbone": ("dpviz/training/prepare.py", "build_backbone"),
    "  σ's calibration": ("dpviz/training/calibration.py", "calibrated_phases"),
    "the training loop": ("dpviz/training/loop.py", "train"),
    "  evaluations": ("dpviz/training/loop.py", "evaluate"),
    "  checkpoints' feature passes": ("dpviz/training/loop.py", "checkpoint"),
    "  the privacy check's replays": ("dpviz/privacy/check.py", "before_step"),
    "  the privacy check's outcome": ("dpviz/training/loop.py", "privacy_check"),
}


PROFILED = ("import cProfile, os, sys\n"
            "profile = cProfile.Profile()\n"
            "profile.enable()\n"
            "from dpviz.cli import main\n"
            "code = main(sys.argv[2:])\n"
            "profile.disable()\n"
            "profile.dump_stats(sys.argv[1])\n"
            "sys.stdout.flush()\n"
            "os._exit(code or 0)  # as python -m dpviz ends: no interpreter teardown\n")


def run(args: list[str], env: dict, profile: Path | None = None) -> tuple[float, dict]:
    """(the command's wall seconds, its summary) for ``python -m dpviz run`` in a child process (under cProfile,
    its whole command from the first import on, where ``profile`` names the file to write)."""
    cmd = ([sys.executable, "-c", PROFILED, str(profile), "run", *args] if profile
           else [sys.executable, "-m", "dpviz", "run", *args])
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    return time.perf_counter() - t0, json.loads(done.stdout[done.stdout.index("{"):])


def cumulative(path: Path) -> dict[str, float]:
    """Each part's cumulative seconds in the profile (0 where it did not run)."""
    stats = pstats.Stats(str(path)).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    out = {}
    for part, (suffix, name) in PARTS.items():
        out[part] = max((v[3] for (f, _, n), v in stats.items() if n == name and f.endswith(suffix)), default=0.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--data-dir", help="Fashion-MNIST's four files (default: Debian's dataset-fashion-mnist)")
    ap.add_argument("--out", help="a folder for the profile (start.prof); default: a temporary one")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="dpviz-start-"))
    out.mkdir(parents=True, exist_ok=True)
    store = Path(tempfile.mkdtemp(prefix="dpviz-start-store-"))
    if (ROOT / "cache" / "backbones").is_dir():  # the built-in backbones, as a user's store holds them
        subprocess.run(["cp", "-r", str(ROOT / "cache" / "backbones"), str(store)], check=True)
    env = {**os.environ, "DPVIZ_CACHE_DIR": str(store), "DPVIZ_BACKGROUND_ANALYSES": "off",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    base = RUN + ["--device", args.device] + (["--data-dir", args.data_dir] if args.data_dir else [])
    run(base + ["--seed", "1"], env)  # the first run keeps the backbone's network; nothing of it is timed
    profiled_wall, summary = run(base + ["--seed", "2"], env, out / "start.prof")
    wall, plain = run(base + ["--seed", "3"], env)
    parts = cumulative(out / "start.prof")
    rows = [["the command, unprofiled", f"{wall:.2f} s"],
            ["  outside the training loop", f"{wall - plain['wall_time_s']:.2f} s"],
            ["  the training loop (wall_time_s)", f"{plain['wall_time_s']:.2f} s"],
            ["  of it, the privacy check", f"{plain.get('privacy_check', {}).get('seconds', 0):.2f} s"],
            ["the command, under cProfile", f"{profiled_wall:.2f} s"],
            *[[part, f"{seconds:.2f} s"] for part, seconds in parts.items()]]
    for r in rows:
        print(f"{r[0]:40s} {r[1]}", flush=True)
    device = "cpu" if args.device == "cpu" else "cuda"
    record(f"start_{device}", title=f"Where a real-vision run's time goes ({device})", columns=["part", "time"],
           rows=rows, notes="the real-vision small run, its backbone's network kept by a first run; the first four "
                            "rows unprofiled, the rest cumulative times under cProfile (shares to compare)")


if __name__ == "__main__":
    main()
