"""Optuna studies: ``sweep`` (budget or sparse grids), ``tune`` (a TPE search) and ``worker``.

Every flag a command is given is read: a flag of the other sweep kind, a range for a learning rate
the strategy does not use, a range end the data cannot take, or a grid point a run could not take
(BandMF's b·q > 1, a σ that cannot reach its ε) is one line naming it (exit 2) before a study is written
or any point trains (the checks themselves are `dpviz.sweeps`'). A sweep prints its table only when every
point of its grid finished. `PARSERS` maps each subcommand to its parser's adder.
"""

from __future__ import annotations

import argparse
import os
import sys

from dpviz.config import RunConfig
from dpviz.errors import ConfigError, DpvizError
from dpviz.privacy import BANDED
from dpviz.cli.common import at_least, config_flags, config_from_args, dump

SPARSE_ONLY = {"sparsities": "--sparsities", "selections": "--selections", "fft": "--no-fft",
               "lora_ranks": "--lora-ranks"}
BAND_COUNTS = [1, 2, 4, 8]
SPARSE_DEFAULTS = dict(sparsities=[0.05, 0.2, 0.5], selections=["sparta", "magnitude", "random", "bias", "norm"],
                       fft=True, lora_ranks=[1, 2, 4, 8])
FRACTIONS = [round(0.1 * i, 1) for i in range(11)]
RANGES = ("lr_lp", "lr_ft", "clip_norm", "batch_size", "epochs")


def add_sweep(sub) -> None:
    """Flags whose default is None tell "given" from "default"."""
    sw = sub.add_parser("sweep", help="an Optuna grid sweep: budget (ε × LP fraction × seed), sparse (the "
                        "accuracy / trainable-parameter profile of sparse fine-tuning and its baselines) or noise "
                        "(DP-SGD beside BandMF's correlated noise at several band counts)")
    sw.add_argument("kind", choices=["budget", "sparse", "noise"])
    sw.add_argument("--band-counts", nargs="+", type=int, default=None,
                    help="noise: band counts b (1: DP-SGD; default: 1 2 4 8); --mechanism bandmf-momentum makes "
                    "the b > 1 points that mechanism")
    sw.add_argument("--sparsities", nargs="+", type=float, default=None, help="sparse: s values (default: 0.05 0.2 0.5)")
    sw.add_argument("--selections", nargs="+", default=None, help="sparse: selections (row selections run at every "
                    "s; default: sparta magnitude random bias norm)")
    sw.add_argument("--no-fft", dest="fft", action="store_false", default=None,
                    help="sparse: leave out the DP-FFT reference")
    sw.add_argument("--lora-ranks", nargs="*", type=int, default=None,
                    help="sparse: DP-LoRA adapter ranks r beside the sparse methods (default 1 2 4 8; none: no LoRA)")
    config_flags(sw, skip=("epsilon", "lp_fraction", "seed"))
    sw.add_argument("--epsilon", dest="epsilons", nargs="+", default=["1", "2", "8"], help="ε values (inf: no DP)")
    sw.add_argument("--fractions", nargs="+", type=float, default=None, help="budget: LP shares (default 0 0.1 … 1)")
    sw.add_argument("--seeds", nargs="+", type=int, default=[0])
    sw.add_argument("--workers", type=int, default=None, help="local worker processes (default and most: cores, "
                    "and no more than the points to run)")
    sw.add_argument("--storage", default=None, help="Optuna storage URL (default: journal file in the cache)")
    sw.add_argument("--json", action="store_true")
    sw.set_defaults(handler=cmd_sweep)


def add_tune(sub) -> None:
    tu = sub.add_parser("tune", help="an Optuna TPE search over learning rates, clip norm, batch, epochs")
    config_flags(tu, skip=RANGES)
    for name in RANGES:
        tu.add_argument("--" + name.replace("_", "-"), dest="range_" + name, nargs=2, type=float, default=None,
                        metavar=("LOW", "HIGH"), help="search range (log scale); omitted: the default value")
    tu.add_argument("--trials", type=_trials, default=20, metavar="N|poisson|negative-binomial|fixed",
                    help="a number of TPE trials (default 20); with --private, how the number of trials is drawn "
                         "(fixed: --mean-trials of them, every one composed)")
    pv = tu.add_argument_group("private search (one total budget; Papernot & Steinke's theorem)")
    pv.add_argument("--private", action="store_true", help="tune on the private data within --total-epsilon: a "
                    "random number of random-search trials, scored on held-out training examples, only the best "
                    "released")
    pv.add_argument("--total-epsilon", type=float, default=None, metavar="E", help="ε of the whole search")
    pv.add_argument("--total-delta", type=float, default=None, metavar="D", help="δ of the whole search (default 1e-5)")
    pv.add_argument("--mean-trials", type=float, default=None, metavar="K", help="E[K], the mean number of trials (default 5)")
    pv.add_argument("--nb-shape", type=float, default=None, metavar="ETA", help="negative-binomial: its shape η (default 1, "
                    "the geometric)")
    pv.add_argument("--audit", type=int, default=None, metavar="CANARIES", help="audit the search instead of "
                    "running it for a release: the whole search again, unstored, with this many white-box canaries "
                    "among the private examples, and ε's empirical lower bound from the released trial")
    pv.add_argument("--score-noise", type=float, default=None, metavar="S", help="std of a trial's noisy held-out accuracy "
                    "(default 0.05); the held-out count is --holdout (default: a fifth of the data, ≤ 500)")
    tu.add_argument("--proxy", default=None, help="tune on this public dataset (glyphs, synthetic) instead of the "
                    "private one; without it every trial spends privacy that no run's ε includes")
    tu.add_argument("--workers", type=int, default=1)
    tu.add_argument("--storage", default=None)
    tu.add_argument("--json", action="store_true")
    tu.set_defaults(handler=cmd_tune)


