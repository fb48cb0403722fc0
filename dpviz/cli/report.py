"""``python -m dpviz report RUN_ID…`` or ``--study NAME``: one self-contained HTML file and a PDF
(`dpviz.studies.runs_report`, `study_report`)."""

from __future__ import annotations

from dpviz.errors import ConfigError


def add_report(sub) -> None:
    p = sub.add_parser("report", help="a report, whole: runs or a study as one self-contained HTML file and a PDF "
                       "(configurations, privacy statement, figures, tables, readings, the commands that reproduce it)")
    p.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="stored runs (python -m dpviz list)")
    p.add_argument("--study", default=None, metavar="NAME", help="a study's results instead of runs")
    p.add_argument("--task", default="default", metavar="TASK", help="the study's task (default: default)")
    p.add_argument("--scale", default=None, metavar="SIZE", help="the study's size (default: the task's own)")
    p.add_argument("--set", nargs="+", action="extend", default=None, metavar="FIELD=VALUE", dest="changes",
                   help="the fields the study set on every run")
    p.add_argument("--out", default=".", metavar="DIR", help="the folder the files go to (default: here)")
    p.add_argument("--no-pdf", action="store_true", help="the HTML only (no Chromium needed)")
    p.set_defaults(handler=cmd_report)


PARSERS = {"report": add_report}


def cmd_report(args) -> int:
    from dpviz import studies
    from dpviz.store import Store

    if bool(args.run_ids) == bool(args.study):
        raise ConfigError("report", "run ids or --study NAME (one of the two)", " ".join(args.run_ids) or "nothing")
    if args.study:
        from dpviz.tasks import task

        study = studies.get(args.study)
        task(args.task, "task")
        res = studies.stored(study, task=args.task, scale=args.scale, sets=studies.parse_sets(args.changes),
                             cache_dir=args.cache_dir)
        name, page = studies.study_report(res)
    else:
        name, page = studies.runs_report(Store(args.cache_dir), args.run_ids)
    for path in studies.write_report(name, page, args.out, pdf=not args.no_pdf):
        print(path)
    return 0
