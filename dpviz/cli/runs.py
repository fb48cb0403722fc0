"""Runs in the store: ``run``, ``list``, ``show``, ``delete``, ``analyze`` and ``features``.

A cached ``run`` and ``list`` never import torch. ``run`` trains in this process with a progress
bar, then starts the checkpoints' background analyses in a detached ``analyze all`` process.
`PARSERS` maps each subcommand to the function that adds its parser (the command as its handler).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from dpviz.config import switched_off
from dpviz.errors import ConfigError
from dpviz.cli.common import Progress, SearchProgress, config_flags, config_from_args, dump, say_start
from dpviz.privacy import release

SEEDED_WEIGHTS = ("dpviz: note: randomness seeded and keep_weights {keep}: the weights this run keeps give anyone who "
                  "holds its configuration its noise (the seed regenerates the sampling and the noise); "
                  "--randomness secure for weights that leave your hands")


def add_run(sub) -> None:
    r = sub.add_parser("run", help="run one configuration: resolve its auto rates, then execute it (prepare → "
                                   "train → store), or answer it from the store",
                       description="Run one configuration: resolve its auto learning rates on public data, then "
                                   "execute it (prepare → train → store). An identical finished run is answered "
                                   "from the store.")
    config_flags(r)
    r.add_argument("--force", action="store_true", help="retrain even if an identical run is stored")
    r.add_argument("--resume", action="store_true", help="go on with the newest stopped (interrupted, cancelled, "
                   "failed) run of this configuration from its last checkpoint, if there is one: the same "
                   "batches, noise and ε as an uninterrupted run, on any number of processes")
    r.add_argument("--fresh", action="store_true", help="start over from step 0 even where a run of this "
                   "configuration was interrupted with a snapshot (by default it goes on from there: the same ε, one "
                   "run); starting over spends the privacy budget again")
    r.add_argument("--rates", default="search", choices=("search", "grid"),
                   help="learning rates on auto off the shipped grid: search them on public data first (search, "
                   "the default), or take the nearest shipped grid point's at once (grid; the summary's auto "
                   "note says how far it is from this setting)")
    r.add_argument("--json", action="store_true", help="print the JSON summary on stdout")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(handler=cmd_run)


def add_list(sub) -> None:
    ls = sub.add_parser("list", help="list stored runs")
    ls.add_argument("--status", default=None, choices=["queued", "running", "finished", "failed", "cancelled",
                                                        "interrupted"])
    ls.add_argument("--all", action="store_true",
                    help='include the runs of "auto" learning-rate searches (kind search); by default only '
                         "your runs (kind user) and your sweeps' and tunings' trials (kind trial) are listed")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=cmd_list)


def add_show(sub) -> None:
    sh = sub.add_parser("show", help="show one stored run: its result and what its ε covers",
                        description="Show one stored run: its result and, for a private run, what its ε covers, "
                                    "against whom, the neighbour relation, where its random draws came from and its "
                                    "privacy check. --json: the whole summary, with the statement as \"privacy\".")
    sh.add_argument("run_id")
    sh.add_argument("--json", action="store_true", help="the whole summary as JSON, with \"privacy\" (what ε covers) "
                    "and \"privacy_check\"")
    sh.set_defaults(handler=cmd_show)


def add_delete(sub) -> None:
    de = sub.add_parser("delete", help="delete stored runs and their files")
    de.add_argument("run_ids", nargs="+")
    de.set_defaults(handler=cmd_delete)


def add_analyze(sub) -> None:
    an = sub.add_parser("analyze", help="an analysis of a stored checkpoint (private-data statistics)")
    an.add_argument("analysis", help="knn, embedding, separability, residual or hessian; all: every background "
                    "analysis of every checkpoint not stored yet")
    an.add_argument("run_id")
    an.add_argument("--step", type=int, default=None, help="checkpoint step (default: the last)")
    an.add_argument("--k", type=int, default=None, help="neighbours for knn")
    an.add_argument("--method", default=None, help="pca or umap, for embedding")
    an.add_argument("--json", action="store_true")
    an.add_argument("--quiet", action="store_true", help="all: print nothing")
    an.add_argument("--when-idle", action="store_true", help="all: before each checkpoint, wait while a run "
                    "of this store trains, and skip what runs only when asked for (curvature on a real pretrained "
                    "backbone): what a run's detached background analyses do")
    an.set_defaults(handler=cmd_analyze)


def add_features(sub) -> None:
    fe = sub.add_parser("features", help="export a checkpoint's per-layer features (layer_0 = input)")
    fe.add_argument("run_id")
    fe.add_argument("--step", type=int, default=None)
    fe.add_argument("--out", required=True, help="output .npz file")
    fe.set_defaults(handler=cmd_features)


PARSERS = {"run": add_run, "list": add_list, "show": add_show, "delete": add_delete, "analyze": add_analyze,
           "features": add_features}


def cmd_run(args) -> int:
    from dpviz import runner

    cfg = config_from_args(args)
    if _launched():  # one rank of a distributed run (torchrun): `dpviz.training.distributed`
        return _run_rank(cfg, args)
    if not cfg.private:
        print("dpviz: note: epsilon = inf: this run trains WITHOUT differential privacy (no clipping, no noise)",
              file=sys.stderr)
    if getattr(args, "fresh", False) and not args.force:
        _say_fresh(cfg, args.cache_dir)
    hit = None if args.force else runner.cached(cfg, cache_dir=args.cache_dir)  # torch-free
    summary = hit or _train(cfg, args)
    if summary is None:
        return 130
    print(dump(summary) if args.json else "\n".join([text(summary), *privacy_lines(summary)]))
    _say_seeded_weights(cfg)  # once the run is there: bad input stays one line
    if (summary.get("auto") or {}).get("warning"):  # in --json too, as summary["auto"]["warning"]
        print(f"dpviz: warning: learning rates on auto: {summary['auto']['warning']}", file=sys.stderr)
    if not summary.get("cached"):
        _analyze_later(summary["run_id"], args.cache_dir)
    return 0


def _say_seeded_weights(cfg) -> None:
    """A private seeded run that keeps weights: say once, beside its result, what those weights give away."""
    if cfg.private and cfg.randomness == "seeded" and cfg.keep_weights != "none":
        print(SEEDED_WEIGHTS.format(keep=cfg.keep_weights), file=sys.stderr)


def _say_force(message: str) -> None:
    """--force on a private configuration: `runner.run` says, once it has claimed its run, which run of the same
    configuration is stored or training (or, as it ends, trained beside it) and that this one spends the budget
    again; --force trains beside a run that is training (it does not wait for it: waiting is what a plain request
    does, and its answer would be that run's); `list` marks both as trainings of one configuration."""
    print(f"dpviz: --force: {message}", file=sys.stderr)


def _resume_mode(args):
    """`runner.run`'s ``resume``: --resume (any stopped run), --fresh (none), else an interrupted one."""
    return True if getattr(args, "resume", False) else False if getattr(args, "fresh", False) else "interrupted"


def _say_resume(quiet: bool):
    """What the command says when it goes on with a stopped run of the configuration instead of a new one (with
    --quiet too: it is what this command's ε is spent on)."""
    def on_resume(run_id: str, step: int) -> None:
        if step == 0:  # no snapshot yet: its seed draws the same batches and noise again (`resume.replays`)
            print(f"dpviz: run {run_id} of this configuration stopped before its first checkpoint; training it "
                  "again from step 0 as the same run (its seed draws the same steps: the same ε, one run)",
                  file=sys.stderr)
            return
        print(f"dpviz: run {run_id} of this configuration stopped at step {step}; going on with it from there "
              "(the same ε, one run; --fresh starts over and spends the privacy budget again)", file=sys.stderr)
    return on_resume


def _say_fresh(cfg, cache_dir) -> None:
    """--fresh where an interrupted run of the configuration could go on: say that starting over spends ε again."""
    from dpviz import runner
    from dpviz.store import Store
    from dpviz.training import resume

    store = Store(cache_dir)
    resolved, _, _ = runner.lookup(cfg, store)
    found = None if resolved.auto or not cfg.private else resume.stopped(store, resolved.hash(), (resume.TAKE_OVER,))
    if found:
        print(f"dpviz: --fresh: run {found[0]} of this configuration stopped at step {found[1]['step']} and could go "
              f"on from there; starting over trains a second run from step 0 and spends its privacy budget "
              f"(ε = {cfg.epsilon:g}) again on the same private data", file=sys.stderr)


def _say_wait(quiet: bool):
    """What the command says when another process trains the same configuration (`runner.run`'s on_wait)."""
    def on_wait(run_id: str) -> None:
        if not quiet:
            print(f"dpviz: run {run_id} of the same configuration is training; waiting for it: its result answers "
                  "this command (--force trains a second run and spends the privacy budget again)", file=sys.stderr)
    return on_wait


def _launched() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def _run_rank(cfg, args) -> int:
    """``torchrun --nproc-per-node N -m dpviz run …``: this process is one rank; rank 0 prints and stores."""
    from dpviz import runner
    from dpviz.training import distributed

    world = distributed.init_from_env(cfg.device)
    try:
        quiet = args.quiet or world.rank > 0
        progress = Progress(cfg, quiet)
        summary = runner.run(cfg, cache_dir=args.cache_dir, force=args.force, progress=progress,
                             resume=_resume_mode(args), on_wait=_say_wait(quiet), on_resume=_say_resume(quiet),
                             rates=getattr(args, "rates", "search"), on_force=_say_force)
        progress.close()
    finally:
        distributed.close()
    if world.rank == 0:
        print(dump(summary) if args.json else "\n".join([text(summary) + f"  ({world.size} processes, "
                                                           f"{world.backend})", *privacy_lines(summary)]))
        _say_seeded_weights(cfg)
        if not summary.get("cached"):
            _analyze_later(summary["run_id"], args.cache_dir)
    return 0


def _train(cfg, args) -> dict | None:
    """Train ``cfg`` in this thread with a progress bar; None when cancelled with Ctrl-C.

    The first Ctrl-C stops the run at its next step (stored as cancelled); a second one interrupts
    at once. No analyses run here: the command returns as soon as training ends, and the checkpoints'
    background analyses run afterwards in a detached process (`_analyze_later`)."""
    import signal

    from dpviz import runner

    # bad input found now is one line, before the first line below; a folder of the user's data is read (and
    # refused in one line) only as the run loads it, so its command says nothing before the pass's count
    if runner.check(cfg) and not args.quiet:
        say_start(cfg)
    from dpviz import runner
    from dpviz.training import idle
    from dpviz.errors import Cancelled
    from dpviz.training import ahead
    from dpviz.store import Store

    cancel = threading.Event()
    from dpviz.autotune import used_fields

    store = Store(args.cache_dir)
    progress, search = Progress(cfg, args.quiet, store), SearchProgress(args.quiet, used_fields(cfg))

    def on_sigint(signum, frame):
        cancel.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = signal.signal(signal.SIGINT, on_sigint)
    early = ahead.start(cfg)  # σ and the ε curve in a second process while this one imports torch
    try:
        with idle.training(store.root):  # background analyses of earlier runs wait meanwhile
            def step(*a):  # training has begun: the search's bar (if any) is done
                search.close()
                progress(*a)
            return runner.run(cfg, store=store, force=args.force, progress=step, cancel=cancel, ahead=early,
                              search_progress=search, resume=_resume_mode(args), on_resume=_say_resume(args.quiet),
                              rates=getattr(args, "rates", "search"),
                              on_wait=_say_wait(args.quiet), on_force=_say_force)
    except (Cancelled, KeyboardInterrupt):
        print("dpviz: run cancelled", file=sys.stderr)
        return None
    finally:
        signal.signal(signal.SIGINT, previous)
        if early is not None:
            early.close()
        search.close()
        progress.close()


def _analyze_later(run_id: str, cache_dir) -> None:
    """Start ``python -m dpviz analyze all RUN`` detached and at low priority: the feature and curvature
    analyses of every checkpoint land in the store after this command has returned.
    ``DPVIZ_BACKGROUND_ANALYSES=off`` skips it (``analyze all`` computes them when asked)."""
    import subprocess

    if switched_off("DPVIZ_BACKGROUND_ANALYSES"):
        return
    argv = [sys.executable, "-m", "dpviz", *(["--cache-dir", str(cache_dir)] if cache_dir else []),
            "analyze", "all", run_id, "--quiet", "--when-idle"]
    # One thread at the lowest priority: a multi-threaded analysis beside the user's next run makes both
    # OpenMP pools spin against each other (a 2 s training loop took 45 s on 2 cores).
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "NUMBA_NUM_THREADS": "1"}
    subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     env=env, start_new_session=True, preexec_fn=lambda: os.nice(19))


