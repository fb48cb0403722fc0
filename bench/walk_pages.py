"""The first twenty minutes of a new user, walked in real Chromium: a new user's report, item by item.

A fresh store and server (UMAP warming up as for any user). For each item of "What was seen, worst first"
the walk does what a user did and records what the page said and how long each wait took:
the folder → digits trap, batch size 0, the form across a reload, the first `lora` launch (its auto search),
the state after that first run (sidebar count, the stored-runs table), search runs in tables and pickers,
a run queued behind the two workers, the continual pair, feature distortion and the feature map of the
just-launched run, a run of another process, the exports, and the auto rate's edge warning.
Usage: python bench/walk_pages.py [--out walk.json]   (prints a markdown table; ≈ 5 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from browser_util import browser, server  # noqa: E402
from walk_dashboard import STATE, walk  # noqa: E402

BAR = '.dpviz-progress[role="progressbar"]'
PREVIEW = '[data-testid="stAlert"]:has-text("noise multiplier")'  # the form's σ preview (the intro names σ too)
ROWS = """() => { const g = document.querySelector('[data-testid="stDataFrame"] table[role="grid"]');
    return g ? Number(g.getAttribute('aria-rowcount')) - 1 : 0; }"""  # the table's runs (its DOM rows are virtual)
POINTS = """t => { const p = [...document.querySelectorAll('.js-plotly-plot')].find(
    p => (p.layout && p.layout.title && (p.layout.title.text || '')).includes(t));
    return p && p._fullData ? p._fullData.map(d => (d.x && d.x.length) || 0) : []; }"""  # points per trace
rows: list[tuple[str, str, str]] = []


def note(item: str, said: str, took: str) -> None:
    rows.append((item, said, took))
    print(f"| {item} | {said} | {took} |", flush=True)


def idle(page) -> None:
    page.wait_for_timeout(700)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)


def text(page, sel: str) -> str:
    return " · ".join(" ".join(t.split()) for t in page.locator(sel).all_inner_texts())


def choose(page, label: str, option: str) -> None:
    page.locator('[data-testid="stSelectbox"]').filter(has_text=label).first.click()
    page.get_by_role("option", name=option).first.click()
    idle(page)


def fill(page, label: str, value: str) -> None:
    box = page.get_by_label(label, exact=True)
    box.fill(value)
    box.press("Enter")
    idle(page)


def until(page, check, timeout: float, every: float = 0.5):
    """Poll ``check(page)`` until it returns something truthy; (that value, seconds waited) or (None, timeout)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if got := check(page):
            return got, time.perf_counter() - t0
        time.sleep(every)
    return None, timeout


def states(seen) -> str:
    """“state” and how long it lasted, a search's trials merged into one entry (k counting up)."""
    out, trials = [], []
    for s, _, lasted in seen + [("", 0, 0)]:
        if m := re.match(r"searching (.*) \(\d+ of (\d+)\)", s):
            trials.append((m, lasted))
            continue
        if trials:
            ds = [d for _, d in trials]
            out.append(f"“searching {trials[0][0].group(1)} (k of {trials[0][0].group(2)})” {sum(ds):.1f} s "
                       f"(k = 1…{len(ds)}, {min(ds):.0f}–{max(ds):.0f} s each)")
            trials = []
        if s:
            out.append(f"“{s}” {lasted:.1f} s")
    return "; ".join(out)


def form_items(page, url: str) -> None:
    t0 = time.perf_counter()
    page.goto(url)
    page.locator(PREVIEW).wait_for(timeout=120_000)
    note("first page", "Runs: form and σ preview drawn", f"{time.perf_counter() - t0:.1f} s")
    choose(page, "dataset", "folder — your images, a folder per class")
    fill(page, "data folder (real datasets)", "/tmp/no/such/folder")
    choose(page, "dataset", "digits — 8×8 handwritten digits (scikit-learn), upsampled")
    launch = page.get_by_role("button", name="Launch run").count()
    errors = text(page, '[data-testid="stAlert"]:has([data-testid="stAlertContentError"])')
    note("1 folder → digits trap", f"Launch shown: {bool(launch)}; error box: {errors or 'none'}", "—")
    fill(page, "batch size B", "0")
    err = text(page, '[data-testid="stAlertContentError"]')
    note("4 batch size 0", f"“{err}”; Launch shown: {bool(page.get_by_role('button', name='Launch run').count())}; "
         f"σ preview shown: {bool(page.locator(PREVIEW).count())}", "—")
    fill(page, "batch size B", "128")
    choose(page, "strategy", "fft — full fine-tuning")
    page.reload()
    page.locator(PREVIEW).wait_for(timeout=120_000)
    kept = text(page, PREVIEW).split("Phases: ")[-1]
    note("4 reload keeps the form", f"after a reload the preview reads “… Phases: {kept}”, batch field "
         f"{page.get_by_label('batch size B', exact=True).input_value()}; URL {page.url.split('/', 3)[-1]}", "—")


