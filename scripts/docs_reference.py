"""The documentation's generated pages, written from the code at every build (an MkDocs hook, named in
mkdocs.yml), so the reference cannot drift from what dpviz accepts:

* ``reference/cli.md``: every subcommand of ``python -m dpviz`` and every flag, walked from the argparse
  parser `dpviz.cli.build_parser` builds (the same parser ``--help`` prints);
* ``reference/config.md``: every `RunConfig` field with its type, default and the values it may hold. The
  allowed values are what `RunConfig`'s own validation says when the field is given a value out of range,
  so the page quotes the checks themselves (`dpviz.fields`, `dpviz.strategies`);
* ``results/measured.md``: the results files benchmarks write (`bench/results.py`);
* ``results/studies.md``: every registered study (`dpviz.studies`) and every result of it shipped with dpviz,
  read by the studies' one reader, with its reading and provenance;
* ``reference/catalog.md``: the catalogue's datasets and backbones (`dpviz.catalog`), the strategies
  registry (`dpviz.strategies.REGISTRY`) and the tasks ``--preset`` names (`dpviz.tasks`).

(The tutorials are the notebooks of ``notebooks/``, linked from ``docs/tutorials/`` and rendered by
mkdocs-jupyter with the outputs stored in them.)

Only dpviz's own entries are documented: plugins named in the environment are not loaded. Run as a
script, it prints one page: ``python scripts/docs_reference.py cli|config|catalog|measured``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

for _variable in ("DPVIZ_PLUGINS", "DPVIZ_STRATEGIES"):  # the reference documents dpviz itself
    os.environ.pop(_variable, None)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# --- Markdown helpers ----------------------------------------------------------------------------------
def cell(text) -> str:
    """``text`` safe inside a Markdown table cell: one line, ``|`` and ``<`` escaped."""
    s = " ".join(str(text).split())
    return s.replace("|", "\\|").replace("<", "&lt;")


def code(text) -> str:
    return f"`{text}`" if text not in (None, "") else ""


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# --- the command line ----------------------------------------------------------------------------------
def subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    """Every (command path, parser) under ``parser``, in the order ``--help`` lists them, nested ones too."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = f"{prefix} {name}".strip()
                out.append((path, sub))
                out += subcommands(sub, path)
    return out


def flag_rows(parser: argparse.ArgumentParser) -> list[tuple[str, list[list[str]]]]:
    """(group title, rows) of ``parser``'s arguments: every option and positional but ``--help`` and the
    subcommand choice."""
    fmt = parser._get_formatter()
    groups = []
    for group in parser._action_groups:
        rows = []
        for a in group._group_actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            names = ", ".join(code(s) for s in a.option_strings) or code(a.dest)
            if a.option_strings and a.nargs != 0:
                metavar = a.metavar or a.dest.upper()
                if isinstance(metavar, tuple):
                    metavar = " ".join(metavar)
                if a.nargs in ("+", "*"):
                    metavar += " …"
                names += f" {code(metavar)}"
            if a.choices is not None:
                values = "one of " + ", ".join(code(c) for c in a.choices)
            else:
                values = ""
            default = "" if a.default in (None, argparse.SUPPRESS) or a.nargs == 0 else code(a.default)
            text = fmt._expand_help(a) if a.help and a.help != argparse.SUPPRESS else ""
            rows.append([names, text, values, default, "yes" if a.required else ""])
        if rows:
            groups.append((group.title or "arguments", rows))
    return groups


def cli_page() -> str:
    from dpviz.cli import build_parser

    parser = build_parser()
    out = ["# Command line\n",
           "Generated from the parser of `python -m dpviz` (`dpviz.cli.build_parser`) at every build of this site: "
           "each subcommand with every flag it takes. The `dpviz` command that `pip install` puts on the PATH is "
           "the same program. Bad input prints one line naming the field and exits with code 2.\n",
           "```text\n" + parser.format_usage().strip() + "\n```\n"]
    for title, rows in flag_rows(parser):
        out.append(f"Flags before the subcommand ({title}):\n")
        out.append(table(["flag", "what", "values", "default", "required"], rows))
    for path, sub in subcommands(parser):
        out.append(f"## `{path}`\n")
        if sub.description:
            out.append(sub.description.strip() + "\n")
        out.append("```text\n" + sub.format_usage().strip() + "\n```\n")
        for title, rows in flag_rows(sub):
            out.append(f"**{title[:1].upper() + title[1:]}**\n")
            out.append(table(["flag", "what", "values", "default", "required"], rows))
    return "\n".join(out)


