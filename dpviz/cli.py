"""Command line: ``python -m dpviz run|list|show|delete``.

Every `RunConfig` field is a flag (``--lp-fraction 0.3``); ``--config FILE``
(JSON or TOML) sets fields first and flags override it. Bad input prints one
line naming the field and exits with code 2; the store is not touched.
"""

from __future__ import annotations

import argparse
import threading
import json
import math
import os
import sys
import time
from dataclasses import fields
from pathlib import Path

from .config import RunConfig, load_config_file, parse_epsilon, switched_off
from .errors import ConfigError, DpvizError
from .storecheck import no_new_store_on_error

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        raise ConfigError("arguments", message)


def _config_flags(p: argparse.ArgumentParser, skip=()) -> None:
    """Every RunConfig field as a flag: shared ones in one group, each strategy's own in its group."""
    from . import strategies

    g = p.add_argument_group("run configuration (see RunConfig)")
    groups = {f: (cls, prm) for cls in strategies.REGISTRY.values() for prm in cls.params for f in [prm.name]}
    owned: dict[str, argparse._ArgumentGroup] = {}
    for f in fields(RunConfig):
        if f.name in skip:
            continue
        helptext = f"default: {f.default}"
        if f.name == "strategy":
            helptext = f"one of {', '.join(strategies.names())} (see `strategies`); {helptext}"
        box = g
        if f.name in groups:
            cls, prm = groups[f.name]
            box = owned.setdefault(cls.name, p.add_argument_group(f"strategy {cls.name} ({cls.label})"))
            helptext = f"{prm.help}; {helptext}" if prm.help else helptext
        box.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None, metavar="V", help=helptext)
    g.add_argument("--config", help="JSON or TOML file of RunConfig fields (flags override it)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m dpviz", description="Differentially private fine-tuning lab.")
    p.add_argument("--cache-dir", default=None, help="store folder (default: $DPVIZ_CACHE_DIR or ./cache)")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="train one configuration (or answer it from the cache)")
    _config_flags(r)
    r.add_argument("--force", action="store_true", help="retrain even if an identical run is stored")
    r.add_argument("--json", action="store_true", help="print the JSON summary on stdout")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    au = sub.add_parser("audit", help="audit a configuration empirically: train it once with canaries and "
                        "bound ε from below (beside the accountant's ε, which bounds it from above)")
    _config_flags(au)
    au.add_argument("--canaries", default="1000", metavar="M", help="canaries, each included with probability ½")
    au.add_argument("--threat", default=None, metavar="T", help="white-box (gradient canaries, every update "
                    "seen; the default) or black-box (input canaries, final model)")
    au.add_argument("--kind", default=None, metavar="K", help="black-box canaries: mislabeled (default) or ood")
    au.add_argument("--confidence", default="0.95", metavar="C", help="confidence of the lower bound")
    au.add_argument("--audit-seed", default="0", metavar="S",
                    help="the auditor's seed (inclusion bits, canaries); --seed stays the run's own")
    au.add_argument("--force", action="store_true", help="audit again even if this audit is stored")
    au.add_argument("--sweep", action="store_true", help="audit every strategy × ε × threat below instead "
                    "(stored audits answer at once: a stopped sweep resumes)")
    au.add_argument("--sweep-strategies", nargs="+", default=None, metavar="S", help="(default: --strategy)")
    au.add_argument("--sweep-epsilons", nargs="+", default=None, metavar="E", help="(default: 0.5 1 2 4 8 inf)")
    au.add_argument("--sweep-threats", nargs="+", default=None, metavar="T", help="(default: both)")
    au.add_argument("--json", action="store_true", help="print the JSON report (scores included) on stdout")
    au.add_argument("--quiet", action="store_true", help="no progress bar")
    th = sub.add_parser("theory", help="the theory lab: Ke et al. 2024's two-layer setting under Langevin diffusion "
                        "(LP, FFT, LP-FFT over time; --utility: loss against the LP share; --overlay: real DP-SGD)")
    _theory_flags(th)
    ls = sub.add_parser("list", help="list stored runs")
    ls.add_argument("--status", default=None, choices=["queued", "running", "finished", "failed", "cancelled",
                                                        "interrupted"])
    ls.add_argument("--json", action="store_true")
    sh = sub.add_parser("show", help="show one stored run")
    sh.add_argument("run_id")
    sh.add_argument("--json", action="store_true")
    de = sub.add_parser("delete", help="delete stored runs and their files")
    de.add_argument("run_ids", nargs="+")
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
                    "of this store trains (what a run's detached background analyses do)")
    from .cli_sweeps import add_parsers

    add_parsers(sub, _config_flags)  # sweep, tune, worker
    ac = sub.add_parser("accountants", help="σ each accountant needs for (ε, δ) as the batch size grows")
    ac.add_argument("--epsilon", type=float, required=True)
    ac.add_argument("--delta", type=float, required=True)
    ac.add_argument("--epochs", type=int, required=True)
    ac.add_argument("--dataset-size", type=int, required=True)
    ac.add_argument("--batch-sizes", type=int, nargs="+", required=True)
    ac.add_argument("--accountants", nargs="+", default=["rdp", "gdp", "prv"])
    ac.add_argument("--json", action="store_true")
    st = sub.add_parser("strategies", help="the registered strategies: their fields, learning rates and phases")
    st.add_argument("--json", action="store_true")
    fe = sub.add_parser("features", help="export a checkpoint's per-layer features (layer_0 = input)")
    fe.add_argument("run_id")
    fe.add_argument("--step", type=int, default=None)
    fe.add_argument("--out", required=True, help="output .npz file")
    rp = sub.add_parser("reproduce", help="the reproduction scorecard: each seed paper's headline claims measured "
                        "on the default task with auto learning rates (resumable: finished runs are reused)")
    rp.add_argument("--seeds", type=int, default=3, help="seeds per experiment (>= 1; 3 gives mean ± std)")
    rp.add_argument("--claims", nargs="+", default=None, metavar="ID", help="claim ids (default: all; see --list)")
    rp.add_argument("--list", action="store_true", help="list the claims and exit")
    rp.add_argument("--json", action="store_true")
    return p


