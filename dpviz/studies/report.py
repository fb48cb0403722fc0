"""A report, whole: runs or a study as one self-contained HTML file and a PDF, for a write-up or a paper's
appendix (``python -m dpviz report RUN_ID…`` or ``--study NAME``, and a button on the Runs and Studies pages;
`runs_report`, `study_report`, `write_report`, `report_pdf` on `dpviz.studies`).

Each holds the configurations, the privacy statement (ε requested and spent, δ, accountant, mechanism, threat
model, the privacy check), the figures the pages draw for it with their captions (inline SVG), the tables and
readings with per-seed numbers, and the exact commands that reproduce it. The HTML needs nothing beside it:
no script, font, style sheet or image is fetched, so it opens offline. The PDF is the same page printed by
Chromium on A4 (the paper size journals take), figures scaled to the text width.
"""

from __future__ import annotations

import datetime
import html
import json
import os
import subprocess
import tempfile
from pathlib import Path

from dpviz.errors import ConfigError

PAGE = "A4"
STYLE = """
@page { size: A4; margin: 16mm 15mm; }
body { font: 10.5pt/1.45 "DejaVu Sans", Arial, sans-serif; color: #111; max-width: 180mm; margin: 0 auto; }
h1 { font-size: 17pt; margin: 0 0 4pt; } h2 { font-size: 13.5pt; margin: 18pt 0 4pt; border-bottom: 1px solid #bbb; }
h3 { font-size: 11pt; margin: 10pt 0 3pt; } p.meta { color: #555; margin: 0 0 8pt; }
table { border-collapse: collapse; margin: 4pt 0 8pt; font-size: 9pt; width: 100%; }
th, td { border: 1px solid #ccc; padding: 2pt 4pt; text-align: left; vertical-align: top; overflow-wrap: anywhere; }
th { background: #f2f2f2; } table.kv th { width: 24%; font-weight: 600; } pre { font-size: 8.5pt; background: #f6f6f6; padding: 4pt 6pt; white-space: pre-wrap;
overflow-wrap: anywhere; } figure { margin: 6pt 0 10pt; break-inside: avoid; } figure svg { width: 100%; height: auto; }
figcaption { font-size: 8.5pt; color: #333; } .private { color: #8a3b00; } section { break-before: auto; }
"""


def _e(text) -> str:
    return html.escape(str(text))


def _table(columns: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pairs(rows: list[list]) -> str:
    """A table of names and values: the name a heading cell on the left."""
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table class='kv'><tbody>{body}</tbody></table>"


def _figure(fig, caption: str) -> str:
    """The figure as inline SVG (vector, no file beside it) with its caption under it, as text."""
    from dpviz.figures import export

    svg = export.figure_bytes(fig, "svg", caption="").decode()
    svg = svg[svg.index("<svg"):]  # no XML declaration inside HTML
    return f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


def _about() -> str:
    from dpviz.studies import results

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"Made by dpviz {results.version()} (commit {results.commit()}) on {results.machine()}, {when}. "
            "Every statistic of private data that ε does not cover is marked so.")


# --- runs ----------------------------------------------------------------------------------------------------
def _privacy(s: dict) -> str:
    from dpviz.privacy import names, release

    st = release.statement(s)
    cfg = s["config"]
    if not st["private"]:
        return "<p>Trained without DP: ε covers nothing this run releases.</p>"
    rows = [["ε requested", cfg.get("epsilon")], ["ε spent", f"{s.get('epsilon_spent', float('nan')):.4g}"],
            ["δ", cfg.get("delta")], ["accountant", cfg.get("accountant")],
            ["mechanism", names.mechanism(cfg, parts=True)], ["protects", st["protects"]], ["against", st["against"]],
            ["neighbours", f"{st['neighbours']} ({st['neighbours_meaning']})"], ["randomness", st["randomness_line"]],
            ["privacy check", release.check_text(s)], ["covered", "; ".join(st["covered"])],
            [release.NOT_COVERED, "; ".join(st["not_covered"])]]
    return _pairs(rows)


