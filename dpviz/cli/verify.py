"""``verify RUN_ID``: the run's privacy check (`dpviz.audit.verify`): exit 0 when it passed, 1 when it failed or is
inconclusive, 2 on bad input; ``--replay`` checks a seeded run stored without one by training it again."""

from __future__ import annotations

from dpviz.cli.common import dump


def add_verify(sub) -> None:
    p = sub.add_parser("verify", help="a run's privacy check: each checked step the accounted mechanism, the "
                       "sampling as accounted, ε recomputed independently (exit 1 when it failed)")
    p.add_argument("run_id")
    p.add_argument("--replay", action="store_true", help="a seeded run stored without a check: train its "
                   "configuration again, unstored, with the check on, and keep the outcome with the run")
    p.add_argument("--json", action="store_true", help="print the JSON result on stdout")
    p.set_defaults(handler=cmd_verify)


PARSERS = {"verify": add_verify}


def cmd_verify(args) -> int:
    from dpviz.audit import verify
    from dpviz.store import Store

    r = verify.verify(args.run_id, store=Store(args.cache_dir), replay=args.replay)
    print(dump(r) if args.json else verify.text(r))
    return 0 if r["passed"] or not r["private"] else 1