def _trials(text: str):
    """``--trials``: a count (an ordinary search) or a distribution's name (a private one)."""
    choices = ("poisson", "negative-binomial", "fixed")  # `dpviz.sweeps.private.CHOICES`, without importing it
    if text in choices:
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of trials, or {', '.join(choices)} with --private; "
                                         f"got {text!r}") from None


PRIVATE_ONLY = ("total_epsilon", "total_delta", "mean_trials", "nb_shape", "score_noise", "audit")


def add_worker(sub) -> None:
    wk = sub.add_parser("worker", help="run waiting trials of dpviz studies in a storage")
    wk.add_argument("--storage", default=None)
    wk.add_argument("--study", default=None, help="one study (default: every dpviz study with waiting trials)")
    wk.add_argument("--threads", type=int, default=None, help="torch threads for this worker")
    wk.set_defaults(handler=cmd_worker)


PARSERS = {"sweep": add_sweep, "tune": add_tune, "worker": add_worker}


def _refuse_other_kind(args, base: RunConfig) -> None:
    """Flags of the other sweep kind, and a strategy the grid would ignore, are refused by name."""
    if args.kind != "noise" and args.band_counts is not None:
        raise ConfigError("band_counts", f"--band-counts is a noise-sweep flag; a {args.kind} sweep does not vary "
                          "the mechanism (set --mechanism and --bands for all its points)")
    if args.kind == "noise":
        given = [f for f in SPARSE_ONLY if getattr(args, f) is not None] + ["fractions"] * (args.fractions is not None)
        if given:
            flag = SPARSE_ONLY.get(given[0], "--fractions")
            raise ConfigError(flag[2:].replace("-", "_"), f"{flag} is not a noise-sweep flag; a noise sweep varies "
                              "ε, --band-counts and --seeds")
        if base.bands != 1:
            raise ConfigError("bands", "left out: a noise sweep's points set the bands (--band-counts)", base.bands)
    elif args.kind == "budget":
        given = [f for f in SPARSE_ONLY if getattr(args, f) is not None]
        if given:
            flag = SPARSE_ONLY[given[0]]
            raise ConfigError(flag[2:].replace("-", "_"), f"{flag} is a sparse-sweep flag; a budget sweep varies "
                              "ε, --fractions and --seeds (or run `sweep sparse`)")
        if base.strategy != "lp-fft":
            raise ConfigError("strategy", "lp-fft: a budget sweep varies the LP share of lp-fft (leave --strategy "
                              "out; `sweep sparse` compares sparse, fft and lora)", base.strategy)
    else:
        if args.fractions is not None:
            raise ConfigError("fractions", "--fractions is a budget-sweep flag (the LP share of lp-fft); a sparse "
                              "sweep varies --sparsities, --selections, --lora-ranks")
        if args.strategy is not None or base.strategy != RunConfig.strategy:
            raise ConfigError("strategy", "no --strategy: the sparse profile's points set it (sparse, fft, lora)",
                              base.strategy)


def _grid(args, base: RunConfig) -> list[dict]:
    """The sweep's points, every one checked (`sweeps.check_points`) before anything is stored."""
    from dpviz import sweeps

    if args.kind == "budget":
        fractions = FRACTIONS if args.fractions is None else args.fractions
        sweeps.check_points(base, [{"lp_fraction": p} for p in fractions] + [{"seed": s} for s in args.seeds])
        space = sweeps.budget_grid(epsilons=args.epsilons, fractions=fractions, seeds=args.seeds)
        return [{"epsilon": e, "lp_fraction": p, "seed": s} for e in space["epsilon"] for p in space["lp_fraction"]
                for s in space["seed"]]
    if args.kind == "noise":
        # --mechanism names the banded mechanism of the b > 1 points (bandmf unless bandmf-momentum)
        points = sweeps.noise_points(epsilons=args.epsilons, seeds=args.seeds,
                                     band_counts=args.band_counts or BAND_COUNTS,
                                     mechanism=base.mechanism if base.mechanism in BANDED else "bandmf")
        sweeps.check_points(base, points)
        return points
    kw = {k: (v if getattr(args, k) is None else getattr(args, k)) for k, v in SPARSE_DEFAULTS.items()}
    points = sweeps.sparse_points(epsilons=args.epsilons, seeds=args.seeds, **kw)
    sweeps.check_points(base, points)
    return points


