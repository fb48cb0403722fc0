"""Reference commands: ``accountants``, ``strategies``, ``reproduce`` and ``theory``.

None of them trains a configuration of the user's: they tabulate σ per accountant, list the
registered strategies, run the reproduction scorecard (resumable) and the theory lab's curves.
`PARSERS` maps each subcommand to the function that adds its parser (the command as its handler).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from dpviz.config import parse_epsilon
from dpviz.errors import ConfigError
from dpviz.cli.common import dump, number


def add_theory(sub) -> None:
    from dpviz.theory import Setting

    p = sub.add_parser("theory", help="the theory lab: Ke et al. 2024's two-layer setting under Langevin diffusion "
                       "(LP, FFT, LP-FFT over time; --utility: loss against the LP share; --overlay: real DP-SGD)")
    for f in fields(Setting):
        p.add_argument(f"--{f.name.replace('_', '-')}", default=None, metavar=f.name.upper(),
                       help=f"(default {f.default})")
    p.add_argument("--utility", action="store_true", help="also the utility curve over the LP share p")
    p.add_argument("--overlay", default=None, metavar="S", help="also train lp or fft with dpviz's DP-SGD")
    p.add_argument("--json", action="store_true", help="print the curves as JSON")
    p.set_defaults(handler=cmd_theory)


def add_accountants(sub) -> None:
    ac = sub.add_parser("accountants", help="σ each accountant needs for (ε, δ) as the batch size grows")
    ac.add_argument("--epsilon", type=float, required=True)
    ac.add_argument("--delta", type=float, required=True)
    ac.add_argument("--epochs", type=int, required=True)
    ac.add_argument("--dataset-size", type=int, required=True)
    ac.add_argument("--batch-sizes", type=int, nargs="+", required=True)
    ac.add_argument("--accountants", nargs="+", default=None, metavar="NAME",
                    help="accountants to tabulate (default: every registered one, dpviz.privacy.accountants)")
    ac.add_argument("--json", action="store_true")
    ac.set_defaults(handler=cmd_accountants)


def add_strategies(sub) -> None:
    st = sub.add_parser("strategies", help="the registered strategies: their fields, learning rates and phases")
    st.add_argument("--json", action="store_true")
    st.set_defaults(handler=cmd_strategies)


def add_reproduce(sub) -> None:
    from dpviz.tasks import TASKS

    rp = sub.add_parser("reproduce", help="the reproduction scorecard: each seed paper's headline claims measured "
                        "on a task with auto learning rates (resumable: finished runs are reused)")
    rp.add_argument("--task", default="default", metavar="TASK",
                    help=f"the task the claims are read on: {', '.join(TASKS)} (default: default, dpviz's toy task)")
    rp.add_argument("--seeds", type=int, default=3, help="seeds per experiment (>= 1; 3 gives mean ± std)")
    rp.add_argument("--set", nargs="+", default=None, metavar="FIELD=VALUE", dest="changes",
                    help="set a RunConfig field on every run (e.g. train_size=64 to try a tiny scorecard)")
    rp.add_argument("--claims", nargs="+", default=None, metavar="ID", help="claim ids (default: all; see --list)")
    rp.add_argument("--workers", type=int, default=1, help="processes that train the runs (at most one per "
                    "core; 2 on a 2-core CPU trains more runs an hour than 1 process on 2 threads)")
    rp.add_argument("--scale", default="small", metavar="SIZE",
                    help="the size the claims are read at: small (default), medium or large (dpviz.reproduce.SCALES: "
                    "the larger sizes grow the training set and the steps; only the scale-sensitive claims are read there)")
    rp.add_argument("--device", default=None, choices=("auto", "cpu", "cuda"),
                    help="where the runs train (not part of a run's hash: a run trained on cuda answers on cpu)")
    rp.add_argument("--stop-after", type=float, default=None, metavar="MINUTES",
                    help="stop after this many minutes: the run in flight stops at its next step and the same "
                    "command goes on later, resuming it from its last checkpoint (a pass in pieces, e.g. on a "
                    "GPU cluster whose jobs are cut short after 10 minutes)")
    rp.add_argument("--list", action="store_true", help="list the claims and exit")
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(handler=cmd_reproduce)


PARSERS = {"theory": add_theory, "accountants": add_accountants, "strategies": add_strategies,
           "reproduce": add_reproduce}


def cmd_theory(args) -> int:
    from dpviz.theory import Setting, curves, overlay, readings, utility

    s = Setting(**_setting_fields(args))
    c = curves(s)
    u = utility(s) if args.utility else None
    o = overlay(s, strategy=args.overlay) if args.overlay else None
    if args.json:
        print(dump({"curves": c.as_dict(), "utility": u and u.as_dict(), "overlay": o}))
        return 0
    print(f"theory lab: noise s = {c.noise:.4g} for ε = {s.epsilon:g}, δ = {s.delta:g}, T = {s.time:g}")
    lines = [*readings.readings(c).values(), *([readings.utility_reading(u)] if u else []),
             *([readings.overlay_reading(o)] if o else [])]
    print("\n".join("  " + t.replace("**", "") for t in lines))
    return 0


def _setting_fields(args: argparse.Namespace) -> dict:
    """The `Setting` fields given as flags, read as their types; --overlay checked before any curve."""
    from dpviz.theory import Setting
    from dpviz.theory import OVERLAYS

    kw = {}
    for f in fields(Setting):
        v = getattr(args, f.name)
        if v is not None:
            kw[f.name] = (v if isinstance(f.default, str) else parse_epsilon(v) if f.name == "epsilon"
                          else number(v, f.name, type(f.default)))
    if args.overlay is not None and args.overlay not in OVERLAYS:
        raise ConfigError("overlay", f"{' or '.join(OVERLAYS)} (the strategy trained by DP-SGD over the diffusion)",
                          args.overlay)
    return kw


def cmd_accountants(args) -> int:
    from dpviz.privacy import sigma_by_batch_size

    rows = sigma_by_batch_size(epsilon=args.epsilon, delta=args.delta, epochs=args.epochs,
                               dataset_size=args.dataset_size, batch_sizes=args.batch_sizes,
                               accountants=args.accountants)  # ConfigError naming the argument
    print(dump(rows) if args.json else "\n".join(
        f"{r['accountant']:>4}  B={r['batch_size']:<6} q={r['sample_rate']:.4g}  T={r['steps']:<6} "
        + (f"σ: none ({r['error']})" if r["error"] else
           f"σ={r['noise_multiplier']:.4f}  σ²/B={r['sigma2_over_b']:.4g}") for r in rows))
    return 0


def cmd_strategies(args) -> int:
    from dpviz import strategies

    rows = [{"name": c.name, "label": c.label, "fields": list(c.fields()), "lr_fields": list(c.lr_fields),
             "color": c.color, "min_epochs": c.min_epochs, "grad_sample_modes": list(c.grad_sample_modes),
             "doc": (sys.modules[c.__module__].__doc__ or "").strip().split("\n")[0]}
            for c in strategies.REGISTRY.values()]
    if args.json:
        print(dump(rows))
        return 0
    for r in rows:
        own = ", ".join("--" + f.replace("_", "-") for f in r["fields"] + r["lr_fields"])
        print(f"{r['name']:<10} {r['label']}  [{own}]\n{'':<10} {r['doc']}")
    return 0


def parse_changes(items) -> dict:
    """``FIELD=VALUE`` words → {field: value} (`dpviz.studies.parse_sets`)."""
    from dpviz import studies

    return studies.parse_sets(items)


def _list_claims(task: str, as_json: bool, scale: str = "small") -> int:
    """The claims and what each measures on ``task`` at ``scale`` (or why it cannot be read there)."""
    from dpviz import reproduce

    rows = [{"id": c.id, "seed": c.seed, "paper": reproduce.PAPERS[c.seed][0], "title": reproduce.PAPERS[c.seed][1],
             "sentence": c.sentence, "preset": c.experiment(task, scale), "readable": why is None, "why_not": why,
             "private": c.private, "scales": list(c.scales)} for c in reproduce.CLAIMS for why in [c.why_not(task, scale)]]
    print(dump(rows) if as_json else "\n".join(
        f"{r['id']:<16} [{r['paper']}] {r['sentence']}  ({r['why_not'] or r['preset']})" for r in rows))
    return 0


def reproduce_command(args, changes: dict) -> str:
    """The command that runs this pass again, as the command line takes it."""
    from dpviz.studies import set_words

    out = f"python -m dpviz reproduce --task {args.task} --seeds {args.seeds}"
    out += f" --scale {args.scale}" if args.scale != "small" else ""
    out += " --claims " + " ".join(args.claims) if args.claims else ""
    out += set_words({k: v for k, v in changes.items() if k != "device"})
    return out + (f" --device {changes['device']}" if "device" in changes else "")


def _file_rows(rows: list[dict], args, changes: dict) -> None:
    """The rows read, into the store's scorecard results (`dpviz.studies.scorecard`), with their provenance."""
    from dpviz.studies import scorecard as filed
    from dpviz.store import Store

    if not rows:
        return
    store = Store(args.cache_dir)
    filed.save_rows(rows, task=args.task, scale=args.scale, changes=changes, store=store,
                    command=reproduce_command(args, changes), seeds=range(args.seeds))
    print(f"dpviz: rows written to {store.root / 'studies' / (filed.file_name(args.task, args.scale, changes) + '.json')}",
          file=sys.stderr)


