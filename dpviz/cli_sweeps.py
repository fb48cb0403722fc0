"""Command line: ``python -m dpviz sweep|tune|worker`` (Optuna studies; see `dpviz.sweeps`).

Every flag a command is given is read: a flag of the other sweep kind, a range for a learning rate
the strategy does not use, or a range end the data cannot take is one line naming it (exit 2)
before a study is written. A sweep prints its table only when every point of its grid finished.
"""

from __future__ import annotations

import math
import sys

from .config import RunConfig
from .errors import ConfigError, DpvizError

SPARSE_ONLY = {"sparsities": "--sparsities", "selections": "--selections", "fft": "--no-fft",
               "lora_ranks": "--lora-ranks"}
SPARSE_DEFAULTS = dict(sparsities=[0.05, 0.2, 0.5], selections=["sparta", "magnitude", "random", "bias", "norm"],
                       fft=True, lora_ranks=[1, 2, 4, 8])
FRACTIONS = [round(0.1 * i, 1) for i in range(11)]
RANGES = ("lr_lp", "lr_ft", "clip_norm", "batch_size", "epochs")


def add_parsers(sub, config_flags) -> None:
    """The sweep, tune and worker subcommands; flags whose default is None tell "given" from "default"."""
    sw = sub.add_parser("sweep", help="an Optuna grid sweep: budget (ε × LP fraction × seed) or sparse (the "
                        "accuracy / trainable-parameter profile of sparse fine-tuning and its baselines)")
    sw.add_argument("kind", choices=["budget", "sparse"])
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
    tu = sub.add_parser("tune", help="an Optuna TPE search over learning rates, clip norm, batch, epochs")
    config_flags(tu, skip=RANGES)
    for name in RANGES:
        tu.add_argument("--" + name.replace("_", "-"), dest="range_" + name, nargs=2, type=float, default=None,
                        metavar=("LOW", "HIGH"), help="search range (log scale); omitted: the default value")
    tu.add_argument("--trials", type=int, default=20)
    tu.add_argument("--proxy", default=None, help="tune on this public dataset (glyphs, synthetic) instead of the "
                    "private one; without it every trial spends privacy that no run's ε includes")
    tu.add_argument("--workers", type=int, default=1)
    tu.add_argument("--storage", default=None)
    tu.add_argument("--json", action="store_true")
    wk = sub.add_parser("worker", help="run waiting trials of dpviz studies in a storage")
    wk.add_argument("--storage", default=None)
    wk.add_argument("--study", default=None, help="one study (default: every dpviz study with waiting trials)")
    wk.add_argument("--threads", type=int, default=None, help="torch threads for this worker")


def _refuse_other_kind(args, base: RunConfig) -> None:
    """Flags of the other sweep kind, and a strategy the grid would ignore, are refused by name."""
    if args.kind == "budget":
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


def _grid(args, base: RunConfig):
    """(kind, points) of the sweep, every point validated before anything is stored."""
    from . import runner, sweeps

    if args.kind == "budget":
        fractions = FRACTIONS if args.fractions is None else args.fractions
        for p in fractions:
            base.replace(lp_fraction=p)
        for seed in args.seeds:
            base.replace(seed=seed)
        space = sweeps.budget_grid(epsilons=args.epsilons, fractions=fractions, seeds=args.seeds)
        return [{"epsilon": e, "lp_fraction": p, "seed": s} for e in space["epsilon"] for p in space["lp_fraction"]
                for s in space["seed"]]
    kw = {k: (v if getattr(args, k) is None else getattr(args, k)) for k, v in SPARSE_DEFAULTS.items()}
    points = sweeps.sparse_points(epsilons=args.epsilons, seeds=args.seeds, **kw)
    for p in points:
        RunConfig.from_dict({**base.to_dict(), **p})
    return points


def cmd_sweep(args) -> int:
    from . import calibration, runner, sweeps
    from .cli import _at_least, _dump, config_from_args

    base = config_from_args(args)
    _at_least(args, "workers", 1)
    _refuse_other_kind(args, base)
    for e in args.epsilons:
        RunConfig.from_dict({**base.to_dict(), "epsilon": e})  # validate every point before starting
    args.epsilons = ["inf" if e.strip().lower() == "none" else str(float(e)) for e in args.epsilons]  # str(inf): "inf"
    calibration.preview(base)  # what needs the data (δ ≤ 1/n, the backbone, σ) fails here, before any trial
    points = _grid(args, base)
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
    print(_dump(rows) if args.json else "\n".join(
        f"{r['run_id']}  " + "  ".join(f"{k}={v}" for k, v in r.items() if k not in ("run_id", "test_accuracy"))
        + f"  acc {r['test_accuracy']:.4f}" for r in rows))
    return 0


