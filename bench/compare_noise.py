"""DP-SGD beside BandMF's correlated noise on the default task (DP-FFT of the built-in CNN on digits), at
ε ∈ {1, 8}, over seeds: test accuracy, the early dip of the features' kNN accuracy, and the separation law's
decay ρ of the per-layer fuzziness D_l (with the fit's R²). Every run takes the shipped grid's learning rates
for DP-FFT at its ε (the same for every mechanism: no search), and stores a feature checkpoint every 6 steps.

``--task real-text|real-vision`` and ``--strategy lp|lp-fft`` take a real task (`dpviz.tasks`) and another strategy; DP-LP
moves no feature, so its rows leave out the feature analyses (and store no checkpoints).

Writes ``bench/results/noise_<task>.json`` (``noise_<task>_<strategy>.json`` for a strategy other than fft, and
``…_bandmf-momentum.json`` for ``--mechanism bandmf-momentum``, BSR fitted to SGD's momentum; mean ± sd over
seeds per ε and mechanism). ``--scale medium`` takes the scorecard's medium size of the task
(``noise_<task>_medium….json``).
The file is rewritten after every run; ``--stop-after SECONDS`` starts no run after that time (a GPU call's
limit), and a cell with fewer seeds says how many.
Usage: python bench/compare_noise.py [--task default] [--strategy fft] [--seeds 0 1 2] [--bands 1 2 4 8] [--cache DIR]
       [--mechanism bandmf|bandmf-momentum] [--scale medium|large] [--stop-after SECONDS]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from results import record

import dpviz
from dpviz import RunConfig, reproduce, tasks
from dpviz.analyses import analyze
from dpviz.store import Store


def one(cfg: RunConfig, store: Store) -> dict:
    s = dpviz.run(cfg, store=store, rates="grid")
    rid, phases = s["run_id"], s["phases"]
    base = {"accuracy": s["test_accuracy"], "sigma": phases[0]["noise_multiplier"], "eps": s["epsilon_spent"],
            "steps": sum(p["steps"] for p in phases)}
    if not cfg.checkpoint_every:  # DP-LP: the features do not move
        return base
    steps = store.feature_steps(rid)
    knn = [analyze(store, rid, "knn", step=t)["accuracy"] for t in steps]
    # The dip lies in the first third of the phase that moves the features: the whole run under DP-FFT, the
    # FFT phase after DP-LP's steps under LP-FFT (LP leaves the features where they were).
    start = sum(p["steps"] for p in phases if p["name"] == "lp")
    end = start + (base["steps"] - start) / 3
    early = [k for t, k in zip(steps, knn) if t <= end] or knn[:2]
    sep = analyze(store, rid, "separability", step=steps[-1])
    return {**base, "dip": knn[0] - min(early), "rho": sep["rho"], "r2": sep["r2"]}


def cell(values: list[float], fmt: str = ".3f") -> str:
    return f"{statistics.mean(values):{fmt}} ± {statistics.stdev(values):{fmt}}" if len(values) > 1 else \
        f"{values[0]:{fmt}}"


def table(got: dict, args, features: bool) -> list[list[str]]:
    """The rows so far: one per (ε, mechanism) with at least one finished seed, in the order asked."""
    rows = []
    for eps in args.epsilons:
        for b in args.bands:
            g = got.get((eps, b))
            if not g:
                continue
            n = f" ({len(g)} of {len(args.seeds)} seeds)" if len(g) < len(args.seeds) else ""
            rows.append([f"{eps:g}", f"{args.mechanism} b={b}" if b > 1 else "dp-sgd", f"{g[0]['sigma']:.3f}",
                         cell([r["accuracy"] for r in g]) + n]
                        + ([cell([r["dip"] for r in g]), cell([r["rho"] for r in g]), cell([r["r2"] for r in g], ".2f")]
                           if features else []))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="default", choices=list(tasks.TASKS))
    ap.add_argument("--strategy", default="fft", choices=("fft", "lp", "lp-fft"))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--bands", nargs="+", type=int, default=[1, 2, 4, 8])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 8.0])
    ap.add_argument("--mechanism", default="bandmf", choices=("bandmf", "bandmf-momentum"),
                    help="the correlated mechanism beside DP-SGD: BSR fitted to SGD, or to SGD with momentum")
    ap.add_argument("--scale", choices=[n for n in reproduce.SCALE_NAMES if n != "small"],
                    help="a larger size of the scorecard's (`dpviz.reproduce.SCALES`: more records, so more steps, "
                         "and checkpoints further apart); left out, the task's own fields")
    ap.add_argument("--stop-after", type=float, default=0, metavar="SECONDS",
                    help="start no run after this many seconds (0: no limit); the file holds the seeds finished")
    ap.add_argument("--cache", default="/tmp/dpviz-noise", help="the store the runs and analyses go to")
    args = ap.parse_args()
    store = Store(Path(args.cache))
    features = args.strategy != "lp"
    columns = ["ε", "mechanism", "σ", "test accuracy"] + (["early kNN dip", "ρ (D_l decay)", "R² of the fit"]
                                                          if features else [])
    label = tasks.task(args.task).label
    sized = dict(reproduce.SCALES[args.scale].get(args.task, {})) if args.scale else {}
    if args.scale and not sized:
        ap.error(f"--scale: {args.task} has no {args.scale} size (tasks with it: {', '.join(reproduce.SCALES[args.scale])})")
    every = 6 * sized.pop("every", 1)
    name = (f"noise_{args.task}" + (f"_{args.scale}" if args.scale else "")
            + (f"_{args.strategy}" if args.strategy != "fft" else "")
            + (f"_{args.mechanism}" if args.mechanism != "bandmf" else ""))
    got, steps, t0, impossible = {}, None, time.monotonic(), set()
    # Seeds outermost: a run cut short by --stop-after leaves whole seeds of every mechanism, not a few cells.
    for seed in args.seeds:
        for eps in args.epsilons:
            for b in args.bands:
                if (eps, b) in impossible:
                    continue
                if args.stop_after and time.monotonic() - t0 > args.stop_after:
                    print(f"stopped after {time.monotonic() - t0:.0f} s, before seed {seed} ε={eps:g} b={b}", flush=True)
                    return
                kw = dict(mechanism=args.mechanism, bands=b) if b > 1 else {}
                try:
                    r = one(tasks.config(args.task, strategy=args.strategy, epsilon=eps, seed=seed, keep_weights="none",
                                         checkpoint_every=every if features else 0, **sized, **kw), store)
                except dpviz.errors.ConfigError as e:  # b·q > 1: the task's batch cannot be split into b parts
                    print(f"{eps:g} | bandmf b={b} | cannot run: {e}", flush=True)
                    impossible.add((eps, b))
                    continue
                assert r["eps"] <= eps
                steps = r["steps"]
                got.setdefault((eps, b), []).append(r)
                print(f"seed {seed} | ε={eps:g} | b={b} | " + " | ".join(f"{k} {v:.4g}" for k, v in r.items()),
                      flush=True)
                record(name, columns=columns, rows=table(got, args, features),
                       title=f"DP-SGD beside {'BandMF' if args.mechanism == 'bandmf' else 'BandMF fitted to momentum'} "
                             f"(correlated noise), {label}: DP-{args.strategy.upper()}"
                             + (f", the scorecard's {args.scale} size" if args.scale else ""),
                       notes=f"mean ± sd over seeds {', '.join(map(str, args.seeds))}; {steps} steps"
                             + "".join(f", {k} {v}" for k, v in sized.items()) + "; the shipped "
                             f"grid's DP-{args.strategy.upper()} rates at each ε for every mechanism"
                             + ("; dip: kNN accuracy at step 0 minus its lowest in the first third of the run; ρ: "
                                "the fitted decay D_l ≈ ρ^l·D_0 at the last checkpoint." if features else
                                "; a missing b exceeds b·q ≤ 1."))


if __name__ == "__main__":
    main()