def _run_figures(store, rid: str, label: str) -> list[str]:
    """The curves the Runs and Compare pages draw for the run, then its separability law where it has feature
    checkpoints (marked as private statistics)."""
    from dpviz import figures
    from dpviz.figures import analyses as fa
    from dpviz.results import analyses, runs

    out = []
    df = runs.curves(store, [rid])
    for metric in ("test_accuracy", "loss", "epsilon"):
        if not df.empty and (df["metric"] == metric).any():
            out.append(_figure(figures.runs.metric_curves(df, metric),
                               f"{figures.style.metric_label(metric).capitalize()} over training steps, {label}."))
    if steps := store.feature_steps(rid):
        from dpviz.analyses import analyze

        analyze(store, rid, "separability", step=steps[-1])  # cached: the Separability page reads the same
        series, _ = analyses.law_series(store, [rid], "separability", "fuzziness")
        if series:
            out.append(_figure(fa.law_plot(series, "fuzziness D_l"),
                               f"Per-layer fuzziness D_l at the last checkpoint with its fitted decay, {label}. "
                               "Measured on statistics of private data: NOT covered by the DP guarantee."))
    return out


def run_section(store, rid: str) -> str:
    from dpviz.results.labels import run_label
    from dpviz.runner import summary_of

    run = store.get_run(rid)
    s = summary_of(run, store)
    label = run_label(run)
    cfg = s["config"]
    config_json = json.dumps(cfg, indent=1, sort_keys=True, default=str)
    final = [[k, f"{v:.4g}" if isinstance(v, float) else v] for k, v in (
        ("status", run["status"]), ("test accuracy", s.get("test_accuracy")), ("test loss", s.get("test_loss")),
        ("ε spent", s.get("epsilon_spent")), ("steps", sum(p["steps"] for p in s.get("phases", []))),
        ("config hash", run.get("config_hash"))) if v is not None]
    phases = [[p["name"], p["steps"], f"{p['noise_multiplier']:.4g}", f"{p['sample_rate']:.4g}", p.get("clip_norm")]
              for p in s.get("phases", [])]
    parts = [f"<section><h2>Run {_e(rid)}</h2><p class='meta'>{_e(label)}</p>", "<h3>Privacy</h3>", _privacy(s),
             "<h3>Result</h3>", _pairs(final)]
    if phases:
        parts.append(_table(["phase", "steps", "σ", "sampling rate q", "clip norm C"], phases))
    parts += ["<h3>Figures</h3>", *_run_figures(store, rid, label), "<h3>Configuration</h3>",
              _table(["field", "value"], [[k, v] for k, v in sorted(cfg.items())]),
              "<h3>Reproduce</h3><p>Save the configuration below as <code>run.json</code>, then:</p>",
              "<pre>python -m dpviz run --config run.json</pre>", f"<pre>{_e(config_json)}</pre></section>"]
    return "".join(parts)