def cmd_reproduce(args) -> int:
    from dpviz import reproduce
    from dpviz.tasks import task

    task(args.task, "task")  # a one-line error naming the tasks
    if args.scale not in reproduce.SCALES:
        raise ConfigError("scale", f"one of {', '.join(reproduce.SCALES)}", args.scale)
    if args.list:
        return _list_claims(args.task, args.json, args.scale)
    unknown = sorted(set(args.claims or ()) - set(reproduce.REGISTRY))
    if unknown:
        raise ConfigError("claims", f"some of {', '.join(reproduce.REGISTRY)}", unknown[0])
    if args.seeds < 1:
        raise ConfigError("seeds", "an integer >= 1", args.seeds)
    if args.workers < 1:
        raise ConfigError("workers", "an integer >= 1", args.workers)
    if args.stop_after is not None and not 0 < args.stop_after < 10**6:
        raise ConfigError("stop-after", "minutes > 0", args.stop_after)

    def progress(done, total, claim):
        print(f"\r[{done}/{total}] {claim:<16}", end="", file=sys.stderr, flush=True)

    changes = parse_changes(args.changes)
    if args.device:
        changes["device"] = args.device
    if args.scale != "small" and not any(c.why_not(args.task, args.scale) is None for c in reproduce.CLAIMS):
        raise ConfigError("scale", f"a size task {args.task} has: "
                          f"{', '.join(s for s in reproduce.SCALES if s == 'small' or args.task in reproduce.SCALES[s])}",
                          args.scale)
    stop = args.stop_after * 60 if args.stop_after is not None else None
    rows = reproduce.run(args.claims, task=args.task, seeds=tuple(range(args.seeds)), changes=changes,
                         cache_dir=args.cache_dir, progress=progress, workers=args.workers, scale=args.scale,
                         stop_after=stop, on_note=lambda text: print(f"\ndpviz: {text}", file=sys.stderr))
    print(file=sys.stderr)
    _file_rows(rows, args, changes)
    wanted = len(args.claims or reproduce.REGISTRY)
    if stop is not None and len(rows) < wanted:
        print(f"dpviz: stopped after {args.stop_after:g} min with {len(rows)} of {wanted} claims read; the same "
              "command goes on (finished runs answer from the store, a stopped one resumes from its last "
              "checkpoint)", file=sys.stderr)
    if args.json:
        print(dump(rows))
    else:
        for r in rows:
            print(f"{r['id']:<16} {r['verdict']:<9} {r['claim']}\n{'':<26} {r['reading']}")
    return 0
