"""Start `streamlit run app.py` on a free port and drive it with Playwright + Debian's Chromium."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("DPVIZ_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def need_chromium():
    if not Path(CHROMIUM).is_file():
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing in CI (.ci/run installs Debian's chromium)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(cache_dir: Path, log: Path):
    """A fresh Streamlit server on the dashboard; yields its base URL."""
    with server_process(cache_dir, log) as (_, url):
        yield url


@contextlib.contextmanager
def server_process(cache_dir: Path, log: Path):
    """A fresh Streamlit server on the dashboard; yields (its process, its base URL)."""
    port = free_port()
    env = dict(os.environ, DPVIZ_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    env.setdefault("DPVIZ_UMAP_WARMUP", "0")  # numba's compile would compete with what is measured
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
                             "--server.port", str(port)], cwd=ROOT, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.2)
        yield proc, url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


SETTLED = """() => !document.querySelector('[data-testid="stSkeleton"]')
                   && !document.querySelector('[data-stale="true"] [data-testid="stSlider"]')"""


def slide(page, index: int, presses: int, value: float, timeout: float = 60.0) -> None:
    """Move the ``index``-th slider by ``presses`` arrow keys to ``value``, as a user does: on the drawn page.

    Keys pressed while a redraw replaces the slider land on the old element and are lost (a user sees the
    thumb stay and presses again); so wait for the redraw to end first, then check the thumb moved.
    """
    page.wait_for_function(SETTLED, timeout=timeout * 1000)
    page.get_by_role("slider").nth(index).focus()
    for _ in range(abs(presses)):
        page.keyboard.press("ArrowRight" if presses > 0 else "ArrowLeft")
    thumb, deadline = page.get_by_role("slider").nth(index), time.time() + timeout
    shown = "s => s.getAttribute('aria-valuetext')"  # the value the thumb shows (`value` is an option's index)
    while abs(float(thumb.evaluate(shown)) - value) > 1e-9:
        assert time.time() < deadline, f"slider {index} stayed at {thumb.evaluate(shown)}, not {value}"
        time.sleep(0.2)


@contextlib.contextmanager
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()