# --- studies -------------------------------------------------------------------------------------------------
def study_section(res) -> str:
    from dpviz.studies import registry as studies
    from dpviz.studies import results

    study = studies.get(res.study)
    verdict, sentence = studies.reading(study, res)
    cols, rows = res.table(study)
    seeds = [str(s) for s in res.seeds]
    per_seed = []
    for e in res.cells.values():
        shown = list(study.columns(e["cell"]).values())
        for m in study.measures:
            vals = [e.get("runs", {}).get(s, {}).get("values", {}).get(m.name) for s in seeds]
            if any(v is not None for v in vals):
                per_seed.append(shown + [m.label] + ["" if v is None else f"{v:{m.fmt}}" for v in vals])
    private = [m.label for m in study.measures if m.private]
    where = [f"at {res.scale}"] if res.scale else []
    where += [f"{k} = {v}" for k, v in res.sets.items()]
    from dpviz.studies.runner import command_line

    parts = [f"<section><h2>Study: {_e(study.title)} on {_e(res.task)}{_e(' (' + ', '.join(where) + ')' if where else '')}"
             f"</h2><p>{_e(study.question)}</p>", f"<h3>Reading</h3><p><b>{_e(verdict)}.</b> {_e(sentence)}</p>"]
    if (fig := studies.figure(study, res)) is not None:
        parts.append(_figure(fig, f"{study.title} on {res.task}: mean ± one sd over seeds per cell "
                                                f"({len(seeds)} seeds asked); the reading above, the numbers below."))
    parts += ["<h3>Numbers (mean ± sd over seeds)</h3>", _table(cols, rows)]
    if per_seed:
        heads = list(study.columns(next(iter(res.cells.values()))["cell"]))
        parts += ["<h3>Per seed</h3>", _table(heads + ["measure"] + [f"seed {s}" for s in seeds], per_seed)]
    if private:
        parts.append(f"<p class='private'>{_e(', '.join(private))}: statistics of private data, NOT covered by the "
                     "DP guarantee.</p>")
    parts += ["<h3>Where the numbers come from</h3>"]
    if res.provenance:
        parts.append(f"<p>This store: {_e(results.said(res.provenance))}.</p>")
    if res.shipped_provenance and any(e.get("source") == "shipped" for e in res.cells.values()):
        parts.append(f"<p>Shipped with dpviz: {_e(results.said(res.shipped_provenance))}.</p>")
    vary = {a: tuple(v) for a, v in res.axes.items() if a in study.axes and tuple(v) != tuple(study.axes[a])}
    parts += ["<h3>Reproduce</h3>",
              f"<pre>{_e(command_line(study.name, res.task, res.scale, res.seeds or [0, 1, 2], res.sets, vary, 'all'))}"
              "</pre></section>"]
    return "".join(parts)


# --- the document --------------------------------------------------------------------------------------------
def document(title: str, sections: list[str]) -> str:
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<meta name='generator' content='dpviz'><style>{STYLE}</style></head><body><h1>{_e(title)}</h1>"
            f"<p class='meta'>{_e(_about())}</p>{''.join(sections)}</body></html>\n")


def runs_report(store, run_ids: list[str]) -> tuple[str, str]:
    """(name, HTML) of a report of ``run_ids`` (each must be stored)."""
    if not run_ids:
        raise ConfigError("run_ids", "at least one stored run id", "none")
    for rid in run_ids:
        store.known(rid)
    name = "dpviz_report_" + "_".join(run_ids)[:80]
    title = f"dpviz report: run {run_ids[0]}" if len(run_ids) == 1 else f"dpviz report: {len(run_ids)} runs"
    return name, document(title, [run_section(store, rid) for rid in run_ids])


def study_report(res) -> tuple[str, str]:
    """(name, HTML) of a report of a study's results (`dpviz.studies.stored`)."""
    from dpviz.studies import registry as studies
    from dpviz.studies import results

    if not res.cells:
        raise ConfigError("study", f"a study with results on this task (none of {res.study} on {res.task} yet: "
                          f"python -m dpviz study run {res.study} --task {res.task})", res.study)
    name = "dpviz_report_" + results.results_name(res.study, res.task, res.scale, res.sets)
    return name, document(f"dpviz report: {studies.get(res.study).title} on {res.task}", [study_section(res)])


def report_pdf(page: str) -> bytes:
    """``page`` printed to PDF by headless Chromium (A4, the page's own margins, no header or footer)."""
    from dpviz.figures.export import chromium_path

    with tempfile.TemporaryDirectory(prefix="dpviz-report-") as d:
        src, out = Path(d) / "report.html", Path(d) / "report.pdf"
        src.write_text(page)
        cmd = [chromium_path(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--no-pdf-header-footer", f"--user-data-dir={d}/profile", f"--print-to-pdf={out}", src.as_uri()]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": d})
        if not out.exists():
            raise ConfigError("report", "a Chromium that prints PDF (apt-get install chromium); the HTML is written",
                              (done.stderr or "no PDF").strip().splitlines()[-1][:200])
        return out.read_bytes()


def write_report(name: str, page: str, out_dir, *, pdf: bool = True) -> list[Path]:
    """Write ``<out_dir>/<name>.html`` (and ``.pdf``); the paths written."""
    from dpviz.figures.export import safe_filename

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / safe_filename(name, "html")]
    paths[0].write_text(page)
    if pdf:
        paths.append(out / safe_filename(name, "pdf"))
        paths[1].write_bytes(report_pdf(page))
    return paths