def config_from_args(args) -> RunConfig:
    d = load_config_file(args.config) if args.config else {}
    d.update({f.name: getattr(args, f.name) for f in fields(RunConfig)
              if getattr(args, f.name, None) is not None})
    for k, v in list(d.items()):  # flags arrive as strings; "none" clears optional paths
        if isinstance(v, str) and v.lower() in ("none", "null") and k in ("data_dir", "weights"):
            d[k] = None
    return RunConfig.from_dict(d)


def _dump(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False, default=lambda o: None if isinstance(o, float) and math.isinf(o) else str(o))


def cmd_run(args) -> int:
    from . import runner

    cfg = config_from_args(args)
    if not cfg.private:
        print("dpviz: note: epsilon = inf: this run trains WITHOUT differential privacy (no clipping, no noise)",
              file=sys.stderr)
    hit = None if args.force else runner.cached(cfg, cache_dir=args.cache_dir)  # torch-free
    summary = hit or _train(cfg, args)
    if summary is None:
        return 130
    print(_dump(summary) if args.json else _text(summary))
    if not summary.get("cached"):
        _analyze_later(summary["run_id"], args.cache_dir)
    return 0


def _train(cfg, args) -> dict | None:
    """Train ``cfg`` in this thread with a progress bar; None when cancelled with Ctrl-C.

    The first Ctrl-C stops the run at its next step (stored as cancelled); a second one interrupts
    at once. No analyses run here: the command returns as soon as training ends, and the checkpoints'
    background analyses run afterwards in a detached process (`_analyze_later`)."""
    import signal

    from . import idle, runner
    from .errors import Cancelled
    from .privacy import ahead
    from .store import Store

    cancel = threading.Event()
    progress = _Progress(cfg, args.quiet)

    def on_sigint(signum, frame):
        cancel.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = signal.signal(signal.SIGINT, on_sigint)
    store = Store(args.cache_dir)
    early = ahead.start(cfg)  # σ and the ε curve in a second process while this one imports torch
    try:
        with idle.training(store.root):  # background analyses of earlier runs wait meanwhile
            return runner.run(cfg, store=store, force=args.force, progress=progress, cancel=cancel, ahead=early)
    except (Cancelled, KeyboardInterrupt):
        print("dpviz: run cancelled", file=sys.stderr)
        return None
    finally:
        signal.signal(signal.SIGINT, previous)
        if early is not None:
            early.close()
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


class _Progress:
    """A training command's progress bar on stderr (none with --quiet), created at the first step."""

    def __init__(self, cfg, quiet: bool):
        self.cfg, self.quiet, self.bar = cfg, quiet, None

    def __call__(self, step, total, last):
        if not self.quiet:
            self.bar = self.bar or _bar(self.cfg, total)
            _update(self.bar, step, last)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _bar(cfg, total):
    from tqdm import tqdm

    return tqdm(total=total, desc=f"{cfg.strategy} ε={cfg.epsilon:g}", file=sys.stderr, unit="step")