def text(s: dict) -> str:
    """A run summary as one line: id, strategy, noise mechanism (`names.mechanism`: "DP-SGD", "BandMF b=4"), test
    accuracy and what it spent of ε."""
    if str(s["config"].get("epsilon")) in ("inf", "None"):
        eps = "NO DP (ε = inf: trained without privacy)"
    elif s.get("epsilon_spent") is not None:
        eps = f"ε spent {s['epsilon_spent']:.4g}"
        if s.get("private_search"):  # released by a private search: the search's total is what it cost
            ps = s["private_search"]
            eps = (f"ε spent {ps['epsilon_spent']:.4g} by private search {ps['search_key']} "
                   f"(this trial {s['epsilon_spent']:.4g})")
        if s.get("epsilon_gdp_approx") is not None:  # GDP named: the bound is PRV's, GDP's figure beside it
            eps += f" (PRV bound; GDP approximation {s['epsilon_gdp_approx']:.4g})"
    else:  # stopped before the end: the budget bounds it; the last recorded step says how far it got
        rec = s.get("epsilon_recorded")
        seen = f", {rec[1]:.4g} recorded at step {rec[0]}" if rec else ""
        eps = f"{s.get('status', 'stopped')} at step {s.get('step') or 0}: ε spent ≤ {s['config']['epsilon']:g}{seen}"
    acc = "-" if s.get("test_accuracy") is None else f"{s['test_accuracy']:.4f}"
    src = (" (trained once by the request it waited for)" if s.get("waited_for") else " (from cache)") \
        if s.get("cached") else ""
    from dpviz.privacy import names

    return f"{s['run_id']}  {s['config']['strategy']:<8} {names.mechanism(s['config']):<10} test acc {acc}  {eps}{src}"


