"""Privacy audits: ``audit`` (one configuration) and ``audit --sweep`` (strategy × ε × threat).

An audit trains the configuration once with canaries and bounds ε from below, beside the
accountant's ε that bounds it from above (see `dpviz.audit`). Stored audits answer at once, so a
stopped sweep resumes. `PARSERS` maps the subcommand to the function that adds its parser.
"""

from __future__ import annotations

import sys

from dpviz.config import parse_epsilon
from dpviz.errors import ConfigError
from dpviz.cli.common import Progress, config_flags, config_from_args, dump, number

SWEEP_AXES = ("sweep_strategies", "sweep_epsilons", "sweep_threats")


def add_audit(sub) -> None:
    au = sub.add_parser("audit", help="audit a configuration empirically: train it once with canaries and "
                        "bound ε from below (beside the accountant's ε, which bounds it from above)")
    config_flags(au)
    au.add_argument("--canaries", default="1000", metavar="M", help="canaries, each included with probability ½")
    au.add_argument("--threat", default=None, metavar="T", help="white-box (gradient canaries, every update "
                    "seen; the default) or black-box (input canaries, final model)")
    au.add_argument("--kind", default=None, metavar="K", help="black-box canaries: mislabeled (default) or ood")
    au.add_argument("--confidence", default="0.95", metavar="C", help="confidence of the lower bound, for both "
                    "bounds together (each is tested at half the significance)")
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
    au.set_defaults(handler=cmd_audit)


PARSERS = {"audit": add_audit}


def cmd_audit(args) -> int:
    from dpviz.audit import audit

    cfg = config_from_args(args)
    spec = _spec(args)
    if args.sweep:
        return _audit_sweep(args, cfg, spec)
    progress = Progress(cfg, args.quiet)
    try:
        r = audit(cfg, spec, cache_dir=args.cache_dir, force=args.force, progress=progress)
    finally:
        progress.close()
    print(dump(r) if args.json else _audit_text(r))
    return 0


def _spec(args):
    """The auditor's `AuditSpec` from the flags; sweep flags only with --sweep, --threat only without."""
    from dpviz.audit import AuditSpec

    given = [f for f in SWEEP_AXES if getattr(args, f) is not None]
    if given and not args.sweep:
        raise ConfigError(given[0], "only with --sweep (an audit of one configuration ignores it)")
    if args.sweep and args.threat is not None:
        raise ConfigError("threat", "not with --sweep: a sweep's threats are --sweep-threats")
    threat = args.threat or ("black-box" if args.kind and args.sweep else "white-box")
    return AuditSpec(canaries=number(args.canaries, "canaries", int), threat=threat,
                     kind=args.kind or "mislabeled", confidence=number(args.confidence, "confidence"),
                     seed=number(args.audit_seed, "audit_seed", int))


def _audit_sweep(args, cfg, spec) -> int:
    from dpviz.audit import sweep

    axes = dict(strategies=args.sweep_strategies or [cfg.strategy],
                epsilons=[parse_epsilon(str(e), "sweep_epsilons") for e in args.sweep_epsilons or sweep.EPSILONS],
                threats=args.sweep_threats or list(sweep.THREATS))
    sweep.plan(cfg, **axes)  # every point validated before the first trains

    def progress(done, total, label):
        if not args.quiet:
            print(f"[{done}/{total}] {label}", file=sys.stderr, flush=True)

    rows = sweep.sweep(cfg, spec, cache_dir=args.cache_dir, progress=progress, **axes)
    print(dump(rows) if args.json else "\n".join(_sweep_row(r) for r in rows))
    return 0


def _sweep_row(r: dict) -> str:
    eps = "∞" if r["epsilon"] is None else format(r["epsilon"], "g")
    return (f"{r['strategy']:>8} ε={eps:<4} {r['threat']:<9} ε_lb {r['epsilon_lb']:.3f}  "
            f"ε spent {r['epsilon_spent'] or float('inf'):.3f}  ceiling {r['ceiling']:.2f}")


def _audit_text(r: dict) -> str:
    eps = ("∞ (no DP)" if r["epsilon"] is None
           else f"{r['epsilon']:g} (accountant's ε spent {r['epsilon_spent']:.4g})")
    lines = [f"audit {r['audit_key']}{' (stored)' if r.get('cached') else ''}: {r['threat']}, "
             f"{r['canaries']} canaries ({r['included']} included)",
             f"  ε = {eps}",
             f"  ε_lb = {r['epsilon_lb']:.3f} (one run), {r['epsilon_lb_fdp']:.3f} (f-DP, assumes a Gaussian trade-off "
             f"curve); {r['correct']} of {r['guesses']} guesses right; ceiling {r['ceiling']:.2f} for this m",
             f"  confidence {r['confidence']:g} " + ("for both bounds together (each at significance "
                                                  f"{r['bound_significance']:g})" if "bound_significance" in r
                                                  else "for each bound alone"),
             f"  AUC {r['auc']:.3f}, TPR {r['tpr_at_fpr_1pct']:.3f} at FPR 1 %, {r['tpr_at_fpr_01pct']:.3f} at 0.1 %"]
    if r.get("ideal"):
        lines.append(f"  ideal attack (exact mechanism, same m): ε_lb {r['ideal']['epsilon_lb_fdp']:.3f} (f-DP)")
    return "\n".join(lines)
