"""Command line: ``python -m dpviz run|list|show|delete|…`` (`main`, and `build_parser` behind it).

Every `RunConfig` field is a flag (``--lp-fraction 0.3``); ``--config FILE``
(JSON or TOML) sets fields first and flags override it. Bad input prints one
line naming the field and exits with code 2; the store is not touched.

The subcommands live in one module per group, each adding its own parsers (`PARSERS`) with their
commands as handlers: `runs` (run, list, show, delete, analyze, features), `audit`, `verify`, `sweeps` (sweep,
tune, worker) and `info` (accountants, strategies, reproduce, theory); `common` holds what they share.
This module imports the groups; they import only `common`.
"""

from __future__ import annotations

import contextlib
import os
import sys

from dpviz import catalog
from dpviz.errors import DpvizError
from dpviz.store import no_new_store_on_error
from dpviz.cli import audit, info, report, runs, studies, sweeps, verify
from dpviz.cli.common import Parser, fail

# The order ``--help`` lists them in.
ORDER = ("run", "audit", "theory", "list", "show", "verify", "delete", "analyze", "sweep", "tune", "worker", "accountants",
         "strategies", "features", "reproduce", "study", "report")
PARSERS = {**runs.PARSERS, **audit.PARSERS, **sweeps.PARSERS, **info.PARSERS, **verify.PARSERS, **studies.PARSERS, **report.PARSERS}


def build_parser() -> Parser:
    """The parser of every subcommand; each parsed namespace carries its command as ``handler``."""
    p = Parser(prog="python -m dpviz", description="Differentially private fine-tuning lab.")
    p.add_argument("--cache-dir", default=None, help="store folder (default: $DPVIZ_CACHE_DIR or ./cache)")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    for name in ORDER:
        PARSERS[name](sub)
    return p


@contextlib.contextmanager
def _store_in_env(cache_dir):
    """While the command runs, ``--cache-dir`` is ``$DPVIZ_CACHE_DIR``: what it caches beyond its runs (a text
    dataset's token ids) and the processes it starts use the command's store, not the working folder's."""
    if not cache_dir:
        yield
        return
    before = os.environ.get("DPVIZ_CACHE_DIR")
    os.environ["DPVIZ_CACHE_DIR"] = os.path.abspath(cache_dir)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("DPVIZ_CACHE_DIR", None)
        else:
            os.environ["DPVIZ_CACHE_DIR"] = before


def main(argv=None) -> int:
    """Run the command ``argv`` names (default: ``sys.argv[1:]``); its exit code (2: bad input, one line)."""
    try:
        catalog.check_plugins()  # a plugin named in the environment that did not import: one line
        args = build_parser().parse_args(argv)
        with _store_in_env(args.cache_dir), no_new_store_on_error(args.cache_dir):  # bad input found after
            return args.handler(args)  # the store opened leaves none
    except DpvizError as e:
        return fail(e)
    except BrokenPipeError:  # `python -m dpviz list | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