def cmd_list(args) -> int:
    from dpviz.runner import summary_of
    from dpviz.store import SHOWN, Store

    store = Store(args.cache_dir)
    # A row whose JSON is garbled is listed as "damaged" with what to do; the others as usual.
    rows = [r if r["status"] == "damaged" else summary_of(r, store)
            for r in store.list_runs(args.status, kind=None if args.all else SHOWN, damaged=True)]
    if args.json:
        print(dump(rows))
    else:
        trainings = store.trainings()  # config hash → runs that trained it (finished or live): ×2 is a spend twice
        for s in rows:
            twice = len(trainings.get(s.get("config_hash"), ())) if s["status"] != "damaged" else 0
            print(f"{s['status']:<11} {s['kind']:<6} " + (s["error"] if s["status"] == "damaged" else text(s))
                  + (f" · trained {twice}× (--force: ε spent {twice}×)" if twice > 1 else ""))
        hidden = 0 if args.all else len(store.list_runs(args.status, kind="search", damaged=True))
        if hidden:
            print(f"({hidden} search run(s) of \"auto\" learning rates not listed: --all lists them)", file=sys.stderr)
    return 0


def cmd_show(args) -> int:
    from dpviz.runner import summary_of
    from dpviz.store import Store

    store = Store(args.cache_dir)
    s = summary_of(store.get_run(args.run_id), store)
    if args.json:
        print(dump({**s, "privacy": release.statement(s), "privacy_check": s.get("privacy_check")}))
    else:
        from dpviz.privacy import names

        noise = f"  noise: {names.mechanism(s['config'], parts=True)}"  # a BandMF run's parts set its neighbours
        print("\n".join([text(s), noise, *privacy_lines(s, full=True)]))
    return 0


