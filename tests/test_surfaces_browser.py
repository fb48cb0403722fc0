"""What a user reads and saves on the dashboard, in a real browser: an export asked for on Compare while a chosen run
trains (the page redraws every 2 s), and at 1024 and 1280 px the Reproduction page's verdicts, the select boxes of
the run form, the Reproduction page and Compare, and Compare's legend of many runs."""

from __future__ import annotations

import time

import pytest

from browser_util import browser, need_chromium, server
from dpviz.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.subprocess]  # Chromium and dashboard servers

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EXPORT_BOUND_S = 150  # from the click to the file, in a browser slowed 8× beside a training run on 2 busy cores
# Thousands of tiny steps: the run is still training when the file comes (typed rates: auto would search first).
LONG_RUN = "strategy=lp&epochs=2000&batch_size=16&eval_every=5&lr_lp_auto=0&lr_lp=0.5"


def training(cache_dir) -> bool:
    runs = Store(cache_dir).list_runs()
    return bool(runs) and runs[0]["status"] == "running"


def test_an_export_downloads_while_the_chosen_run_trains(cache_dir, tmp_path):
    """A run launched from the form trains; Compare, with it chosen, redraws every 2 s. A click on PNG gives a PNG
    file within the bound, with a count on the page while it is prepared, and the run still trains.

    The browser's CPU is slowed 8×, as on a machine whose cores the training takes: the browser then draws each
    redraw late, which is when a download button with lazy data gave nothing (its click asked for an id that the
    next redraw had dropped)."""
    need_chromium()
    with browser() as b, server(cache_dir, tmp_path / "server.log") as url:
        page = b.new_page(viewport={"width": 1280, "height": 1200}, accept_downloads=True)
        page.goto(f"{url}/?{LONG_RUN}", timeout=60000)
        page.get_by_role("button", name="Launch run").click(timeout=90000)
        deadline = time.time() + 180
        while not training(cache_dir):
            assert time.time() < deadline, "the run never started training"
            time.sleep(0.5)
        page.goto(url + "/compare", timeout=60000)
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 0", timeout=90000)
        page.get_by_text("· running").first.wait_for(timeout=30000)  # the chosen run, training
        page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": 8})
        time.sleep(3)  # a few redraws: the browser falls behind them
        files = []
        page.on("download", lambda d: files.append(d))
        t0 = time.time()
        page.get_by_role("button", name="PNG", exact=True).first.click(timeout=60000)
        counted = shown(page, "Preparing the PNG", timeout=60)  # looked for once: each look slows this browser
        while not files and time.time() - t0 < EXPORT_BOUND_S:
            page.wait_for_timeout(1000)  # the download event lands while Playwright waits
        waited = time.time() - t0
        assert files, f"no file {waited:.0f} s after the click; the page said:\n{page.inner_text('body')[-1500:]}"
        data = open(files[0].path(), "rb").read()
        assert data.startswith(PNG_MAGIC), data[:16]
        assert files[0].suggested_filename.endswith(".png")
        assert counted, "no count while the file was prepared"
        assert training(cache_dir), "the run had stopped training: the export was not made while it trained"


def shown(page, text: str, timeout: float) -> bool:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.get_by_text(text).first.wait_for(timeout=timeout * 1000)
        return True
    except PlaywrightTimeout:
        return False


# Every select box's value and every chip drawn wider than its box (the value of a select box is an <input>).
CUT_SELECTS_JS = """() => [...document.querySelectorAll('[data-testid=stSelectbox], [data-testid=stMultiSelect]')]
    .filter(box => box.getBoundingClientRect().width > 0).flatMap(box => {
        const label = (box.querySelector('label') || {}).innerText || '?';
        return [...box.querySelectorAll('input, span')].filter(e => (e.tagName === 'INPUT' ? e.value : e.innerText)
            && !e.children.length && e.scrollWidth > e.clientWidth + 1)
            .map(e => `${label}: "${e.value || e.innerText}" drawn ${e.scrollWidth} px in ${e.clientWidth} px`);
    })"""

# The verdict table: what scrolls or is cut inside it, and each cell's text and whether the window shows it whole.
TABLE_JS = """key => {  // a data grid has no such key on the page: the page's first one is the verdicts'
    const t = document.querySelector('.st-key-' + key) || document.querySelector('[data-testid=stDataFrame]');
    if (!t) return null;
    const scrolls = [t, ...t.querySelectorAll('*')].filter(e => e.scrollWidth > e.clientWidth + 1
        && getComputedStyle(e).overflowX !== 'visible').map(e => `${e.scrollWidth} px in ${e.clientWidth} px`);
    const cells = [...t.querySelectorAll('table tr')].map(r => [...r.querySelectorAll('th, td')].map(c => {
        const b = c.getBoundingClientRect();
        return {text: c.innerText.trim(), whole: b.left >= 0 && b.right <= window.innerWidth + 0.5
                && c.scrollWidth <= c.clientWidth + 1};
    }));
    return {scrolls, cells};
}"""

# What plotly gives each figure's plot (its height in px, the legend and margins aside).
PLOT_HEIGHTS_JS = "() => [...document.querySelectorAll('.js-plotly-plot')].map(p => p._fullLayout._size.h)"