def _update(bar, step, last):
    bar.n = step
    bar.set_postfix({k: f"{v:.3g}" for k, v in last.items() if v is not None}, refresh=True)


def _text(s: dict) -> str:
    if str(s["config"].get("epsilon")) in ("inf", "None"):
        eps = "NO DP (ε = inf: trained without privacy)"
    elif s.get("epsilon_spent") is not None:
        eps = f"ε spent {s['epsilon_spent']:.4g}"
        if s.get("epsilon_gdp_approx") is not None:  # GDP named: the bound is PRV's, GDP's figure beside it
            eps += f" (PRV bound; GDP approximation {s['epsilon_gdp_approx']:.4g})"
    else:  # stopped before the end: the budget bounds it; the last recorded step says how far it got
        rec = s.get("epsilon_recorded")
        seen = f", {rec[1]:.4g} recorded at step {rec[0]}" if rec else ""
        eps = f"{s.get('status', 'stopped')} at step {s.get('step') or 0}: ε spent ≤ {s['config']['epsilon']:g}{seen}"
    acc = "-" if s.get("test_accuracy") is None else f"{s['test_accuracy']:.4f}"
    src = " (from cache)" if s.get("cached") else ""
    return f"{s['run_id']}  {s['config']['strategy']:<8} test acc {acc}  {eps}{src}"


def cmd_list(args) -> int:
    from .runner import summary_of
    from .store import Store

    store = Store(args.cache_dir)
    # A row whose JSON is garbled is listed as "damaged" with what to do; the others as usual.
    rows = [r if r["status"] == "damaged" else summary_of(r, store)
            for r in store.list_runs(args.status, damaged=True)]
    if args.json:
        print(_dump(rows))
    else:
        for s in rows:
            print(f"{s['status']:<11} " + (s["error"] if s["status"] == "damaged" else _text(s)))
    return 0


def cmd_show(args) -> int:
    from .runner import summary_of
    from .store import Store

    store = Store(args.cache_dir)
    s = summary_of(store.get_run(args.run_id), store)
    print(_dump(s) if args.json else _dump(s))
    return 0


def cmd_delete(args) -> int:
    from .store import Store

    store = Store(args.cache_dir)
    for rid in args.run_ids:
        store.known(rid)  # all ids must exist before any is deleted (a run whose row is garbled too)
    for rid in args.run_ids:
        store.delete_run(rid)
        print(f"deleted {rid}")
    return 0


def _at_least(args, name: str, low: int) -> None:
    v = getattr(args, name)
    if v is not None and v < low:
        raise ConfigError(name, f"an integer >= {low}", v)


def cmd_analyze(args) -> int:
    from . import idle
    from .store import Store

    store = Store(args.cache_dir)
    if args.analysis == "all" and args.when_idle:
        # The everyday pattern is a run, then the next run at once: let that command take the training
        # lock before this process imports torch beside it, then wait until nothing trains.
        time.sleep(idle.GRACE_S)
        idle.wait_until_idle(store.root)
    from .analyses.service import analyze, analyze_missing

    if args.analysis == "all":  # every background analysis of every checkpoint that is not stored yet
        wait = (lambda: idle.wait_until_idle(store.root)) if args.when_idle else None
        done = analyze_missing(store, args.run_id, before=wait)
        if not args.quiet:
            print(_dump(done) if args.json else f"{len(done)} analyses computed")
        return 0
    params = {k: v for k, v in (("k", args.k), ("method", args.method)) if v is not None}
    out = analyze(store, args.run_id, args.analysis, step=args.step, **params)
    if args.json:
        print(_dump(out))
    else:
        shown = {k: v for k, v in out.items() if k not in ("coords", "labels")}
        print("\n".join(f"{k}: {v}" for k, v in shown.items()))
    return 0


def _number(value: str, field: str, kind=float):
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(field, f"a{'n integer' if kind is int else ' number'}", value) from None


def cmd_audit(args) -> int:
    from .audit import AuditSpec, audit

    cfg = config_from_args(args)
    given = [f for f in ("sweep_strategies", "sweep_epsilons", "sweep_threats") if getattr(args, f) is not None]
    if given and not args.sweep:
        raise ConfigError(given[0], "only with --sweep (an audit of one configuration ignores it)")
    if args.sweep and args.threat is not None:
        raise ConfigError("threat", "not with --sweep: a sweep's threats are --sweep-threats")
    threat = args.threat or ("black-box" if args.kind and args.sweep else "white-box")
    spec = AuditSpec(canaries=_number(args.canaries, "canaries", int), threat=threat,
                     kind=args.kind or "mislabeled", confidence=_number(args.confidence, "confidence"),
                     seed=_number(args.audit_seed, "audit_seed", int))
    if args.sweep:
        return _audit_sweep(args, cfg, spec)
    progress = _Progress(cfg, args.quiet)
    try:
        r = audit(cfg, spec, cache_dir=args.cache_dir, force=args.force, progress=progress)
    finally:
        progress.close()
    print(_dump(r) if args.json else _audit_text(r))
    return 0