# --- RunConfig -----------------------------------------------------------------------------------------
def field_docs() -> dict[str, str]:
    """Each field's description from the ``Attributes:`` section of `RunConfig`'s docstring."""
    from dpviz.config import RunConfig

    text = RunConfig.__doc__.split("Attributes:", 1)[1]
    docs, name = {}, None
    for line in text.splitlines():
        m = re.match(r"^ {8}(\w+): (.*)$", line)
        if m:
            name, docs[m.group(1)] = m.group(1), m.group(2).strip()
        elif name and line.strip():
            docs[name] += " " + line.strip()
    return docs


def _probes(f: dataclasses.Field) -> list:
    """Values out of range for field ``f``, to read the allowed values from the validation's message."""
    if f.default is None:  # a path or nothing
        return [""]
    if isinstance(f.default, str):
        return ["\u2205 not a value \u2205"]
    if isinstance(f.default, float):
        return [-1.0]
    return [-10**12, 10**12]


def allowed_values(name: str) -> str:
    """What `RunConfig` accepts for field ``name``, as its validation says it (every other field at its
    default, but the strategy: the one that owns the field, so that it is read). Raises when no probe is refused for this field: a field whose checks the page cannot quote
    fails the build instead of being documented without them."""
    from dpviz import strategies
    from dpviz.config import RunConfig
    from dpviz.errors import ConfigError

    field = next(f for f in dataclasses.fields(RunConfig) if f.name == name)
    base = {"strategy": cls.name for cls in strategies.REGISTRY.values() if name in cls.fields()}
    said = []
    for value in _probes(field):
        try:
            RunConfig(**{**base, name: value})
        except ConfigError as e:
            if e.field == name and e.allowed not in said:
                said.append(e.allowed)
    if not said:
        raise RuntimeError(f"RunConfig.{name}: no out-of-range probe was refused naming it; teach "
                           "scripts/docs_reference.py's _probes a value the validation refuses")
    return "; ".join(s[len("must be "):] if s.startswith("must be ") else s for s in said)


def config_page() -> str:
    from dpviz import strategies
    from dpviz.config import RunConfig
    from dpviz.fields import AUTO_FIELDS, TEXT_ONLY_FIELDS

    docs = field_docs()
    owner = {p.name: cls for cls in strategies.REGISTRY.values() for p in cls.params}
    rows = []
    for f in dataclasses.fields(RunConfig):
        default = "inf (no DP)" if isinstance(f.default, float) and math.isinf(f.default) else f.default
        notes = []
        if f.name in owner:
            notes.append(f"strategy `{owner[f.name].name}` only")
        if f.name in TEXT_ONLY_FIELDS:
            notes.append("text datasets only")
        if f.name in AUTO_FIELDS:
            notes.append('may be `"auto"`')
        rows.append([code(f.name), code("--" + f.name.replace("_", "-")), code(f.type), code(default),
                     allowed_values(f.name), "; ".join(notes), docs.get(f.name, "")])
    return "\n".join([
        "# RunConfig fields\n",
        "Generated from `dpviz.config.RunConfig` and its validation (`dpviz.fields`, `dpviz.strategies`) at every "
        "build of this site. A run is one `RunConfig`; every field is also a command-line flag of `run`, "
        "`sweep`, `tune` and `audit`, and a key of a `--config` JSON or TOML file. **Allowed** quotes what the "
        "validation says when the field is out of range; checks that need the data (δ ≤ 1/n, the blocks a "
        "backbone has, B ≤ n) run when the run is prepared.\n",
        table(["field", "flag", "type", "default", "allowed", "applies to", "what"], rows),
    ])


