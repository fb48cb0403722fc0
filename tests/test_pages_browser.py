"""Every page in a real browser, over a store of a few real small runs: a full-page screenshot of each
(in ``tests/screenshots/``, or ``$DPVIZ_SCREENSHOTS``) and checks on what it draws — no exception box, no
plotly title clipped by its figure, no figure of several traces without a legend, no legend over an axis
title or cut by its figure's edge, no select cut at 1024 px, no request beyond loopback (the Runs page's live
charts of runs on several datasets, at 1280 and 1024 px: `test_browser`).

One browser session visits every page of `dashboard.layout.PAGES` through the sidebar; the checks read
the drawn page (plotly's SVG and ``_fullData``), so they see what a user sees. Each assertion lists every
failing page and figure; ``summary.json`` beside the screenshots holds what each page showed.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from browser_util import ROOT, browser, need_chromium, server
from figure_checks import FIGURES_JS, clipped_titles, covered_axis_titles, cut_legend_entries, missing_legend

pytestmark = pytest.mark.slow

WIDTH, HEIGHT = 1400, 1000
NARROW = 1024  # the narrowest width a page must stay readable at

# Text inside a select box or multiselect (its value, its chips) or on a download button that its box cuts off:
# drawn wider than shown.
TRUNCATED_JS = """() => [...document.querySelectorAll(
        '[data-testid=stSelectbox], [data-testid=stMultiSelect], [data-testid=stDownloadButton]')]
    .filter(box => box.getBoundingClientRect().width > 0).flatMap(box => {
        const label = (box.querySelector('label') || {}).innerText || 'download button';
        return [...box.querySelectorAll('div, span')].filter(e => !e.children.length && e.innerText
            && e.scrollWidth > e.clientWidth + 1).map(e => `${label}: "${e.innerText}" drawn ${e.scrollWidth} px`
            + ` in ${e.clientWidth} px`);
    })"""

# Streamlit's state: still running (status widget, spinners, skeletons), how many charts and alerts are drawn.
STATE_JS = """() => [!!document.querySelector('[data-testid="stStatusWidget"], [data-testid="stSpinner"]'),
    document.querySelectorAll('[data-testid="stSkeleton"]').length,
    document.querySelectorAll('.js-plotly-plot').length,
    document.querySelectorAll('[data-testid="stAlert"], [data-testid="stException"]').length,
    document.body.innerText.length]"""

# Streamlit scrolls its main block, not the window: the tallest scroller is the page's full height.
HEIGHT_JS = """() => Math.max(document.body.scrollHeight, ...[...document.querySelectorAll(
    '[data-testid="stMain"], [data-testid="stAppViewContainer"], section.main, .main')].map(e => e.scrollHeight))"""


# Every URL a page asked for or points its resources at (link/script/img/… and the favicon Streamlit sets),
# collected over the walk: the dashboard must work offline and leak no request beyond loopback.
REQUESTS: set[str] = set()
RESOURCES_JS = """() => [...document.querySelectorAll('link[href], script[src], img[src], iframe[src], source[src], '
    + 'video[src], audio[src], embed[src]')].map(e => e.href || e.src)"""


def beyond_loopback(urls) -> list[str]:
    from urllib.parse import urlsplit

    return sorted(u for u in urls if urlsplit(u).scheme in ("http", "https", "ws", "wss")
                  and urlsplit(u).hostname not in ("127.0.0.1", "localhost", "::1"))


def screenshot_dir() -> Path:
    d = Path(os.environ.get("DPVIZ_SCREENSHOTS") or ROOT / "tests" / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


def settle(page, timeout: float = 45.0) -> None:
    """Wait until the script has stopped running and the drawn page has not changed for ~1.2 s."""
    deadline, last, calm = time.time() + timeout, None, 0
    while time.time() < deadline and calm < 3:
        now = page.evaluate(STATE_JS)
        calm = calm + 1 if now == last and not now[0] and not now[1] else 0
        last = now
        time.sleep(0.4)
    time.sleep(0.5)  # plotly's last relayout


# Pages that draw from the stored runs and studies, and the figures each draws at least once all has landed.
FIGURED = {"Feature distortion": 2, "Separability law": 2, "Budget allocation": 2, "Tuning": 2,
           "Sparse fine-tuning": 2}


def await_figures(page, n: int, timeout: float = 90.0) -> None:
    """Wait until the page draws ``n`` figures (or ``timeout`` passes), then settle again: what a page computes
    in the background (the feature maps, a fit) lands after the rest of it has stopped changing, later the busier
    the cores are."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    enough = f"() => document.querySelectorAll('.js-plotly-plot').length >= {n}"
    if page.evaluate(enough):
        return
    try:
        page.wait_for_function(enough, timeout=timeout * 1000)
    except PlaywrightTimeout:
        return  # the test names the page and what it drew
    settle(page)