def _workers(requested: int | None, waiting: int) -> int:
    from .trials import local_workers

    n, note = local_workers(requested, waiting)
    if note:
        print(note, file=sys.stderr)
    return n


def _tune_space(args, base: RunConfig) -> dict:
    """{field: (low, high)} of the ranges given; each finite, 0 < low <= high (searched on a log scale),
    and a learning rate only where ``base``'s strategy uses it."""
    from . import strategies

    space = {}
    for k in RANGES:
        r = getattr(args, "range_" + k)
        if r is None:
            continue
        lo, hi = r
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
            raise ConfigError(k, "a range LOW HIGH of finite numbers with 0 < LOW <= HIGH", f"{lo:g} {hi:g}")
        used = strategies.get(base.strategy).lr_fields
        if k.startswith("lr_") and k not in used:
            raise ConfigError(k, f"no range: {base.strategy} trains with {' and '.join(used)} only", f"{lo:g} {hi:g}")
        if k in ("batch_size", "epochs"):  # each end must itself be a valid value
            for end in (lo, hi):
                RunConfig().replace(**{k: int(end)})
        space[k] = r
    return space


def _preview_ends(configs, space: dict) -> None:
    """`calibration.preview` at every corner of the batch-size and epoch ranges (they set q, T and σ; the
    rest do not), on each dataset the study touches: B ≤ n, δ ≤ 1/n, a σ that exists."""
    from itertools import product

    from . import calibration

    shaping = {k: v for k, v in space.items() if k in ("batch_size", "epochs")}
    for cfg in configs:
        calibration.preview(cfg)
        for ends in product(*shaping.values()):
            calibration.preview(cfg.replace(**{k: int(e) for k, e in zip(shaping, ends)}))


def cmd_tune(args) -> int:
    from . import runner, sweeps
    from .cli import _at_least, _dump, config_from_args

    base = config_from_args(args)
    _at_least(args, "trials", 1)
    _at_least(args, "workers", 1)
    space = _tune_space(args, base)
    if not space:
        raise ConfigError("tune", "give at least one range, e.g. --lr-ft 0.001 1")
    _preview_ends([base] + ([sweeps.proxy_base(base, args.proxy)] if args.proxy else []), space)  # before any write
    study = sweeps.create_search(base, space, trials=args.trials, storage_url=args.storage, cache_dir=args.cache_dir,
                                 proxy=args.proxy)
    if not args.proxy:
        print(f"dpviz: note: tuning on the private dataset '{base.dataset}': each trial spends privacy that no "
              "run's ε includes (use --proxy glyphs to tune on public data)", file=sys.stderr)
    left = study.user_attrs["n_trials"] - len(study.get_trials(deepcopy=False, states=(sweeps.TS.COMPLETE, sweeps.TS.RUNNING)))
    workers = _workers(args.workers, max(left, 0))
    if sweeps.run_local(study, run=runner.run, workers=workers, cache_dir=args.cache_dir, storage_url=args.storage):
        raise DpvizError("tune: a worker failed; relaunch to resume")
    rows = sweeps.table(study)
    print(_dump(rows) if args.json else "\n".join(f"{r['run_id']}  acc {r['test_accuracy']:.4f}  " + "  ".join(
        f"{k}={v:.4g}" for k, v in r.items() if k in space) for r in rows))
    return 0


def cmd_worker(args) -> int:
    import optuna
    import torch

    from . import runner, sweeps
    from .cli import _at_least

    _at_least(args, "threads", 1)
    st = sweeps.storage(args.storage, args.cache_dir)  # a damaged journal is one line, before torch works
    if args.threads:
        torch.set_num_threads(args.threads)
    known = [s.study_name for s in optuna.get_all_study_summaries(st) if s.study_name.startswith("dpviz-")]
    if args.study and args.study not in known:
        raise ConfigError("study", f"a dpviz study in this storage ({', '.join(known) or 'none yet'})", args.study)
    names = [args.study] if args.study else known
    for name in names:
        sweeps.work(optuna.load_study(study_name=name, storage=st), run=runner.run, cache_dir=args.cache_dir)
    return 0
