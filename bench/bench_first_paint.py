"""How long a page shows grey placeholders: per page, the time from opening it in a fresh tab to the page
settled (its title drawn, no Streamlit skeleton left) and the span during which skeletons showed — on an
idle machine and beside a pure-Python CPU burner on each core, side by side in one run (real Chromium via
Playwright, one fresh server, an empty store).

    python bench/bench_first_paint.py [--pages Runs Curvature Accountants Compare] [--repeats 3]

Nothing else should run meanwhile: the burners are the only load this measures.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from browser_util import browser, server  # noqa: E402

SKELETON = "[data-testid=stSkeleton]"


def first_paint(b, url: str, page: str) -> tuple[float, float]:
    """(seconds to settled, seconds skeletons showed) for ``page`` opened in a fresh tab."""
    tab = b.new_page()
    try:
        t0 = time.perf_counter()
        tab.goto(f"{url}/{page}")
        shown = []
        while time.perf_counter() - t0 < 180:
            now = time.perf_counter() - t0
            skeletons, title = tab.locator(SKELETON).count(), tab.locator("h1").count()
            if skeletons:
                shown.append(now)
            if title and not skeletons and now > 1:
                return now, (shown[-1] - shown[0]) if shown else 0.0
            time.sleep(0.1)
        raise RuntimeError(f"{page}: not settled in 180 s")
    finally:
        tab.close()


def measure(b, url: str, pages: list[str], repeats: int) -> dict:
    out = {p: ([], []) for p in pages}
    for _ in range(repeats):
        for p in pages:
            settled, skeleton = first_paint(b, url, p)
            out[p][0].append(settled)
            out[p][1].append(skeleton)
    return {p: (statistics.median(s), statistics.median(k)) for p, (s, k) in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", nargs="*", default=["Runs", "Curvature", "Accountants", "Compare"])
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally blocks end the burners
    cores = os.cpu_count() or 1
    print(f"# {cores} cores; load average before: {os.getloadavg()[0]:.2f}; medians of {a.repeats}")
    with tempfile.TemporaryDirectory() as d, server(Path(d) / "cache", Path(d) / "log") as url, browser() as b:
        first_paint(b, url, "")  # the server's first page: its imports, the browser's first chunks
        idle = measure(b, url, a.pages, a.repeats)
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
        try:
            busy = measure(b, url, a.pages, a.repeats)
        finally:
            for h in hogs:
                h.kill()
    print(f"{'page':<14} {'idle: settled':>14} {'skeletons':>10} {'burners: settled':>17} {'skeletons':>10} "
          f"{'ratio':>6}")
    for p in a.pages:
        (s0, k0), (s1, k1) = idle[p], busy[p]
        print(f"{p:<14} {s0:>13.2f}s {k0:>9.2f}s {s1:>16.2f}s {k1:>9.2f}s {s1 / s0:>5.2f}×")


if __name__ == "__main__":
    main()