def privacy_lines(s: dict, full: bool = False) -> list[str]:
    """What a run's ε covers, a short line each (`release.statement`): against whom, the neighbour relation, where
    its draws came from and its privacy check; ``full`` adds what it covers and what it does not."""
    st = release.statement(s)
    if not st["private"]:
        return ["  privacy: none: trained without DP, so ε covers nothing this run releases"]
    lines = [f"  ε covers: {st['protects']}, against {st['against']}",
             f"  neighbours: {st['neighbours']} ({st['neighbours_meaning']})",
             f"  randomness: {st['randomness_line']}", f"  {release.check_text(s)}"]
    if full:
        lines[1:1] = [f"  covered: {'; '.join(st['covered'])}",
                      f"  {release.NOT_COVERED}: {'; '.join(st['not_covered'])}"]
    return lines


def cmd_delete(args) -> int:
    from dpviz.store import Store

    store = Store(args.cache_dir)
    for rid in args.run_ids:
        store.known(rid)  # all ids must exist before any is deleted (a run whose row is garbled too)
    for rid in args.run_ids:
        store.delete_run(rid)
        print(f"deleted {rid}")
    return 0


def cmd_analyze(args) -> int:
    from dpviz.training import idle
    from dpviz.store import Store

    store = Store(args.cache_dir)
    if args.analysis == "all" and args.when_idle:
        # The everyday pattern is a run, then the next run at once: let that command take the training
        # lock before this process imports torch beside it, then wait until nothing trains.
        time.sleep(idle.GRACE_S)
        idle.wait_until_idle(store.root)
    from dpviz.analyses import analyze, analyze_missing

    if args.analysis == "all":  # every background analysis of every checkpoint that is not stored yet
        wait = (lambda: idle.wait_until_idle(store.root)) if args.when_idle else None
        done = analyze_missing(store, args.run_id, before=wait, unattended_only=args.when_idle)
        if not args.quiet:
            print(dump(done) if args.json else f"{len(done)} analyses computed")
        return 0
    params = {k: v for k, v in (("k", args.k), ("method", args.method)) if v is not None}
    out = analyze(store, args.run_id, args.analysis, step=args.step, **params)
    if args.json:
        print(dump(out))
    else:
        shown = {k: v for k, v in out.items() if k not in ("coords", "labels")}
        print("\n".join(f"{k}: {v}" for k, v in shown.items()))
    return 0


