"""Export figures (PNG, SVG, PDF via kaleido and the system's Chromium; HTML) and CSV.

One kaleido browser is started on first use and kept alive, so exports after
the first take a fraction of a second instead of a browser start each. The
browser is Debian's ``/usr/bin/chromium`` (``DPVIZ_CHROMIUM`` overrides),
started through a tiny wrapper that adds ``--disable-background-networking``
(kaleido offers no way to pass flags); nothing is downloaded, MathJax is off
and plotly.js comes from the plotly package.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from dpviz.errors import ConfigError
from dpviz.figures import with_caption
from dpviz.figures.style import wrap
from dpviz.privacy import release

FORMATS = ("png", "svg", "pdf", "html")
_lock = threading.Lock()
_started = False


def chromium_path() -> str:
    path = os.environ.get("DPVIZ_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        raise ConfigError("export", "needs Chromium for PNG/SVG/PDF (apt-get install chromium); HTML and CSV work")
    return path


def _wrapper(browser: str) -> str:
    """A script that starts ``browser`` with dpviz's flags, in a fresh private folder of this process.

    Never a predictable shared path: a folder or link planted there by another user would be followed
    (the script written through it, and made executable). ``mkdtemp`` creates a new 0700 folder, and
    O_EXCL refuses to write through anything already at the name; both go when the process ends."""
    d = tempfile.mkdtemp(prefix="dpviz-chromium-")
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    w = os.path.join(d, "chromium")
    fd = os.open(w, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o700)
    with os.fdopen(fd, "w") as f:
        f.write(f'#!/bin/sh\nexec "{browser}" --disable-background-networking --disable-quic "$@"\n')
    return w


def _ensure_server() -> None:
    global _started
    with _lock:
        if not _started:
            import kaleido

            kaleido.start_sync_server(path=_wrapper(chromium_path()), mathjax=False, silence_warnings=True)
            _started = True


def safe_filename(name: str, ext: str) -> str:
    """A file name with only [A-Za-z0-9._-], no leading dots, at most 100 characters."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "figure"
    return f"{stem[:100]}.{ext}"


PNG_SCALE = 2
"""PNG pixels per layout pixel: a 900 px wide figure exports 1800 px wide, sharp in a paper or on a slide."""
CAPTION_LINE = 17  # px per caption line under an exported figure


def figure_title(fig: go.Figure) -> str:
    """The figure's title as plain text (line breaks as " — "), for file metadata."""
    text = fig.layout.title.text or "dpviz figure"
    return re.sub(r"<[^>]+>", "", re.sub(r"<br\s*/?>", " — ", text)).strip()


CAPTION_CHAR = 7  # px a caption character takes at most, on average over a line (12 px sans-serif)


