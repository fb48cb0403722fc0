"""The dashboard's screenshots: the README's (the Runs page on the embedded default, after one launched run
finished) and, with ``--pages``, one of every page for the dashboard guide (``docs/figures/pages/``).

    .venv/bin/python scripts/screenshot_dashboard.py [--out docs/figures/dashboard_runs.png] [--pages]

Starts a dashboard on a throwaway store, launches the default run from the form, waits for it to finish
and photographs the page at 1400 × 1000 px in Debian's Chromium.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from browser_util import browser, server  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "figures" / "dashboard_runs.png"))
    p.add_argument("--pages", action="store_true", help="also photograph every page (docs/figures/pages/)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cache = Path(d) / "cache"
        cache.mkdir()
        with browser() as b, server(cache, Path(d) / "server.log") as url:
            page = b.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            page.goto(url, timeout=60000)
            page.get_by_role("button", name="Launch run").wait_for(timeout=120000)
            page.get_by_role("button", name="Launch run").click()
            page.get_by_text("Background runs: 1 active").wait_for(timeout=60000)
            page.get_by_text("Background runs: 0 active").wait_for(timeout=300000)
            page.wait_for_timeout(3000)  # the finished run's curves redrawn
            page.screenshot(path=a.out)
            print(a.out)
            if a.pages:
                photograph_pages(page)


def photograph_pages(page) -> None:
    """Every page of the sidebar, in its order, as ``docs/figures/pages/NN-<slug>.png`` (the visible part)."""
    import re

    from dashboard.layout import PAGES

    folder = ROOT / "docs" / "figures" / "pages"
    folder.mkdir(parents=True, exist_ok=True)
    for n, (_, title, _) in enumerate(PAGES):
        page.get_by_role("link", name=title).first.click()
        page.get_by_role("heading", name=title, exact=True).wait_for(timeout=60000)
        page.wait_for_timeout(4000)  # figures drawn
        path = folder / f"{n:02d}-{re.sub(r'[^a-z0-9]+', '-', title.lower()).strip('-')}.png"
        page.screenshot(path=str(path))
        print(path)


if __name__ == "__main__":
    main()
