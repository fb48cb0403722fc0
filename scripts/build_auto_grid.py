"""Compute the shipped grid of "auto" learning rates from public data only (re-runnable, resumable).

For every built-in backbone × strategy × ε (× the strategy's `auto_axes`, e.g. the LP share of lp-fft)
it runs `dpviz.autotune.proxy`: a TPE search whose trials are DP runs of the default-task
configuration with the private digits replaced by the public glyphs. The best trial's rates become a
point of `dpviz/autotune/grid.json`; `autotune.resolve` interpolates between points in log ε.
Searches live in their own store (``--cache-dir``), so a rerun resumes where it stopped.

    python scripts/build_auto_grid.py                         # CNN, every strategy, the default grid
    python scripts/build_auto_grid.py --backbones vit --strategies lp fft lp-fft
    python scripts/build_auto_grid.py --task real-text --strategies lp fft lp-fft --epsilons 1 8 inf \
        --lp-fractions 0.3   # a real task's preset (dpviz.tasks), its public stand-in as the proxy
    python scripts/build_auto_grid.py --task real-text --scorecard --strategies lp-fft fft sparse continual \
        --epsilons 1 8 --lp-fractions 0.1 0.5 0.9   # the size the reproduction scorecard runs at
    python scripts/build_auto_grid.py --task real-text --scorecard --strategies sparse --epsilons 1 8 \
        --selections random magnitude   # sparse's fixed row selections (003-selection's baselines)
    python scripts/build_auto_grid.py --strategies lp fft lp-fft --mechanism bandmf --bands 4 --epsilons 1 8 \
        --lp-fractions 0.3   # BandMF's own rates (the key holds the mechanism and b)
    python scripts/build_auto_grid.py --task real-vision --scale large --strategies fft lp-fft --epsilons 1 8 \
        --lp-fractions 0.3   # a larger size of the scorecard (dpviz.reproduce.SCALES): its scale-sensitive claims' runs

An entry already in ``--out`` under the same key keeps its other points (`merge`): builds split by ε or
LP share, each with its own ``--cache-dir`` and ``--out``, combine by running each again with the shipped
grid as ``--out`` (their searches answer from their stores).
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from dpviz import strategies, tasks  # noqa: E402
from dpviz import autotune
from dpviz.config import RunConfig  # noqa: E402
from dpviz.reproduce import SCALES, size_fields  # noqa: E402

EPSILONS = ("0.5", "1", "2", "4", "8", "16", "inf")
AXES = {"lp_fraction": (0.1, 0.3, 0.5, 0.7, 0.9)}


def entry_for(backbone: str, strategy: str, epsilons, cache_dir: Path, log, task: str = "default",
              axes_values: dict = AXES, size: dict | None = None, extra: dict | None = None) -> dict:
    """Search every grid point of one (backbone, strategy) of ``task`` (``size``: fields over the task's, e.g.
    the scorecard's; ``extra``: strategy fields that are part of the key, e.g. sparse's selection) and
    return its grid entry."""
    axes = strategies.get(strategy).auto_axes
    points, key = [], None
    for eps, ax, cfg in grid_points(backbone, strategy, epsilons, task, axes_values, size, extra):
        fields = autotune.used_fields(cfg)
        key = key or json.loads(autotune.key_of(cfg))
        t0 = time.time()
        study, done = autotune.search(cfg, fields, cache_dir=cache_dir)
        best = autotune.best_trial(done)
        points.append({"epsilon": eps, **dict(zip(axes, ax)), "values": {f: best.params[f] for f in fields},
                       "proxy_accuracy": best.value, "study": study.study_name, "trials": len(done)})
        log(f"{backbone} {strategy} ε={eps} {dict(zip(axes, ax))}: {points[-1]['values']} "
            f"({autotune.proxy_for(cfg.dataset)} acc {best.value:.3f}, {time.time() - t0:.0f} s)")
    return {"key": key, "backbone": cfg.backbone, "strategy": strategy, "axes": list(axes), "task": task,
            **({"size": size} if size else {}),
            "proxy": autotune.proxy_for(cfg.dataset), "trials": autotune.trials_for(fields), "points": points}


def merge(entries: list[dict], new: dict) -> list[dict]:
    """The grid's ``entries`` with ``new`` merged in: an entry of the same key keeps its points at other
    coordinates (ε and the axes) and takes ``new``'s where they meet, so builds split by ε or LP share
    (two processes of one thread each, or a later ``--epsilons``) add up instead of replacing each other."""
    def at(p):
        return (float(p["epsilon"]), *(p[a] for a in new["axes"]))

    old = next((x for x in entries if x["key"] == new["key"]), None)
    points = {at(p): p for p in (old or {}).get("points", [])}
    points.update({at(p): p for p in new["points"]})
    merged = {**new, "points": [points[k] for k in sorted(points)]}
    return [x for x in entries if x["key"] != new["key"]] + [merged]


def grid_points(backbone: str, strategy: str, epsilons, task: str, axes_values: dict, size: dict | None,
                extra: dict | None) -> list[tuple]:
    """(ε as given, the axes' values, the config) of each grid point of one (backbone, strategy)."""
    axes = strategies.get(strategy).auto_axes
    base = {"backbone": backbone} if task == "default" else {}  # a real task's preset brings its backbone
    base.update(size or {}, **(extra or {}))
    return [(eps, ax, tasks.config(task, **{**base, "strategy": strategy, "epsilon": eps, **dict(zip(axes, ax))}))
            for eps, *ax in itertools.product(epsilons, *(axes_values[a] for a in axes))]


def in_parallel(runs, a, size) -> None:
    """Create every point's search (nothing trains), then run all their trials in ``a.workers`` worker
    processes of one thread each; `entry_for` then reads each search from the store."""
    import subprocess

    names = [autotune.search(cfg, autotune.used_fields(cfg), cache_dir=Path(a.cache_dir), run=False)[0].study_name
             for backbone, strategy, extra in runs
             for _, _, cfg in grid_points(backbone, strategy, a.epsilons, a.task, {"lp_fraction": tuple(a.lp_fractions)},
                                          size, extra)]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped (e.g. by `timeout`): stop the workers too
    for name in names:  # this build's searches only, one after another, each over all the workers
        cmd = [sys.executable, "-m", "dpviz", "--cache-dir", a.cache_dir, "worker", "--threads", "1", "--study", name]
        procs = [subprocess.Popen(cmd) for _ in range(a.workers)]
        try:
            failed = sum(p.wait() != 0 for p in procs)
        finally:
            for p in procs:
                if p.poll() is None:  # their trials are left interrupted; a rerun resumes them
                    p.terminate()
        print(f"{name}: {a.workers} workers ran its trials ({failed} failed)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="default", choices=list(tasks.TASKS),
                   help="the task whose preset the searches tune (a real task fixes its own backbone)")
    p.add_argument("--backbones", nargs="+", default=["cnn"])
    p.add_argument("--lp-fractions", nargs="+", type=float, default=list(AXES["lp_fraction"]),
                   help="lp-fft's LP-share axis (a real task: its default alone keeps the build short)")
    p.add_argument("--strategies", nargs="+", default=["lp", "fft", "lp-fft", "partial", "continual", "sparse",
                                                          "lora"])
    p.add_argument("--epsilons", nargs="+", default=list(EPSILONS))
    p.add_argument("--selections", nargs="+", default=["sparta"],
                   help="sparse's row selections, one entry each (the grid's key includes the selection)")
    p.add_argument("--scorecard", action="store_true", help="at the reproduction scorecard's size of the task "
                   "(dpviz.reproduce.SCALE, i.e. --scale small) rather than its preset's")
    p.add_argument("--scale", default=None, choices=list(SCALES),
                   help="at this size of the reproduction scorecard (dpviz.reproduce.SCALES) rather than the preset's")
    p.add_argument("--mechanism", default=None, help="the noise mechanism of every point (RunConfig.mechanism; "
                   "the grid's key includes it, so BandMF runs get rates tuned under BandMF)")
    p.add_argument("--bands", type=int, default=None, help="BandMF's band count b of every point (with --mechanism)")
    p.add_argument("--cache-dir", default="cache/auto_grid", help="store of the proxy searches (resumable)")
    p.add_argument("--out", default=str(autotune.GRID_PATH))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workers", type=int, default=1,
                   help="processes that run the searches' trials at once (`python -m dpviz worker`, one thread each): "
                   "every point's search is created first, so the workers share all their trials")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    doc = json.loads(out.read_text()) if out.exists() else {"entries": []}
    backbones = a.backbones if a.task == "default" else [tasks.task_fields(a.task)["backbone"]]
    noise = {k: v for k, v in (("mechanism", a.mechanism), ("bands", a.bands)) if v is not None}
    runs = [(b, s, {**({"selection": sel} if s == "sparse" else {}), **noise})
            for b, s in itertools.product(backbones, a.strategies)
            for sel in (a.selections if s == "sparse" else [None])]
    size = size_fields(a.task, a.scale or "small") if a.scorecard or a.scale else None
    if a.workers > 1:
        in_parallel(runs, a, size)
    for backbone, strategy, extra in runs:
        e = entry_for(backbone, strategy, a.epsilons, Path(a.cache_dir), lambda m: print(m, flush=True),
                      task=a.task, axes_values={"lp_fraction": tuple(a.lp_fractions)},
                      size=size, extra=extra)
        doc["entries"] = merge(doc["entries"], e)
        doc.update(version=1, note="learning rates tuned on public data only (glyphs; a real task's public stand-in) (scripts/build_auto_grid.py); "
                                   "no private data was read")
        out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")  # after each entry: resumable


if __name__ == "__main__":
    main()