def full_page_screenshot(page, path: Path) -> None:
    height = min(int(page.evaluate(HEIGHT_JS)) + 80, 16000)
    page.set_viewport_size({"width": WIDTH, "height": max(height, HEIGHT)})
    time.sleep(0.6)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


@pytest.fixture(scope="module")
def visits(tmp_path_factory, backbone_cache) -> dict[str, dict]:
    """Make a store of a few small real runs and a small study for each page that draws one (a search, a budget
    sweep, a sparse profile), then visit every page once and record what it drew."""
    import dpviz
    from dashboard.layout import PAGES
    from dpviz import sweeps
    from dpviz.analyses.service import analyze
    from dpviz.config import RunConfig
    from dpviz.store import Store

    need_chromium()
    cache_dir = tmp_path_factory.mktemp("pages") / "cache"
    cache_dir.mkdir()
    os.symlink(backbone_cache, cache_dir / "backbones")
    for strategy in ("lp", "fft", "lp-fft"):  # start and end checkpoints; the curvature analysis is left
        s = dpviz.run(RunConfig(strategy=strategy, epochs=2, batch_size=256, eval_every=5),  # to the page (70 s)
                      cache_dir=cache_dir)
        for step in Store(cache_dir).feature_steps(s["run_id"]):
            for name in ("knn", "separability"):
                analyze(Store(cache_dir), s["run_id"], name, step=step)
    fast = dict(epochs=2, batch_size=512, eval_every=50)  # a study of each page that draws one (≈ 25 s in all)
    studies = [sweeps.create_search(RunConfig(strategy="lp-fft", epsilon=2.0, **fast), {"lr_lp": [0.05, 5.0],
                                    "lr_ft": [0.001, 0.3]}, trials=5, proxy="glyphs", cache_dir=cache_dir),
               sweeps.create_budget_sweep(RunConfig(**fast), sweeps.budget_grid(epsilons=["1", "8"],
                                          fractions=[0.0, 0.5, 1.0], seeds=[0]), cache_dir=cache_dir),
               sweeps.create_grid_sweep("sparse", RunConfig(strategy="sparse", **{**fast, "epochs": 3}),
                                        sweeps.sparse_points(epsilons=["2"], sparsities=[0.2], seeds=[0],
                                                             selections=["sparta", "bias"]), cache_dir=cache_dir)]
    for study in studies:
        sweeps.work(study, run=dpviz.run, cache_dir=cache_dir)
    shots, seen = screenshot_dir(), {}
    with browser() as b, server(cache_dir, shots / "server.log") as url:
        page = b.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.on("request", lambda r: REQUESTS.add(r.url))
        page.goto(url, timeout=60000)
        page.get_by_role("heading", name="Runs", exact=True).wait_for(timeout=90000)
        for n, (_, title, _) in enumerate(PAGES):
            page.get_by_role("link", name=title).first.click()
            page.get_by_role("heading", name=title, exact=True).wait_for(timeout=60000)
            settle(page)
            if title in FIGURED:
                await_figures(page, FIGURED[title])
            REQUESTS.update(page.evaluate(RESOURCES_JS))
            path = shots / f"{n:02d}-{slug(title)}.png"
            full_page_screenshot(page, path)
            seen[title] = {
                "screenshot": str(path),
                "exceptions": page.locator('[data-testid="stException"]').all_inner_texts(),
                "alerts": [" ".join(t.split())[:240] for t in page.locator('[data-testid="stAlert"]').all_inner_texts()],
                "figures": page.evaluate(FIGURES_JS),
            }
            page.set_viewport_size({"width": NARROW, "height": HEIGHT})  # after the figures: plotly redraws
            time.sleep(0.8)  # the columns reflow
            seen[title]["truncated_at_1024"] = page.evaluate(TRUNCATED_JS)
            page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    (shots / "summary.json").write_text(json.dumps(seen, indent=1, ensure_ascii=False))
    return seen