def cmd_sweep(args) -> int:
    from dpviz import runner
    from dpviz import sweeps

    base = config_from_args(args)
    at_least(args, "workers", 1)
    _refuse_other_kind(args, base)
    sweeps.check_points(base, [{"epsilon": e} for e in args.epsilons])  # every ε, before starting
    args.epsilons = ["inf" if e.strip().lower() == "none" else str(float(e)) for e in args.epsilons]  # str(inf): "inf"
    points = _grid(args, base)  # the study checks each point as its run would (`sweeps.preview_points`) first
    study = sweeps.create_grid_sweep(args.kind, base, points, storage_url=args.storage, cache_dir=args.cache_dir)
    workers = _workers(args.workers, len(study.get_trials(deepcopy=False, states=(sweeps.TS.WAITING,))))
    failed = sweeps.run_local(study, run=runner.run, workers=workers, cache_dir=args.cache_dir,
                              storage_url=args.storage)
    if failed:
        raise DpvizError(f"sweep: {failed} worker(s) failed; relaunch to resume")
    rows = sweeps.table(study)
    if len(rows) != len(points):  # never rc 0 on a short table
        raise DpvizError(f"sweep: only {len(rows)} of {len(points)} points finished (the others run on another "
                         "machine or failed); relaunch the same command to finish them")
    print(dump(rows) if args.json else "\n".join(
        f"{r['run_id']}  " + "  ".join(f"{k}={v}" for k, v in r.items() if k not in ("run_id", "test_accuracy"))
        + f"  acc {r['test_accuracy']:.4f}" for r in rows))
    return 0


def _workers(requested: int | None, waiting: int) -> int:
    from dpviz.runtime import local_workers

    n, note = local_workers(requested, waiting)
    if note:
        print(note, file=sys.stderr)
    return n


def cmd_tune(args) -> int:
    from dpviz import runner
    from dpviz import sweeps

    if args.private:
        return cmd_private_tune(args)
    given = [f for f in PRIVATE_ONLY if getattr(args, f) is not None]
    if given or isinstance(args.trials, str):
        flag = "--" + (given[0] if given else "trials").replace("_", "-")
        raise ConfigError(given[0] if given else "trials", f"{flag} {'takes' if given else 'as a distribution takes'} "
                          "--private (a private search within one total budget); an ordinary search takes "
                          "--trials N")
    base = config_from_args(args)
    at_least(args, "trials", 1)
    at_least(args, "workers", 1)
    space = sweeps.check_ranges(base, {k: getattr(args, "range_" + k) for k in RANGES
                                       if getattr(args, "range_" + k) is not None})
    if not space:
        raise ConfigError("tune", "give at least one range, e.g. --lr-ft 0.001 1")
    sweeps.preview_corners([base] + ([sweeps.proxy_base(base, args.proxy)] if args.proxy else []),
                           space)  # before any write
    study = sweeps.create_search(base, space, trials=args.trials, storage_url=args.storage, cache_dir=args.cache_dir,
                                 proxy=args.proxy)
    if not args.proxy:
        print(f"dpviz: note: tuning on the private dataset '{base.dataset}': each trial spends privacy that no "
              "run's ε includes (use --proxy glyphs to tune on public data)", file=sys.stderr)
    left = study.user_attrs["n_trials"] - len(study.get_trials(deepcopy=False, states=(sweeps.TS.COMPLETE, sweeps.TS.RUNNING)))
    workers = _workers(args.workers, max(left, 0))
    if sweeps.run_local(study, run=runner.run, workers=workers, cache_dir=args.cache_dir, storage_url=args.storage):
        raise DpvizError("tune: a worker failed; relaunch to resume")
    rows, cost = sweeps.table(study), sweeps.search_cost(study)
    if args.json:
        print(dump({"trials": rows, "privacy": cost}))
        return 0
    print("\n".join(f"{r['run_id']}  acc {r['test_accuracy']:.4f}  " + "  ".join(
        f"{k}={v:.4g}" for k, v in r.items() if k in space) for r in rows))
    if cost:
        print(_cost_line(cost))
    return 0