def _audit_sweep(args, cfg, spec) -> int:
    from .audit import sweep

    axes = dict(strategies=args.sweep_strategies or [cfg.strategy],
                epsilons=[parse_epsilon(str(e), "sweep_epsilons") for e in args.sweep_epsilons or sweep.EPSILONS],
                threats=args.sweep_threats or list(sweep.THREATS))
    sweep.plan(cfg, **axes)  # every point validated before the first trains

    def progress(done, total, label):
        if not args.quiet:
            print(f"[{done}/{total}] {label}", file=sys.stderr, flush=True)

    rows = sweep.sweep(cfg, spec, cache_dir=args.cache_dir, progress=progress, **axes)
    print(_dump(rows) if args.json else "\n".join(
        f"{r['strategy']:>8} ε={'∞' if r['epsilon'] is None else format(r['epsilon'], 'g'):<4} {r['threat']:<9} "
        f"ε_lb {r['epsilon_lb']:.3f}  ε spent {r['epsilon_spent'] or float('inf'):.3f}  ceiling {r['ceiling']:.2f}"
        for r in rows))
    return 0


def _audit_text(r: dict) -> str:
    eps = ("∞ (no DP)" if r["epsilon"] is None
           else f"{r['epsilon']:g} (accountant's ε spent {r['epsilon_spent']:.4g})")
    lines = [f"audit {r['audit_key']}{' (stored)' if r.get('cached') else ''}: {r['threat']}, "
             f"{r['canaries']} canaries ({r['included']} included), confidence {r['confidence']:g}",
             f"  ε = {eps}",
             f"  ε_lb = {r['epsilon_lb']:.3f} (one run), {r['epsilon_lb_fdp']:.3f} (f-DP); "
             f"{r['correct']} of {r['guesses']} guesses right; ceiling {r['ceiling']:.2f} for this m",
             f"  AUC {r['auc']:.3f}, TPR {r['tpr_at_fpr_1pct']:.3f} at FPR 1 %, {r['tpr_at_fpr_01pct']:.3f} at 0.1 %"]
    if r.get("ideal"):
        lines.append(f"  ideal attack (exact mechanism, same m): ε_lb {r['ideal']['epsilon_lb_fdp']:.3f} (f-DP)")
    return "\n".join(lines)


def _theory_flags(p: argparse.ArgumentParser) -> None:
    from .theory import Setting

    for f in fields(Setting):
        p.add_argument(f"--{f.name.replace('_', '-')}", default=None, metavar=f.name.upper(),
                       help=f"(default {f.default})")
    p.add_argument("--utility", action="store_true", help="also the utility curve over the LP share p")
    p.add_argument("--overlay", default=None, metavar="S", help="also train lp or fft with dpviz's DP-SGD")
    p.add_argument("--json", action="store_true", help="print the curves as JSON")


def cmd_theory(args) -> int:
    from .theory import Setting, curves, overlay, readings, utility
    from .theory.overlay import STRATEGIES as OVERLAYS

    kw = {}
    for f in fields(Setting):
        v = getattr(args, f.name)
        if v is not None:
            kw[f.name] = (v if isinstance(f.default, str) else parse_epsilon(v) if f.name == "epsilon"
                          else _number(v, f.name, type(f.default)))
    if args.overlay is not None and args.overlay not in OVERLAYS:  # checked before the curves are computed
        raise ConfigError("overlay", f"{' or '.join(OVERLAYS)} (the strategy trained by DP-SGD over the diffusion)",
                          args.overlay)
    s = Setting(**kw)
    c = curves(s)
    u = utility(s) if args.utility else None
    o = overlay(s, strategy=args.overlay) if args.overlay else None
    if args.json:
        print(_dump({"curves": c.as_dict(), "utility": u and u.as_dict(), "overlay": o}))
        return 0
    print(f"theory lab: noise s = {c.noise:.4g} for ε = {s.epsilon:g}, δ = {s.delta:g}, T = {s.time:g}")
    lines = [*readings.readings(c).values(), *([readings.utility_reading(u)] if u else []),
             *([readings.overlay_reading(o)] if o else [])]
    print("\n".join("  " + t.replace("**", "") for t in lines))
    return 0


