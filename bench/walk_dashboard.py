"""The first launches a new user makes, walked in real Chromium and timed: what the page said during
each wait, and for how long.

A fresh store; the Runs page opened with the form's fields in its URL (as a reload keeps them); Launch
pressed; the progress line under "2 · Watch" read every 0.5 s until the run has finished. Each distinct
state (queued, preparing, searching k of n, training, finished) is printed with the second it first
showed and how long it lasted.
With ``--task``, the task's button is pressed first (a real pretrained model on real data), and the walk is
recorded in ``bench/results/walk.json`` for the docs (real-text DP-LP and real-vision DP-FFT:
``--task real-text --strategies lp``, ``--task real-vision --strategies fft``).
Usage: python bench/walk_dashboard.py [--strategies lora partial lp-fft] [--task real-text]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from browser_util import browser, server  # noqa: E402

STATE = re.compile(r"(queued[^·]*|preparing[^·]*|searching[^·]*|before the first step: [^,·]*|first step|"
                   r"training|finished|failed[^·]*|cancelled)")


def walk(page, url: str, strategy: str, timeout_s: float = 600, query: str = "",
         sample=None, task: str | None = None, grid: bool = False) -> list[tuple[str, float, float]]:
    """[(state text, first seen at s, lasted s)] of one launch of ``strategy`` from the form (the URL's other
    fields in ``query``, e.g. "&seed=3"; ``task``: its button pressed first); ``sample(page)`` is called at
    every reading; ``grid``: where the form says the rates on auto would be searched, its "Use the nearest grid
    rates instead" button is pressed first)."""
    page.goto(f"{url}/?strategy={strategy}{query}")
    bars = page.locator('.dpviz-progress[role="progressbar"]')
    page.get_by_role("button", name="Launch run").wait_for(timeout=60_000)
    if task:
        page.get_by_role("button", name=task, exact=True).click()
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
        time.sleep(1.0)
    use = page.get_by_role("button", name=re.compile("^Use the nearest grid rates instead"))
    if grid and use.count():
        use.first.click()
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
        time.sleep(1.0)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
    before = sum(f"· {strategy} " in t for t in bars.all_inner_texts())  # this server's earlier runs of it
    page.get_by_role("button", name="Launch run").click()
    t0, seen = time.perf_counter(), []
    while time.perf_counter() - t0 < timeout_s:
        texts = bars.all_inner_texts()
        now = time.perf_counter() - t0
        mine = [t for t in texts if f"· {strategy} " in t]  # the newest first
        if len(mine) <= before:  # the launch has not been drawn yet
            mine = []
        if sample is not None:
            sample(page)
        state = STATE.search(mine[0]).group(1).strip() if mine and STATE.search(mine[0]) else "(no progress line)"
        state = re.sub(r"step \d+ of", "step … of", state)  # one row for the whole training phase
        if not seen or seen[-1][0] != state:
            seen.append((state, now))
        if state in ("finished", "cancelled") or state.startswith("failed"):
            break
        time.sleep(0.5)
    end = time.perf_counter() - t0
    return [(s, at, (seen[i + 1][1] if i + 1 < len(seen) else end) - at) for i, (s, at) in enumerate(seen)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--strategies", nargs="+", default=["lora", "partial", "lp-fft"])
    ap.add_argument("--task", default=None, help="a task button to press first (real-text, real-vision)")
    ap.add_argument("--grid", action="store_true", help="press \"Use the nearest grid rates instead\" where the "
                    "form offers it (no search of the rates on public data first)")
    args = ap.parse_args()
    cache = Path(tempfile.mkdtemp()) / "cache"
    rows = []
    with server(cache, cache.parent / "server.log") as url, browser() as b:
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        for strategy in args.strategies:
            print(f"\n{args.task or 'default'} {strategy} (fresh store: an auto search runs first where the "
                  "shipped grid has no answer)")
            print("| what the page said | from (s) | for (s) |\n|---|---|---|")
            states = walk(page, url, strategy, task=args.task, grid=args.grid)
            for state, at, lasted in states:
                print(f"| {state} | {at:.1f} | {lasted:.1f} |")
            total = states[-1][1] if states else 0.0
            rows.append([f"{args.task or 'default'} {strategy}" + (" (nearest grid rates)" if args.grid else ""), f"{total:.0f} s",
                         "; ".join(f"{s} {lasted:.0f} s" for s, _, lasted in states if s != "finished")])
    if args.task:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from results import record

        record(f"walk_{args.task}", title=f"From the page: the {args.task} task, first click to finished",
               columns=["launch", "first click to finished", "what the page said, and for how long"], rows=rows,
               notes="A fresh store and server; the task's button, then Launch, in Chromium; the progress line "
                     "read every 0.5 s.")


if __name__ == "__main__":
    main()