def verdict_problems(page, key: str, tasks: list[str]) -> list[str]:
    """What keeps a verdict of table ``key`` from being read: a scroll or cut inside it, a task column missing,
    a verdict cell outside the window or cut."""
    from dpviz import reproduce

    t = page.evaluate(TABLE_JS, key)
    if t is None:
        return [f"no table {key}"]
    rows = [f"{key} scrolls or cuts: {s}" for s in t["scrolls"]]
    if not t["cells"]:
        return rows + [f"{key}: no cell of its text is on the page (a data grid draws its cells on a canvas)"]
    header, body = [c["text"] for c in t["cells"][0]], t["cells"][1:]
    rows += [f"{key}: no column {task}" for task in tasks if task not in header]
    words = ("agrees", "partly", "does not", "—", reproduce.NOT_READ)
    for r in body:
        for name, c in zip(header, r):
            if name in tasks and not c["whole"]:
                rows.append(f"{key}, {r[0]['text']} on {name}: {c['text']!r} is not shown whole")
            if name in tasks and not c["text"].startswith(words):
                rows.append(f"{key}, {r[0]['text']} on {name}: {c['text']!r} is no verdict")
    return rows


def many_runs(cache_dir) -> None:
    """Five small runs whose labels differ in strategy, ε, seed and mechanism: long legend entries."""
    import dpviz
    from dpviz.config import RunConfig

    fast = dict(epochs=2, batch_size=256, eval_every=5, lr_lp=0.5, lr_ft=0.02)
    for kw in (dict(strategy="lp", lr_ft="auto"), dict(strategy="fft", lr_lp="auto"), dict(strategy="lp-fft"),
               dict(strategy="lp-fft", epsilon=2.0), dict(strategy="lp-fft", seed=1),
               dict(strategy="lp-fft", mechanism="bandmf", bands=2)):
        dpviz.run(RunConfig(**{**fast, **kw}), cache_dir=cache_dir)


def test_verdicts_selects_and_legend_read_whole_at_1024_and_1280_px(cache_dir, tmp_path):
    """At 1024 and 1280 px (the sidebar open): the Reproduction page shows every task's verdict whole, with no
    horizontal scroll; no select box of the run form, the Reproduction page or Compare cuts its value; Compare's
    legend of six runs covers no axis title, cuts no entry and leaves its plot at least 200 px high."""
    from figure_checks import FIGURES_JS, figure_problems

    from dpviz import tasks

    need_chromium()
    many_runs(cache_dir)
    shown = list(tasks.TASKS)
    rows = []
    with browser() as b, server(cache_dir, tmp_path / "server.log") as url:
        page = b.new_page(viewport={"width": 1280, "height": 1000})
        for path, ready in (("/reproduction", "Scorecard as CSV"), ("/", "Launch run"), ("/compare", None)):
            page.goto(url + path, timeout=60000)
            if ready:  # drawn after the table (the form)
                page.get_by_text(ready).first.wait_for(timeout=90000)
                page.wait_for_function("!document.querySelector('[data-testid=stSkeleton]')", timeout=60000)
            else:
                page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 0", timeout=90000)
                choose_all_runs(page)
            for width in (1280, 1024):
                page.set_viewport_size({"width": width, "height": 1000})
                time.sleep(2.0)  # the columns reflow and plotly redraws at the new width
                rows += [f"{path} at {width} px, select {c}" for c in page.evaluate(CUT_SELECTS_JS)]
                if path == "/reproduction":
                    rows += [f"{path} at {width} px: {p}" for p in verdict_problems(page, "re_table", shown)]
                if path == "/compare":
                    figs = page.evaluate(FIGURES_JS)
                    assert figs and figs[0]["traces"] == 6, [f["traces"] for f in figs]
                    rows += [f"{path} at {width} px, figure {f['index']}: {p}"
                             for f in figs for p in figure_problems(f)]
                    rows += [f"{path} at {width} px, figure {i}: its plot is {h:.0f} px high" for i, h
                             in enumerate(page.evaluate(PLOT_HEIGHTS_JS)) if h < 200]
                page.screenshot(path=str(tmp_path / f"{path.strip('/') or 'runs'}_{width}.png"), full_page=True)
            page.set_viewport_size({"width": 1280, "height": 1000})
    assert not rows, f"{len(rows)} problem(s):\n" + "\n".join(rows)


def choose_all_runs(page) -> None:
    """Add every stored run to Compare's picker (it starts with three)."""
    box = page.get_by_role("combobox", name="runs")
    for _ in range(10):
        box.click()
        options = page.get_by_role("option")
        try:
            options.first.wait_for(timeout=3000)
        except Exception:  # noqa: BLE001 - no option left: every run is chosen
            break
        options.first.click()
        page.wait_for_timeout(1500)  # the page redraws with one more run
    page.keyboard.press("Escape")
    page.wait_for_function("[...document.querySelectorAll('.js-plotly-plot')].some(p => p._fullData "
                           "&& p._fullData.length >= 6)", timeout=60000)