def report(rows: list[str]) -> str:
    return f"{len(rows)} problem(s):\n" + "\n".join(rows)


def test_no_page_shows_an_exception(visits):
    """Every page of the sidebar is reached and draws without an exception box; pages that draw from stored
    runs and studies draw their figures (the Curvature page's figures: tests/test_app.py, from cached results)."""
    from dashboard.layout import PAGES

    assert list(visits) == [title for _, title, _ in PAGES]
    rows = [f"{title}: {' '.join(e.split())[:300]}" for title, v in visits.items() for e in v["exceptions"]]
    assert not rows, report(rows)
    drawn = {title: len(v["figures"]) for title, v in visits.items()}
    assert all(drawn[t] >= n for t, n in FIGURED.items()), drawn


def test_no_figure_title_is_clipped(visits):
    rows = [f"{title}, figure {f['index']} {f['title']!r}: {c}" for title, v in visits.items()
            for f in v["figures"] for c in clipped_titles(f)]
    assert not rows, report(rows)


def test_every_figure_of_several_traces_has_a_legend(visits):
    rows = [f"{title}, figure {f['index']} {f['title']!r}: {m}" for title, v in visits.items()
            for f in v["figures"] if (m := missing_legend(f))]
    assert not rows, report(rows)


def test_no_page_asks_anything_beyond_loopback(visits):
    """No request and no resource of any page (the favicon included) goes to another host: the dashboard
    works offline and tells nobody what it shows."""
    assert REQUESTS, "no request was recorded"
    outside = beyond_loopback(REQUESTS)
    assert not outside, report(outside)


def test_the_loopback_check_sees_a_request_to_another_host():
    assert beyond_loopback(["http://127.0.0.1:8501/x", "data:image/svg+xml,<svg/>",
                            "https://fonts.gstatic.com/s/i/lock.svg"]) == ["https://fonts.gstatic.com/s/i/lock.svg"]


def test_no_select_is_cut_at_1024_px(visits):
    """At 1024 px wide (the sidebar open) every select box shows its value, every chip of a multiselect and every
    download button's label whole."""
    rows = [f"{title}: {t}" for title, v in visits.items() for t in v["truncated_at_1024"]]
    assert not rows, report(rows)


def test_no_legend_covers_an_axis_title(visits):
    rows = [f"{title}, figure {f['index']} {f['title']!r}: {c}" for title, v in visits.items()
            for f in v["figures"] for c in covered_axis_titles(f)]
    assert not rows, report(rows)


def test_no_legend_entry_is_cut(visits):
    rows = [f"{title}, figure {f['index']} {f['title']!r}: {c}" for title, v in visits.items()
            for f in v["figures"] for c in cut_legend_entries(f)]
    assert not rows, report(rows)


def test_the_legend_check_sees_an_entry_over_an_axis_title():
    title = {"text": "training step", "box": [800, 810, 900, 830]}
    over = {"svg_width": 900, "legend_items": [[790, 820, 950, 840]], "axis_titles": [title]}
    below = {"svg_width": 900, "legend_items": [[790, 835, 950, 850]], "axis_titles": [title]}
    assert covered_axis_titles(over) and not covered_axis_titles(below)