def cmd_features(args) -> int:
    import numpy as np

    from dpviz.analyses import resolve_step
    from dpviz.store import write_atomic
    from dpviz.store import Store

    out = _output_file(args.out)  # before the store opens: bad input creates nothing
    store = Store(args.cache_dir)
    step = resolve_step(store, args.run_id, args.step)
    arrays = store.load_features(args.run_id, step)
    try:
        write_atomic(out, lambda f: np.savez(f, **arrays))
    except OSError as e:
        raise ConfigError("out", f"a file dpviz can write ({e.strerror or type(e).__name__})", args.out) from None
    print(f"wrote {out} (step {step}: {', '.join(f'{k} {v.shape}' for k, v in arrays.items())})")
    return 0


def _output_file(text: str) -> Path:
    """``text`` as a file to create or replace: not empty, not a folder, in an existing folder, and not
    a device, FIFO or socket (nor a link to one): the export replaces what is there by renaming a new
    file over it, which would swap a device node such as /dev/null for a regular file."""
    out = Path(text)
    if not text.strip() or out.name in ("", ".", "..") or out.is_dir():
        raise ConfigError("out", "a file name (not a folder) in an existing folder", text)
    if not out.parent.is_dir():
        raise ConfigError("out", "a file in an existing folder", text)
    if out.exists() and not out.is_file():  # both follow a link, so a link to a device is refused too
        raise ConfigError("out", "a regular file to create or replace (this is a device, FIFO or socket); "
                          "choose a file name", text)
    return out