def wrap_caption(caption: str, width: int) -> str:
    """``caption`` with each line broken at spaces to fit an export ``width`` px wide (its 20 px margins off):
    the image ends at its width, and a longer line was cut there."""
    chars = max(20, (width - 40) // CAPTION_CHAR)
    return "\n".join(wrap(line, chars).replace("<br>", "\n") for line in caption.split("\n"))


def figure_bytes(fig: go.Figure, fmt: str, *, caption: str, width: int = 900, height: int | None = None) -> bytes:
    """The figure with its caption as ``fmt`` bytes (png, svg, pdf or standalone html).

    PNG is drawn at `PNG_SCALE` × (1800 px wide at the default width); SVG and PDF are vector and carry the
    figure's title as their title metadata; HTML is one file that works offline (see `html_bytes`). The
    export is taller than the figure by its caption's lines, so that every run the caption names shows.
    """
    if fmt not in FORMATS:
        raise ConfigError("format", f"one of {', '.join(FORMATS)}", fmt)
    title = figure_title(fig)
    said = " ".join(re.sub(r"<[^>]+>", " ", caption).split())  # the caption as one line of plain text
    caption = wrap_caption(caption, width)
    height = (height or max(fig.layout.height or 420, 420)) + CAPTION_LINE * (caption.count("\n") + 1)
    fig = with_caption(fig, caption)
    if fmt == "html":
        return html_bytes(fig, title, description=said)
    _ensure_server()
    import kaleido

    opts = dict(format=fmt, width=width, height=height, scale=PNG_SCALE if fmt == "png" else 1)
    with _lock:  # one browser tab: exports run one at a time
        out = kaleido.calc_fig_sync(fig, opts=opts)
    if fmt == "pdf":
        return pdf_with_title(out, title)
    if fmt == "svg":
        return svg_with_title(out, title)
    return out


def svg_with_title(svg: bytes, title: str) -> bytes:
    """``svg`` with a ``<title>`` (its accessible name and title metadata) first in the root element."""
    import html

    m = re.search(rb"<svg\b[^>]*>", svg)
    if not m:
        return svg
    tag = f"<title>{html.escape(title)}</title>".encode()
    return svg[:m.end()] + tag + svg[m.end():]


def _pdf_text(text: str) -> bytes:
    """A PDF text string in UTF-16BE with its byte-order mark, as hex: any character, nothing to escape."""
    return b"<FEFF" + text.encode("utf-16-be").hex().upper().encode() + b">"


def pdf_with_title(pdf: bytes, title: str) -> bytes:
    """``pdf`` with its document information's Title set to ``title`` (Chromium writes its page's
    "Kaleido-fier").

    An incremental update, as the PDF standard defines it: a new Info object, a cross-reference section for
    it and a trailer pointing to it and to the previous one are appended; no byte of the original moves, so
    its offsets stay right. The other Info entries (Creator, Producer, dates) are kept."""
    starts = re.findall(rb"startxref\s+(\d+)", pdf)
    trailer = pdf[pdf.rfind(b"trailer"):] if b"trailer" in pdf else b""
    size, root = re.search(rb"/Size\s+(\d+)", trailer), re.search(rb"/Root\s+(\d+\s+\d+\s+R)", trailer)
    if not (starts and size and root):  # a cross-reference stream: leave the file as it is
        return pdf
    info = re.search(rb"/Info\s+(\d+)\s+(\d+)\s+R", trailer)
    entries = b""
    if info:
        obj = re.search(rb"\b" + info.group(1) + rb"\s+" + info.group(2) + rb"\s+obj\s*<<(.*?)>>\s*endobj", pdf, re.S)
        if obj:
            entries = re.sub(rb"/Title\s*(\((?:\\.|[^\\)])*\)|<[0-9A-Fa-f\s]*>)", b"", obj.group(1)).strip()
    n = int(size.group(1))
    body = pdf if pdf.endswith(b"\n") else pdf + b"\n"
    obj_at = len(body)
    body += b"%d 0 obj\n<< /Title " % n + _pdf_text(title) + b" " + entries + b" >>\nendobj\n"
    xref_at = len(body)
    body += b"xref\n%d 1\n%010d 00000 n \n" % (n, obj_at)
    body += (b"trailer\n<< /Size %d /Root " % (n + 1) + root.group(1) + b" /Info %d 0 R /Prev " % n
             + starts[-1] + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref_at)
    return body


def html_bytes(fig: go.Figure, title: str, *, description: str = "") -> bytes:
    """One HTML file that draws ``fig`` offline: plotly.js is inside it, gzip-compressed (1.5 MB instead of
    4.8 MB) and unpacked by the browser's own ``DecompressionStream`` (every browser since 2023). One file a
    researcher can attach to a report or open years later without a network or a folder beside it.
    ``description``, the caption unwrapped, is the page's description: the whole caption stays searchable
    as text (a drawn caption is broken into lines to fit the figure's width)."""
    import base64
    import gzip
    import html
    import json

    from plotly.offline import get_plotlyjs

    js = base64.b64encode(gzip.compress(get_plotlyjs().encode(), 9, mtime=0)).decode()
    spec = fig.to_json().replace("</", "<\\/")
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<meta name="generator" content="dpviz"><meta name="description" content="{html.escape(description)}"></head>
<body style="margin:0"><div id="figure" style="width:100%;height:{json.dumps(fig.layout.height or 520)}px"></div>
<noscript>This figure needs JavaScript.</noscript>
<script type="application/json" id="figure-spec">{spec}</script>
<script>
(async () => {{
  const packed = Uint8Array.from(atob("{js}"), c => c.charCodeAt(0));
  const code = await new Response(new Blob([packed]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
  const s = document.createElement("script");
  s.text = code;
  document.head.appendChild(s);
  const f = JSON.parse(document.getElementById("figure-spec").textContent);
  await Plotly.newPlot("figure", f.data, f.layout, {{responsive: true}});
  document.body.dataset.drawn = "1";
}})();
</script></body></html>
"""
    return page.encode()


def _flat(value) -> object:
    """A cell value with no JSON left in it: lists become "a; b", anything else stays."""
    if isinstance(value, (list, tuple)):
        return "; ".join(str(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}={v}" for k, v in value.items())
    return value


def tidy(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every column of JSON objects (a run's ``group`` key, a config) expanded into one column
    per field, named ``column.field``; fields that repeat a column of ``df`` with the same values are left
    out, lists are written "a; b"."""
    import json

    out = df.copy()
    for col in list(out.columns):
        vals = out[col].dropna()
        if vals.empty or pd.api.types.is_numeric_dtype(out[col]):
            continue
        parsed = []
        for v in vals:
            if isinstance(v, str) and v.lstrip().startswith("{"):
                try:
                    v = json.loads(v)
                except ValueError:
                    break
            if not isinstance(v, dict):
                break
            parsed.append(v)
        else:
            wide = pd.DataFrame(parsed, index=vals.index).reindex(out.index)
            keep = {}
            for k in wide.columns:
                if k in out.columns and wide[k].astype(str).equals(out[k].astype(str)):
                    continue
                keep[f"{col}.{k}"] = wide[k].map(_flat)
            at = list(out.columns).index(col)
            out = out.drop(columns=col)
            for i, (name, series) in enumerate(keep.items()):
                out.insert(at + i, name, series)
    return out.apply(lambda c: c if pd.api.types.is_numeric_dtype(c) else c.map(_flat))


VALUE_COLUMNS = {"value": "{m}", "mean": "{m} mean", "std": "{m} std"}
"""The columns of a long metric table (`results.curves`, `results.seed_bands`) that hold the metric's values."""


def labelled(df: pd.DataFrame) -> pd.DataFrame:
    """A long metric table (a ``metric`` column) with what its values are in its headers: a table of one metric
    names it in its value columns ("loss (not covered by ε)" for "value", `release.metric_label`) and drops the
    column that repeated it; one of several metrics labels each ``metric`` cell instead. Any other table is
    returned as it is: its columns are configuration fields or public results, never a private batch's."""
    if "metric" not in df or not len(df):
        return df
    names = list(dict.fromkeys(df["metric"]))
    if len(names) > 1:
        return df.assign(metric=df["metric"].map(release.metric_label))
    m = names[0]
    cols = {c: release.metric_label(m, VALUE_COLUMNS[c].format(m=m)) for c in df.columns if c in VALUE_COLUMNS}
    return df.drop(columns="metric").rename(columns=cols)


def csv_bytes(df: pd.DataFrame) -> bytes:
    """``df`` as tidy CSV: one column per field (see `tidy`), a metric's values headed by its name and, for a
    statistic of private batches, "(not covered by ε)" (see `labelled`)."""
    return tidy(labelled(df)).to_csv(index=False).encode()
