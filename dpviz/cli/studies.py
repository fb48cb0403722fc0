"""``python -m dpviz study list|run|show``: the registered studies (`dpviz.studies`), run on any task, read from
their numbers."""

from __future__ import annotations

import sys

from dpviz.cli.common import dump
from dpviz.errors import ConfigError


def add_study(sub) -> None:
    from dpviz.tasks import TASKS

    p = sub.add_parser("study", help="the studies behind dpviz's findings (DP-SGD beside BandMF, the best LP "
                       "share, …): list them, run one on a task (resumable, in pieces), show its reading")
    verbs = p.add_subparsers(dest="verb", required=True, parser_class=type(p))
    ls = verbs.add_parser("list", help="the registered studies: what each asks, its axes and what it reads")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=cmd_list)
    for verb, helptext in (("run", "run a study: train what its cells need (each configuration once; finished runs "
                                   "answer from the store, a stopped study resumes) and read it"),
                           ("show", "a study's results so far and their reading (the shipped results where this "
                                    "store has none), training nothing")):
        v = verbs.add_parser(verb, help=helptext)
        v.add_argument("name", metavar="NAME", help="a study (python -m dpviz study list)")
        v.add_argument("--task", default="default", metavar="TASK",
                       help=f"the task: {', '.join(TASKS)} (your own data: --set dataset=… data_dir=…)")
        v.add_argument("--scale", default=None, metavar="SIZE",
                       help="the scorecard's size of the task: small, medium or large (default: the task's own)")
        v.add_argument("--set", nargs="+", action="extend", default=None, metavar="FIELD=VALUE", dest="changes",
                       help="set a RunConfig field on every run (e.g. train_size=64, or a data folder)")
        v.add_argument("--json", action="store_true")
        if verb == "run":
            v.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="seeds of every cell (default 0 1 2)")
            v.add_argument("--vary", nargs="+", action="extend", default=None, metavar="AXIS=V1,V2",
                           help="other values for an axis of the study (e.g. epsilon=1,4,16)")
            v.add_argument("--keep", default="all", metavar="WHAT",
                           help="all (default: every checkpoint, for the pages), or results: prune a finished "
                                "run's checkpoints and weights once its numbers are read, so a study in pieces "
                                "carries tens of MiB from one piece to the next")
            v.add_argument("--stop-after", type=float, default=None, metavar="MINUTES",
                           help="stop between runs after this many minutes (a run in flight trains on to its "
                                "first checkpoint); the same command goes on later")
            v.add_argument("--device", default=None, choices=("auto", "cpu", "cuda"),
                           help="where the runs train (not part of a run's hash)")
        v.set_defaults(handler=cmd_run if verb == "run" else cmd_show)


PARSERS = {"study": add_study}


def cmd_list(args) -> int:
    from dpviz import studies

    rows = [{"name": s.name, "title": s.title, "question": s.question,
             "axes": {k: list(v) for k, v in s.axes.items()},
             "measures": [{"name": m.name, "label": m.label, "private": m.private} for m in s.measures],
             "seed_paper": s.seed_paper} for s in studies.STUDIES.values()]
    if args.json:
        print(dump(rows))
        return 0
    for r in rows:
        axes = "; ".join(f"{studies.axis_label(k)} ∈ {{{', '.join(map(str, v))}}}" for k, v in r["axes"].items())
        print(f"{r['name']:<10} {r['title']}\n{'':<11}{r['question']}\n{'':<11}axes: {axes}\n{'':<11}reads: "
              + ", ".join(m["label"] + (" (private statistic)" if m["private"] else "") for m in r["measures"]))
    return 0


def _vary(items) -> dict:
    from dpviz.studies import parse_value

    out = {}
    for item in items or ():
        axis, eq, values = item.partition("=")
        if not eq or not values:
            raise ConfigError("vary", "AXIS=V1,V2 (an axis of the study and its values)", item)
        out[axis] = tuple(parse_value(v) for v in values.split(","))
    return out


def _asked(args):
    from dpviz import studies
    from dpviz.tasks import task

    study = studies.get(args.name)
    task(args.task, "task")
    sets = studies.parse_sets(args.changes)
    if getattr(args, "device", None):
        sets["device"] = args.device
    return study, sets


def cmd_run(args) -> int:
    from dpviz import studies

    study, sets = _asked(args)
    if args.stop_after is not None and not 0 < args.stop_after < 10**6:
        raise ConfigError("stop-after", "minutes > 0", args.stop_after)
    vary = _vary(args.vary)

    def progress(done, total, label):
        print(f"[{done}/{total}] {label}", file=sys.stderr, flush=True)

    res = studies.run(study, task=args.task, scale=args.scale, seeds=tuple(args.seeds), sets=sets, vary=vary,
                      cache_dir=args.cache_dir, keep=args.keep, progress=progress,
                      stop_after=None if args.stop_after is None else args.stop_after * 60,
                      command=studies.command_line(study.name, args.task, args.scale, args.seeds, sets, vary,
                                                  args.keep))
    read, total = studies.counts(study, task=args.task, scale=args.scale, seeds=tuple(args.seeds), sets=sets,
                                vary=vary, cache_dir=args.cache_dir)
    total -= len(args.seeds) * len(res.refused)  # cells whose configuration cannot run on this task: said above
    if read < total:
        print(f"dpviz: stopped with {read} of {total} runs read; the same command goes on (read runs answer from "
              "the results file, a stopped run resumes from its last checkpoint)", file=sys.stderr)
    return _say(study, res, args.json)


def cmd_show(args) -> int:
    from dpviz import studies

    study, sets = _asked(args)
    return _say(study, studies.stored(study, task=args.task, scale=args.scale, sets=sets, cache_dir=args.cache_dir),
                args.json)


def _say(study, res, as_json: bool) -> int:
    from dpviz import studies

    verdict, sentence = studies.reading(study, res)
    private = [m.label for m in study.measures if m.private]
    if as_json:
        print(dump({**res.to_json(), "cells": [{k: v for k, v in e.items()} for e in res.cells.values()],
                    "verdict": verdict, "reading": sentence, "shipped_provenance": res.shipped_provenance,
                    "private_statistics": private}))
        return 0
    cols, rows = res.table(study)
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    print(f"{study.title} — {study.name} on {res.task}" + (f" at {res.scale}" if res.scale else ""))
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print(f"verdict: {verdict}\n{sentence}")
    if private:
        print(f"note: {', '.join(private)}: statistics of private data, NOT covered by the DP guarantee")
    if res.provenance:
        print(f"from: {studies.said(res.provenance)}")
    if res.shipped_provenance and any(e.get("source") == "shipped" for e in res.cells.values()):
        print(f"shipped cells from: {studies.said(res.shipped_provenance)}")
    return 0