# --- the catalogue -------------------------------------------------------------------------------------
def catalog_page() -> str:
    from dpviz import catalog, strategies, tasks

    def shape(d):
        if d.shape is None:
            return ""
        n, c, s, k = d.shape
        return f"n = {n:,}, {k} classes" + (f", {c}×{s}×{s}" if c else "")

    datasets = [[code(d.name), d.label, d.modality, d.source, shape(d), code(d.proxy),
                 d.files or (f"default folder `{d.default_dir}`" if d.default_dir else "")]
                for d in catalog.DATASETS.values()]
    backbones = [[code(b.name), b.label, b.modality, b.source, "" if b.blocks is None else str(b.blocks)]
                 for b in catalog.BACKBONES.values()]
    strats = [[code(s.name), s.label, ", ".join(code(p.name) for p in s.params),
               ", ".join(code(f) for f in s.lr_fields), ", ".join(s.grad_sample_modes), str(s.min_epochs),
               code(s.color)] for s in strategies.REGISTRY.values()]
    task_rows = [[code(t.name), t.label, ", ".join(f"{k} = {v}" for k, v in t.fields.items()) or
                  "every `RunConfig` default"] for t in tasks.TASKS.values()]
    return "\n".join([
        "# Datasets, backbones, strategies\n",
        "Generated from `dpviz.catalog`, `dpviz.strategies.REGISTRY` and `dpviz.tasks` at every build of this "
        "site: the built-in entries, in the order menus list them. Your own datasets, backbones and "
        "strategies join them through `DPVIZ_PLUGINS` and `DPVIZ_STRATEGIES` "
        "([Real models and your data](../guides/real-models-and-your-data.md)).\n",
        "## Datasets\n",
        "**source**: *shipped* with a package dpviz installs, *generated* by dpviz (public by construction), "
        "*data_dir* (files in a folder you give) or *package* (an installed data package). **proxy**: the "
        "public dataset `auto` learning rates are searched on.\n",
        table(["name", "what", "modality", "source", "size", "proxy", "files"], datasets),
        "## Backbones\n",
        "**source**: *own* (dpviz's, pretrained on public data, weights shipped), *weights* (a file or folder "
        "you give with `--weights`) or *package* (weights an installed package ships).\n",
        table(["name", "what", "modality", "source", "blocks"], backbones),
        "## Strategies\n",
        "The registry `dpviz.strategies.REGISTRY`; a strategy's own fields are shown by the form only for it "
        "and refused for the others ([Strategies](../guides/strategies.md)).\n",
        table(["name", "what", "own fields", "learning rates", "per-sample gradient paths", "min epochs",
               "colour"], strats),
        "## Tasks\n",
        "What `--preset` (and `reproduce --task`) names: a dataset, a backbone and the settings that make a "
        "run of them finish on a 2-core CPU.\n",
        table(["name", "what", "fields"], task_rows),
    ])


# --- measured results ----------------------------------------------------------------------------------
RESULTS_MARK = re.compile(r"^<!-- results: ([\w.-]+) -->$", re.M)


def _results() -> dict[str, dict]:
    sys.path.insert(0, str(ROOT / "bench"))
    import results

    return {r["name"]: r for r in results.read_all()}


def results_block(r: dict, *, heading: bool = True) -> str:
    """One results file as Markdown: its title (``heading``), the command, date and machine, the table, the
    notes."""
    out = [f"## {r['title']}\n"] if heading else []
    out += [f"`{r['command']}` — {r['date']}, {r['machine']}.\n", table(r["columns"], r["rows"])]
    if r.get("notes"):
        out.append(r["notes"] + "\n")
    return "\n".join(out)


def measured_page() -> str:
    """Every results file under ``bench/results/`` (`bench/results.py`) as a table with its command, date
    and machine: the page is rewritten from the files at each build."""
    out = ["# Measured\n",
           "Each table below is generated from the results file the benchmark that measured it wrote "
           "(`bench/results/<name>.json`, by `bench/results.py`); running the command again rewrites it.\n"]
    return "\n".join(out + [results_block(r) for r in _results().values()])


STUDY_MARK = re.compile(r"^<!-- study: ([\w.-]+) -->$", re.M)


def study_block(res, *, heading: bool = True) -> str:
    """One study's results as Markdown: its reading, its table of numbers (mean ± sd over seeds per cell) and
    where they come from."""
    from dpviz import studies
    from dpviz.studies import results as study_results

    study = studies.get(res.study)
    verdict, sentence = studies.reading(study, res)
    cols, rows = res.table(study)
    where = [f"at {res.scale}"] if res.scale else []
    where += [f"{k} = {v}" for k, v in res.sets.items()]
    out = [f"### {study.title} on {res.task}" + (f" ({', '.join(where)})" if where else "") + "\n"] if heading else []
    out += [f"**{verdict}.** {sentence}\n", table(cols, rows)]
    private = [m.label for m in study.measures if m.private and any(res.stats(e["cell"], m.name)
                                                                   for e in res.cells.values())]
    if private:
        out.append(f"{', '.join(private)}: statistics of private data, NOT covered by the DP guarantee.\n")
    out.append("From " + study_results.said(res.provenance or res.shipped_provenance) + ".\n")
    return "\n".join(out)