def first_run(page, url: str) -> None:
    sidebar = []
    t0 = time.perf_counter()
    seen = walk(page, url, "lora", sample=lambda p: sidebar.append(text(p, '[data-testid="stSidebar"] [data-testid="stCaptionContainer"]')))
    note("3 first lora launch (auto search)", states(seen), f"{time.perf_counter() - t0:.1f} s")
    busy = sorted({s.split("Background runs: ")[-1] for s in sidebar if "active" in s and "0 active" not in s})
    note("4 sidebar while it trains", "; ".join(f"“Background runs: {b}”" for b in busy) or "never counted", "—")
    n, took = until(page, lambda p: p.evaluate(ROWS), 10)
    note("4 stored runs after the first run", f"the table lists {n} run(s) (no reload)", f"{took:.1f} s after finished")
    page.get_by_text("show search runs").click()  # the switch's input lies under its drawn toggle
    shown, _ = until(page, lambda p: p.evaluate(ROWS) > n and p.evaluate(ROWS), 10)
    note("2 search runs hidden", f"table: {n} run(s); with “show search runs” on: {shown or n}", "—")
    page.get_by_text("show search runs").click()
    idle(page)


def queued(page, url: str) -> None:
    for seed in (1, 2):
        page.goto(f"{url}/?strategy=lp-fft&seed={seed}")
        page.get_by_role("button", name="Launch run").click(timeout=60_000)
        idle(page)
    t0 = time.perf_counter()
    seen = walk(page, url, "lp-fft", query="&seed=3")  # the newest lp-fft line: this third run
    note("3 a run behind the two workers", states(seen), f"{time.perf_counter() - t0:.1f} s")


def pair(page, url: str) -> None:
    page.goto(f"{url}/continual")
    page.get_by_role("button", name="Launch continual and pure DP-FFT at this budget").click(timeout=60_000)
    t0, seen, curves = time.perf_counter(), [], None
    while time.perf_counter() - t0 < 600:
        lines = page.locator(BAR).all_inner_texts()
        now = " / ".join(f"{s}: {STATE.search(t).group(1).strip() if STATE.search(t) else '…'}" for s in ("continual", "fft")
                         for t in lines if f"· {s} ε" in t)
        now = re.sub(r"step \d+ of", "step … of", now) or "(no progress line)"
        if not seen or seen[-1][0] != now:
            seen.append((now, time.perf_counter() - t0))
        if curves is None and page.locator('[data-testid="stPlotlyChart"]').count():  # under the pair's picker
            curves = time.perf_counter() - t0
        if now == "continual: finished / fft: finished":
            break
        time.sleep(0.5)
    end = time.perf_counter() - t0
    note("3 Public → private: launch the pair", "; ".join(
        f"“{s}” {(seen[i + 1][1] if i + 1 < len(seen) else end) - at:.1f} s" for i, (s, at) in enumerate(seen[:-1]))
        + f"; their curves drawn from {curves or end:.1f} s", f"{end:.1f} s")


