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

from .errors import ConfigError
from .figures import with_caption

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


def figure_bytes(fig: go.Figure, fmt: str, *, caption: str, width: int = 900, height: int = 520) -> bytes:
    """The figure with its caption as ``fmt`` bytes (png, svg, pdf or standalone html)."""
    if fmt not in FORMATS:
        raise ConfigError("format", f"one of {', '.join(FORMATS)}", fmt)
    fig = with_caption(fig, caption)
    if fmt == "html":
        return fig.to_html(include_plotlyjs=True, full_html=True).encode()
    _ensure_server()
    import kaleido

    with _lock:  # one browser tab: exports run one at a time
        return kaleido.calc_fig_sync(fig, opts=dict(format=fmt, width=width, height=height))


def csv_bytes(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False).encode()