def _study_results() -> dict:
    from dpviz import studies
    from dpviz.studies import results as study_results

    return {study_results.results_name(r.study, r.task, r.scale, r.sets): r for r in studies.available()}


def studies_page() -> str:
    """Every registered study, declared (its question, axes, what it reads, the command), and each of its
    results shipped with dpviz, from the one reader (`dpviz.studies.available`)."""
    from dpviz import studies

    found = list(_study_results().values())
    out = ["# Studies\n",
           "Generated from the registry `dpviz.studies.STUDIES` and the results shipped with dpviz "
           "(`dpviz/studies/shipped/`, read by `dpviz.studies.load`) at every build. Run one on any task with "
           "`python -m dpviz study run NAME --task TASK`, or on the Studies page; your own results replace the "
           "shipped ones cell by cell.\n"]
    for s in studies.STUDIES.values():
        axes = "; ".join(f"{studies.axis_label(k)} ∈ {{{', '.join(map(str, v))}}}" for k, v in s.axes.items())
        out += [f"## {s.title} (`{s.name}`)\n", s.question + "\n",
                table(["axes", "reads", "command"],
                      [[axes, ", ".join(m.label + (" (private statistic)" if m.private else "") for m in s.measures),
                        code(f"python -m dpviz study run {s.name} --task default")]])]
        mine = [r for r in found if r.study == s.name]
        out += [study_block(r) for r in mine] or ["No results shipped yet.\n"]
    return "\n".join(out)


SCORECARD_MARK = re.compile(r"^<!-- scorecard: ([\w.-]+) -->$", re.M)


def scorecard_block(name: str) -> str:
    """A shipped scorecard (`dpviz.studies.scorecard`) as Markdown: one row per claim, its verdict, each group's
    mean ± std over seeds, the reading, and where the rows come from."""
    from dpviz.studies import scorecard as filed
    from dpviz.studies import results as study_results

    res = study_results.shipped_file(name)
    if res is None or res.study != filed.NAME:
        raise KeyError(f"no shipped scorecard dpviz/studies/shipped/{name}.json")
    rows = [[r["id"], r["verdict"], "; ".join(f"{g} {v['mean']:.3f} ± {v['std']:.3f}" for g, v in r["measured"].items()),
             r["reading"]] for r in filed.rows(res).values()]
    out = [table(["claim", "verdict", f"measured (mean ± std over {len(res.seeds)} seeds)", "reading"], rows)]
    return "\n".join(out + ["From " + study_results.said(res.provenance) + ".\n"])


def with_results(markdown: str) -> str:
    """A hand-written page with each ``<!-- results: NAME -->`` line replaced by that results file's table,
    so the figures a page discusses are the ones its script last wrote. An unknown name is an error."""
    found = _results()

    def one(m: re.Match) -> str:
        if m.group(1) not in found:
            raise KeyError(f"no results file bench/results/{m.group(1)}.json (known: {', '.join(found)})")
        return results_block(found[m.group(1)], heading=False)

    studied = _study_results() if STUDY_MARK.search(markdown) else {}

    def study(m: re.Match) -> str:
        if m.group(1) not in studied:
            raise KeyError(f"no study results {m.group(1)} (known: {', '.join(studied)})")
        return study_block(studied[m.group(1)], heading=False)

    markdown = SCORECARD_MARK.sub(lambda m: scorecard_block(m.group(1)), markdown)
    return STUDY_MARK.sub(study, RESULTS_MARK.sub(one, markdown))


PAGES = {"reference/cli.md": cli_page, "reference/config.md": config_page, "reference/catalog.md": catalog_page,
         "results/measured.md": measured_page, "results/studies.md": studies_page}


# --- MkDocs hook ---------------------------------------------------------------------------------------
def on_files(files, config):
    from mkdocs.structure.files import File

    for uri, page in PAGES.items():
        files.append(File.generated(config, uri, content=page()))
    return files


def on_page_markdown(markdown, page, config, files):
    return with_results(markdown)


if __name__ == "__main__":
    print(next(page for uri, page in PAGES.items() if uri.endswith(f"/{sys.argv[1]}.md"))())
