"""The dashboard in a real browser: sliders, a launch, live charts, deep links, PNG export."""

import io
import re
import time

import pytest
from PIL import Image

from browser_util import browser, need_chromium, server, slide
from dpviz.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.subprocess]  # Chromium and dashboard servers


def plot_points(page, index: int, yaxis: str = "y") -> int:
    """How many points the traces on ``yaxis`` of the index-th plotly chart hold (0 if not drawn yet)."""
    return page.evaluate(f"""() => {{
        const p = document.querySelectorAll('.js-plotly-plot')[{index}];
        if (!p || !p._fullData) return 0;
        return p._fullData.filter(t => t.yaxis === '{yaxis}')
            .reduce((n, t) => n + (t._length || (t.x && t.x.length) || 0), 0); }}""")


def test_sliders_launch_live_chart_deep_link_and_export(cache_dir, tmp_path):
    need_chromium()
    with browser() as b, server(cache_dir, tmp_path / "server.log") as url:
        page = b.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(url, timeout=60000)
        page.get_by_text("Launch run").wait_for(timeout=90000)
        slide(page, 0, 1, 1.5)  # ε 1.0 → 1.5
        page.get_by_text("ε = 1.5,").wait_for(timeout=60000)
        slide(page, 1, 4, 0.5)  # p 0.30 → 0.50, once the redraw for ε has ended
        page.get_by_text("lp 60 steps").wait_for(timeout=60000)
        epochs = page.get_by_label("epochs")
        epochs.fill("8")
        epochs.press("Enter")
        page.get_by_text("lp 24 steps").wait_for(timeout=60000)
        page.get_by_text("Launch run").click()
        deadline, grown = time.time() + 180, 0
        while time.time() < deadline and grown < 3:  # the test-accuracy panel (the live chart's 2nd) grows
            grown = plot_points(page, 0, "y2")
            time.sleep(0.5)
        assert grown >= 3, "the live accuracy chart never grew"
        bar = page.locator('.dpviz-progress[role="progressbar"]').first  # the run's bar, in lp-fft's colour
        assert 0 <= int(bar.get_attribute("aria-valuenow")) <= 100
        # text and label read at once: the bar is redrawn as the run steps, so two reads can see two steps
        shown, label = bar.evaluate("b => [b.innerText, b.getAttribute('aria-valuetext')]")
        assert " · lp-fft ε=1.5 p=0.5 · " in shown and label == shown
        # read in one script: the bar is redrawn every second, and an element replaced between a locator's
        # look-up and its evaluation is detached, with no computed style ("")
        fill, deadline = "", time.time() + 10
        while not fill and time.time() < deadline:
            fill = page.evaluate("""() => { const b = document.querySelector('.dpviz-progress[role="progressbar"]');
                return b ? getComputedStyle(b.lastElementChild.firstElementChild).backgroundColor : ""; }""")
            time.sleep(0.2)
        assert fill == "rgb(0, 158, 115)", fill  # Okabe–Ito bluish green, as lp-fft's curves
        run = Store(cache_dir).list_runs()[0]
        assert run["config"]["epsilon"] == 1.5 and run["config"]["lp_fraction"] == 0.5
    # A deep link as the very first request of a fresh server opens Compare with the shared sidebar.
    while Store(cache_dir).list_runs()[0]["status"] == "running":
        time.sleep(0.5)
    with browser() as b, server(cache_dir, tmp_path / "server2.log") as url:
        page = b.new_page(viewport={"width": 1400, "height": 1400}, accept_downloads=True)
        page.goto(url + "/compare", timeout=60000)
        page.get_by_role("heading", name="Compare").wait_for(timeout=90000)
        assert page.get_by_text("Differentially private fine-tuning lab").is_visible()
        page.get_by_role("link", name="Runs").first.wait_for(timeout=60000)  # the sidebar's page links
        assert page.get_by_role("link", name="Runs").count() >= 1
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length > 0", timeout=60000)
        with page.expect_download(timeout=60000) as dl:
            page.get_by_role("button", name="PNG", exact=True).first.click()
        path = dl.value.path()
        assert dl.value.suggested_filename.endswith(".png")
        img = Image.open(io.BytesIO(open(path, "rb").read()))
        assert img.format == "PNG" and img.size[0] == 1800  # 2× the 900 px wide figure