def _cost_line(cost: dict) -> str:
    rnd = cost["random_count_epsilon"]
    return (f"what this search cost: ε {cost['composed_epsilon']:.4g} at δ = {cost['delta']:g} for its {cost['trials']} "
            f"trials composed (pld), against each trial's ε {max(cost['per_trial_epsilon']):.4g}; a random number of "
            f"trials of the same mean would cost {rnd['poisson']:.4g} (poisson) or {rnd['negative-binomial']:.4g} "
            "(negative-binomial), with a private score: tune --private")


def cmd_private_tune(args) -> int:
    """``tune --private``: `dpviz.sweeps.private` within --total-epsilon; prints the search's entry."""
    from dpviz import runner
    from dpviz.store import Store
    from dpviz.sweeps import private

    for flag in ("proxy", "storage"):
        if getattr(args, flag) is not None:
            raise ConfigError(flag, f"no --{flag} with --private (a private search runs here, on the private data)")
    if args.epsilon is not None or args.delta is not None:
        raise ConfigError("epsilon" if args.epsilon is not None else "delta", "--total-epsilon and --total-delta "
                          "with --private: each trial's ε follows from the search's total")
    if args.total_epsilon is None:
        raise ConfigError("total_epsilon", "a finite number in (0, 100]: --total-epsilon E is required with --private")
    if not isinstance(args.trials, str):
        raise ConfigError("trials", "poisson, negative-binomial or fixed (with --mean-trials K) with --private: how "
                          "the number of trials is drawn", args.trials)
    base = config_from_args(args)
    space = {k: tuple(getattr(args, "range_" + k)) for k in RANGES if getattr(args, "range_" + k) is not None}
    fixed = {k: space.pop(k)[0] for k in ("batch_size", "epochs") if k in space and space[k][0] == space[k][1]}
    if fixed:  # `--epochs 3 3`: a fixed value, as a private search needs (it sets every trial's privacy)
        base = base.replace(**{k: int(v) for k, v in fixed.items()})
    search = private.PrivateSearch(
        base=base.replace(holdout=0), space=space, total_epsilon=args.total_epsilon,
        total_delta=1e-5 if args.total_delta is None else args.total_delta, distribution=args.trials,
        mean_trials=5.0 if args.mean_trials is None else args.mean_trials,
        nb_shape=1.0 if args.nb_shape is None else args.nb_shape, holdout=base.holdout,
        score_noise=private.SCORE_NOISE if args.score_noise is None else args.score_noise)
    private.check(search)
    if space:
        from dpviz import sweeps

        sweeps.check_ranges(base, space)
    if args.audit is not None:
        from dpviz.audit import AuditSpec, audit_search

        report = audit_search(search, AuditSpec(canaries=args.audit), store=Store(args.cache_dir),
                              progress=None if args.json else _say_trial)
        print(dump(report) if args.json else f"audit of private search {report['search_key']}: ε_lb "
              f"{max(report['epsilon_lb'], report['epsilon_lb_fdp']):.3f} (the larger of both bounds, one run, "
              f"{report['canaries']} canaries, {report['confidence']:.0%} confidence for both together) against the search's total ε {report['epsilon_spent']:.3f}")
        return 0
    entry = private.run_search(search, run=runner.run, store=Store(args.cache_dir),
                               progress=None if args.json else _say_trial)
    print(dump(entry) if args.json else private.describe(entry))
    return 0


def _say_trial(i: int, k: int, step: int | None = None, total: int | None = None) -> None:
    if step is None:  # a line per trial; its steps would be a line each
        print(f"dpviz: private search: trial {i + 1} of {k}", file=sys.stderr)


def cmd_worker(args) -> int:
    import optuna

    from dpviz import runner
    from dpviz import sweeps
    from dpviz.runtime import set_threads

    at_least(args, "threads", 1)
    st = _existing_storage(args)  # a damaged journal is one line, before torch works
    if args.threads:
        set_threads(args.threads)
    known = [] if st is None else [s.study_name for s in optuna.get_all_study_summaries(st)
                                   if s.study_name.startswith("dpviz-")]
    if args.study and args.study not in known:
        raise ConfigError("study", f"a dpviz study in this storage ({', '.join(known) or 'none yet'})", args.study)
    names = [args.study] if args.study else known
    for name in names:
        sweeps.work(optuna.load_study(study_name=name, storage=st), run=runner.run, cache_dir=args.cache_dir)
    return 0


def _existing_storage(args):
    """The storage the worker reads, or None where no journal file exists yet: no study to work on, and
    opening the storage would create the file (a refused ``--study`` must leave the cache as it was)."""
    from dpviz import sweeps
    from dpviz.sweeps import journal_path

    if not (args.storage or os.environ.get("DPVIZ_STORAGE")) and not journal_path(args.cache_dir).exists():
        return None
    return sweeps.storage(args.storage, args.cache_dir)