def analyses(page, url: str) -> None:
    page.goto(f"{url}/distortion")
    page.get_by_role("heading", name="Feature distortion", exact=True).wait_for(timeout=60_000)
    n, took = until(page, lambda p: (k := p.evaluate(POINTS, "kNN accuracy")) and min(k) >= 8 and k, 300)
    reading = text(page, 'p:has-text("Reading.")')
    note("5 feature distortion of the runs just made", f"kNN curves of {len(n or [])} runs, {n} checkpoints each; "
         f"“{reading[:170]}”", f"{took:.1f} s")
    said = []

    def map_drawn(p):
        said.append(text(p, '[data-testid="stAlert"]:has-text("Computing the maps")'))
        return p.locator('.js-plotly-plot').count() >= 2  # the kNN curves and the map

    _, took = until(page, map_drawn, 300)
    msgs = [s for i, s in enumerate(said) if s and s not in said[:i]]
    note("3 embedding map", f"“{msgs[0] if msgs else 'drawn at once'}” … “{msgs[-1] if msgs else ''}”, then the map "
         "by itself", f"{took:.1f} s")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "dpviz", "run", "--strategy", "lp", "--seed", "7", "--quiet"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    listed, took = until(page, lambda p: p.get_by_text("seed=7 [").count(), 120)
    proc.wait(600)
    note("1 a run of the command line (another process)", f"{'joins' if listed else 'never joins'} the picker's "
         f"selection, no reload (the run took {time.perf_counter() - t0:.0f} s)", f"{took:.1f} s after it started")


def exports(page, url: str, tmp: Path) -> None:
    page.goto(f"{url}/compare")
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 0", timeout=120_000)
    sizes = []
    for fmt in ("PNG", "PDF", "HTML", "CSV"):
        t0 = time.perf_counter()
        with page.expect_download(timeout=120_000) as dl:
            page.get_by_role("button", name=fmt, exact=True).first.click()
        path = tmp / dl.value.suggested_filename
        dl.value.save_as(path)
        data = path.read_bytes()
        extra = ""
        if fmt == "PNG":
            extra = f", {int.from_bytes(data[16:20], 'big')} px wide"
        elif fmt == "CSV":
            header = data.decode().splitlines()[0]
            extra = f", {header.count(',') + 1} columns ({header[:60]}…)"
        sizes.append(f"{fmt} {len(data) / 1e6:.2f} MB{extra} ({time.perf_counter() - t0:.1f} s)")
    note("7 exports (Compare)", "; ".join(sizes), "—")


def edges(page, url: str) -> None:
    page.goto(f"{url}/?strategy=fft&epsilon=20.0")
    page.locator('[data-testid="stAlert"]:has-text("range searched")').wait_for(timeout=120_000)
    warn = text(page, '[data-testid="stAlert"]:has-text("range searched")')
    note("9 auto rate at the end of its range", f"“{warn[:200]}”", "—")
    page.goto(f"{url}/budget")
    page.get_by_role("heading", name="Budget allocation", exact=True).wait_for(timeout=60_000)
    idle(page)
    on = [page.get_by_role("switch", name=f"LR ({p}) auto").is_checked() for p in ("LP", "FT")]
    note("9 Budget allocation's rates", f"LR (LP) auto: {on[0]}, LR (FT) auto: {on[1]} (as on Runs)", "—")
    page.goto(f"{url}/tuning")
    page.get_by_role("heading", name="Tuning", exact=True).wait_for(timeout=60_000)
    page.get_by_text("2 · Trials").wait_for(timeout=60_000)
    idle(page)
    none = page.get_by_text("No search yet").count()
    note("2 Tuning's study picker", "no auto search offered (“No search yet”)" if none else "offers a study", "—")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="also write the rows as JSON here")
    args = ap.parse_args()
    os.environ.setdefault("DPVIZ_UMAP_WARMUP", "1")  # as for any user: UMAP compiles in the background
    tmp = Path(tempfile.mkdtemp())
    cache = tmp / "cache"
    os.environ["DPVIZ_CACHE_DIR"] = str(cache)  # the command-line run of the walk stores there too
    print(f"load average before: {os.getloadavg()[0]:.1f} (on {os.cpu_count()} cores)")
    print("| item | what the page said and did | how long |\n|---|---|---|")
    t0 = time.perf_counter()
    with server(cache, tmp / "server.log") as url, browser() as b:
        page = b.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
        for step in (form_items, first_run, queued, pair, analyses, exports, edges):
            try:
                step(page, url, tmp) if step is exports else step(page, url)
            except Exception as e:  # noqa: BLE001 - a step that failed is a row of the walk too
                note(step.__name__, f"FAILED: {type(e).__name__}: {str(e).splitlines()[0][:200]}", "—")
    print(f"\nwalked in {time.perf_counter() - t0:.0f} s; load average after: {os.getloadavg()[0]:.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