def test_a_page_lists_a_run_that_another_process_stored_after_it_was_drawn(cache_dir, tmp_path, cli_env):
    """Feature distortion opened on an empty store shows its empty state; a run made by the command line
    (another process) afterwards appears in its picker by itself, through the shared store watcher
    (`dashboard.layout.page_setup`), with no click or reload."""
    import subprocess
    import sys

    need_chromium()
    with browser() as b, server(cache_dir, tmp_path / "server.log") as url:
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url + "/distortion", timeout=60000)
        page.get_by_text("No run has feature checkpoints yet").wait_for(timeout=90000)
        assert page.get_by_role("heading", name="Feature distortion", exact=True).is_visible()
        out = subprocess.run([sys.executable, "-m", "dpviz", "run", "--strategy", "lp", "--epochs", "2",
                              "--lr-lp", "0.5", "--json", "--quiet"], env=cli_env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        run_id = __import__("json").loads(out.stdout)["run_id"]
        t0 = time.time()
        page.get_by_text(f"[{run_id}]").first.wait_for(timeout=30000)  # the picker's chip names the run
        waited = time.time() - t0
        assert page.get_by_text("No run has feature checkpoints yet").count() == 0
        assert page.locator('[data-testid="stException"]').count() == 0
    assert waited < 15, f"the page took {waited:.1f} s to list the run"


def test_live_charts_of_runs_on_three_datasets_read_at_1280_and_1024_px(cache_dir, tmp_path):
    """Three runs launched on three datasets (each from its own deep link, as three users of one server): the
    Runs page's live charts keep every title, axis title and legend entry whole and uncovered at 1280 and
    1024 px (a legend under each of three narrow charts covered "training step" and cut its entries)."""
    from figure_checks import FIGURES_JS, figure_problems

    need_chromium()
    rates = "lr_lp_auto=0&lr_lp=0.5&lr_ft_auto=0&lr_ft=0.02"  # typed: off the shipped grid, auto would search
    with browser() as b, server(cache_dir, tmp_path / "server.log") as url:
        for dataset in ("digits", "glyphs", "synthetic"):
            page = b.new_page(viewport={"width": 1280, "height": 1400})
            page.goto(f"{url}/?dataset={dataset}&epochs=2&seed=3&{rates}", timeout=60000)
            page.get_by_role("button", name="Launch run").click(timeout=90000)
            named = "" if dataset == "digits" else f" dataset={dataset}"  # the default dataset goes unnamed
            launched = f"Launched lp-fft ε=1 p=0.3{named} epochs=2 seed=3"
            try:  # two runs train in the server beside this page's first run: on two busy cores it can take a while
                page.get_by_text(launched).first.wait_for(timeout=120000)
            except Exception as e:
                tail = (tmp_path / "server.log").read_text()[-3000:]
                raise AssertionError(f"no {launched!r} within 120 s; the page said:\n"
                                     f"{page.inner_text('body')[:3000]}\nthe server's log ends:\n{tail}") from e
            page.close()
        deadline = time.time() + 240
        while time.time() < deadline and sum(r["status"] == "finished" for r in Store(cache_dir).list_runs()) < 3:
            time.sleep(1.0)
        runs = Store(cache_dir).list_runs()
        assert sorted(r["config"]["dataset"] for r in runs) == ["digits", "glyphs", "synthetic"], runs
        page = b.new_page(viewport={"width": 1280, "height": 1400})
        page.goto(url, timeout=60000)
        page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].some(p => p._fullData "
                               "&& p._fullData.length >= 3)", timeout=90000)
        lines = page.locator('.dpviz-progress[role="progressbar"]').all_inner_texts()
        assert sorted(re.search(r"dataset=(\w+)", t).group(1) for t in lines) == ["digits", "glyphs", "synthetic"]
        rows = []
        for width in (1280, 1024):  # the sidebar open: the main column is ≈ 950 and ≈ 700 px wide
            page.set_viewport_size({"width": width, "height": 1400})
            time.sleep(1.5)  # the columns reflow and plotly redraws at the new width
            figs = [f for f in page.evaluate(FIGURES_JS) if f["traces"] >= 3]
            assert figs, "no live chart of the three runs"
            rows += [f"{width} px, figure {f['index']} {f['title']!r}: {p}" for f in figs for p in figure_problems(f)]
        assert not rows, f"{len(rows)} problem(s):\n" + "\n".join(rows)