def cmd_accountants(args) -> int:
    from .config import ACCOUNTANTS
    from .privacy.accounting import sigma_by_batch_size

    checks = (("epsilon", args.epsilon > 0 and math.isfinite(args.epsilon), "a finite number > 0"),
              ("epochs", args.epochs >= 1, "an integer >= 1"),
              ("dataset_size", args.dataset_size >= 1, "an integer >= 1"),
              ("batch_sizes", all(1 <= b <= args.dataset_size for b in args.batch_sizes),
               f"integers in [1, dataset_size = {args.dataset_size}]"),
              ("delta", 0 < args.delta <= 1 / max(args.dataset_size, 1), "a number in (0, 1/dataset_size]"),
              ("accountants", set(args.accountants) <= set(ACCOUNTANTS), f"some of {', '.join(ACCOUNTANTS)}"))
    for name, ok, allowed in checks:
        if not ok:
            raise ConfigError(name, allowed, getattr(args, name))
    try:
        rows = sigma_by_batch_size(epsilon=args.epsilon, delta=args.delta, epochs=args.epochs,
                                   dataset_size=args.dataset_size, batch_sizes=args.batch_sizes,
                                   accountants=args.accountants)
    except ValueError as e:
        raise ConfigError("epsilon", str(e).split(": ", 1)[-1]) from None
    print(_dump(rows) if args.json else "\n".join(
        f"{r['accountant']:>4}  B={r['batch_size']:<6} q={r['sample_rate']:.4g}  T={r['steps']:<6} "
        + (f"σ: none ({r['error']})" if r["error"] else
           f"σ={r['noise_multiplier']:.4f}  σ²/B={r['sigma2_over_b']:.4g}") for r in rows))
    return 0


def cmd_features(args) -> int:
    import numpy as np

    from .analyses.service import resolve_step
    from .safefile import write_atomic
    from .store import Store

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


def cmd_strategies(args) -> int:
    from . import strategies

    rows = [{"name": c.name, "label": c.label, "fields": list(c.fields()), "lr_fields": list(c.lr_fields),
             "color": c.color, "min_epochs": c.min_epochs, "grad_sample_modes": list(c.grad_sample_modes),
             "doc": (sys.modules[c.__module__].__doc__ or "").strip().split("\n")[0]}
            for c in strategies.REGISTRY.values()]
    if args.json:
        print(_dump(rows))
        return 0
    for r in rows:
        own = ", ".join("--" + f.replace("_", "-") for f in r["fields"] + r["lr_fields"])
        print(f"{r['name']:<10} {r['label']}  [{own}]\n{'':<10} {r['doc']}")
    return 0


def cmd_reproduce(args) -> int:
    from . import reproduce

    if args.list:
        print("\n".join(f"{c.id:<16} [{reproduce.PAPERS[c.seed][0]}] {c.sentence}  ({c.preset})"
                        for c in reproduce.CLAIMS))
        return 0
    unknown = sorted(set(args.claims or ()) - set(reproduce.REGISTRY))
    if unknown:
        raise ConfigError("claims", f"some of {', '.join(reproduce.REGISTRY)}", unknown[0])
    if args.seeds < 1:
        raise ConfigError("seeds", "an integer >= 1", args.seeds)

    def progress(done, total, claim):
        print(f"\r[{done}/{total}] {claim:<16}", end="", file=sys.stderr, flush=True)

    rows = reproduce.run(args.claims, seeds=tuple(range(args.seeds)), cache_dir=args.cache_dir, progress=progress)
    print(file=sys.stderr)
    if args.json:
        print(_dump(rows))
    else:
        for r in rows:
            print(f"{r['id']:<16} {r['verdict']:<9} {r['claim']}\n{'':<26} {r['reading']}")
    return 0


def main(argv=None) -> int:
    from .cli_sweeps import cmd_sweep, cmd_tune, cmd_worker

    try:
        args = build_parser().parse_args(argv)
        cmds = {"run": cmd_run, "list": cmd_list, "show": cmd_show, "delete": cmd_delete,
                "analyze": cmd_analyze, "features": cmd_features, "sweep": cmd_sweep, "worker": cmd_worker,
                "tune": cmd_tune, "accountants": cmd_accountants, "strategies": cmd_strategies,
                "reproduce": cmd_reproduce, "audit": cmd_audit, "theory": cmd_theory}
        with no_new_store_on_error(args.cache_dir):  # bad input found after the store opened leaves none
            return cmds[args.cmd](args)
    except DpvizError as e:
        print(f"dpviz: error: {e}".splitlines()[0], file=sys.stderr)
        return EXIT_USAGE
