"""The Runs form in a real browser: Launch trains exactly the configuration the form shows at the click.

Each test reads the form's displayed values from the page (what a person sees: the select boxes' text, the
sliders' thumb labels, the number inputs) just before clicking Launch, and compares them with the stored
run's configuration. One server serves the module (a fresh one after a test whose run is still training); each
test opens a fresh session on its own config.
"""

import contextlib
import math
import re
import time
from pathlib import Path

import pytest

from browser_util import browser, need_chromium, server, slide
from dpviz.privacy import randomness
from dpviz.store import Store

pytestmark = pytest.mark.slow

# Every widget of the form as displayed: label → text (a select box's chosen option, a slider's thumb label,
# an input's value), read in one script so that no rerun falls between two reads.
READ = """() => {
  const out = {};
  for (const w of document.querySelectorAll('[data-testid="stSelectbox"],[data-testid="stNumberInput"],'
                                          + '[data-testid="stSlider"],[data-testid="stTextInput"]')) {
    const label = w.querySelector('label').innerText.trim();
    const thumb = w.querySelector('[data-testid="stSliderThumbValue"]');
    out[label] = thumb ? thumb.innerText.trim() : w.querySelector('input').value;
  }
  return out; }"""

NAME = lambda t: t.split(" — ")[0]  # noqa: E731 - a choice shown as "name — label"
EPS = lambda t: math.inf if t == "no privacy" else float(t)  # noqa: E731
SHOWN = {"ε (privacy budget, log scale)": ("epsilon", EPS), "accountant": ("accountant", str),
         "strategy": ("strategy", NAME), "LP fraction p (share of steps and budget on LP)": ("lp_fraction", float),
         "dataset": ("dataset", NAME), "backbone": ("backbone", NAME),
         "training subset (0: all)": ("train_size", int), "tokens per text": ("max_length", int),
         "precision": ("precision", str), "epochs": ("epochs", int), "batch size B": ("batch_size", int),
         "clip norm C": ("clip_norm", float), "optimizer": ("optimizer", str), "seed": ("seed", int),
         "clipping": ("clipping", str), "randomness": ("randomness", str)}


def shown(page) -> dict:
    """The config fields the form displays now (max_length only for a text dataset: images have no tokens)."""
    out = {SHOWN[k][0]: SHOWN[k][1](v) for k, v in page.evaluate(READ).items() if k in SHOWN}
    if out["dataset"] not in ("tweets",):
        out.pop("max_length")
    return out


SETTLED = """() => {
  const ws = [...document.querySelectorAll('[data-testid="stSelectbox"],[data-testid="stNumberInput"],'
                                         + '[data-testid="stSlider"],[data-testid="stTextInput"]')];
  const labels = ws.map(w => w.querySelector('label').innerText.trim());
  return ['strategy', 'dataset', 'seed'].every(l => labels.includes(l))
         && !document.querySelector('[data-testid="stSkeleton"]')  // a widget whose code is still loading
         && !ws.some(w => w.closest('[data-stale="true"]')); }"""


def settled(page) -> None:
    """Wait until every field of the form is drawn (no placeholder of a widget whose code the browser is still
    loading) and none is stale (the page's redraw has reached them)."""
    page.wait_for_function(SETTLED, timeout=120000)


LAUNCHED: list[str] = []  # the runs this test's launches stored (`launched_run`); checked again at its end


def launched_run(cache_dir, before: set, timeout: float = 240) -> dict:
    """The one run stored since ``before`` (run ids), once that run has trained a step or ended. A second run
    of the same click fails here if it is there by then, and fails the test's end otherwise (`page`'s
    teardown: the runs stored during the test are exactly those its launches returned), however late."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        new = [r for r in Store(cache_dir).list_runs() if r["run_id"] not in before]
        if new and ((new[0]["step"] or 0) >= 1 or new[0]["status"] not in ("queued", "running")):
            assert len(new) == 1, f"one click stored {len(new)} runs"
            LAUNCHED.append(new[0]["run_id"])
            return new[0]
        time.sleep(0.3)
    raise AssertionError("no run was stored after Launch, or it never trained a step")


def assert_launched_as_shown(cache_dir, before: set, form: dict) -> dict:
    run = launched_run(cache_dir, before)
    differ = {k: (v, run["config"].get(k)) for k, v in form.items() if run["config"].get(k) != v}
    assert not differ, f"form showed ≠ launched: {differ}"
    return run


def set_number(page, label: str, value) -> None:
    box = page.get_by_label(label, exact=True).first
    box.fill(str(value))
    box.press("Enter")


def choose(page, label: str, name: str) -> None:
    """Pick option ``name`` (shown as "name — label") in the select box ``label``."""
    page.get_by_role("combobox", name=label, exact=True).click()
    page.get_by_role("option", name=re.compile(rf"^{re.escape(name)}( — |$)")).first.click()


def input_value(page, label: str) -> str:
    return page.get_by_label(label, exact=True).first.input_value()


class App:
    """The module's Chromium and the dashboard server on its store; `restart` replaces the server by a fresh one."""

    def __init__(self, b, cache: Path):
        self.browser, self.cache, self.starts = b, cache, 0
        self.servers = contextlib.ExitStack()
        self.start()

    def start(self) -> None:
        self.starts += 1
        self.url = self.servers.enter_context(server(self.cache, self.cache.parent / f"server-{self.starts}.log"))

    def restart(self) -> None:
        self.servers.close()  # SIGTERM: a run in flight is stored interrupted
        self.start()


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    need_chromium()
    cache = tmp_path_factory.mktemp("form") / "cache"
    cache.mkdir()
    with browser() as b:
        a = App(b, cache)
        try:
            yield a
        finally:
            a.servers.close()


@pytest.fixture
def page(app):
    ctx = app.browser.new_context(viewport={"width": 1400, "height": 1600})
    p = ctx.new_page()
    p.goto(app.url, timeout=60000)
    p.get_by_text("Launch run").wait_for(timeout=120000)
    settled(p)
    before = {r["run_id"] for r in Store(app.cache).list_runs()}
    LAUNCHED.clear()
    yield p, app.cache, app.url
    ctx.close()
    # one click, one run, until the very end of the test: no run stored but those its launches returned
    stored = sorted(r["run_id"] for r in Store(app.cache).list_runs() if r["run_id"] not in before)
    assert stored == sorted(LAUNCHED), f"runs stored during the test: {stored}; launched: {LAUNCHED}"
    # Each test asserts what its launch stored, not how the run ends: a run still training is stopped with its
    # server, so that the next test's run starts at once (a real-text run's first step alone takes half a minute).
    if any(r["status"] == "running" for r in Store(app.cache).list_runs()):
        app.restart()


def launch(page, cache) -> tuple[dict, set]:
    """Read the form, click Launch at once; (what the form showed at the click, the run ids before)."""
    before = {r["run_id"] for r in Store(cache).list_runs()}
    form = shown(page)
    page.get_by_role("button", name="Launch run").click()
    return form, before


@pytest.mark.real
def test_a_task_then_a_strategy_launches_the_task_with_that_strategy(page):
    """The task button sets every field it implies and the browser shows them; a strategy chosen after it
    keeps them (it used to revert the form to the digits, while the info box showed the tweets)."""
    page, cache, _ = page
    page.get_by_role("button", name="real-text").click()
    page.wait_for_function("() => document.querySelector('input[aria-label=\"dataset\"]').value.startsWith('tweets')",
                           timeout=30000)
    settled(page)
    assert input_value(page, "epochs") == "2" and input_value(page, "training subset (0: all)") == "4000"
    choose(page, "strategy", "lp")
    page.get_by_text("Phases: lp ").first.wait_for(timeout=30000)
    set_number(page, "training subset (0: all)", 500)  # a short run; the task's other fields stay
    page.get_by_text("over 4 steps").first.wait_for(timeout=30000)
    settled(page)
    form, before = launch(page, cache)
    cfg = assert_launched_as_shown(cache, before, form)["config"]
    assert (cfg["strategy"], cfg["dataset"], cfg["backbone"], cfg["max_length"], cfg["epochs"]) == \
        ("lp", "tweets", "minilm", 48, 2)


@pytest.mark.real
def test_a_strategy_then_a_task_keeps_the_strategy(page):
    """A task sets the task's fields and leaves the chosen strategy alone (it used to reset it to lp-fft while
    the form went on showing lp)."""
    page, cache, _ = page
    choose(page, "strategy", "lp")
    page.get_by_text("Phases: lp ").first.wait_for(timeout=30000)
    page.get_by_role("button", name="real-text").click()
    page.wait_for_function("() => document.querySelector('input[aria-label=\"dataset\"]').value.startsWith('tweets')",
                           timeout=30000)
    set_number(page, "training subset (0: all)", 600)
    page.wait_for_function("() => location.search.includes('train_size=600')", timeout=30000)
    settled(page)
    form, before = launch(page, cache)
    cfg = assert_launched_as_shown(cache, before, form)["config"]
    assert (cfg["strategy"], cfg["dataset"], cfg["epochs"]) == ("lp", "tweets", 2)


def test_sliders_moved_by_keyboard_and_launched_at_once(page):
    """ε and p moved with the keyboard, Launch clicked with no pause: the run has the values the thumbs show
    (Launch used to train the config of the page's last finished redraw, a move or more behind)."""
    page, cache, _ = page
    sliders = page.get_by_role("slider")
    sliders.nth(0).focus()
    page.keyboard.press("ArrowRight")  # ε 1.0 → 1.5
    sliders.nth(1).focus()
    for _ in range(6):  # p 0.30 → 0.60
        page.keyboard.press("ArrowRight")
    assert page.get_by_text("keeping or exporting its weights gives them its noise").first.is_visible()
    form, before = launch(page, cache)
    assert form["lp_fraction"] == 0.6 and form["epsilon"] == 1.5 and form["randomness"] == "seeded"
    assert_launched_as_shown(cache, before, form)
    # what the run releases, as the page says it: the live loss panel's label, and the line beside its ε
    page.get_by_text("Training loss (not covered by ε)").first.wait_for(timeout=90000)
    page.get_by_text(randomness.SEEDED_LINE).first.wait_for(timeout=90000)


def test_a_dragged_slider_then_launch_at_once_and_again(page):
    """The LP fraction dragged with the mouse and Launch clicked at once, then again while the run is there:
    one run, as the thumb shows, and one Watch row that says it was launched twice."""
    page, cache, _ = page
    thumb = page.locator('[data-testid="stSlider"]').nth(1).locator('input[type="range"]').locator("xpath=../..")
    box, tb = thumb.bounding_box(), thumb.locator("xpath=..").bounding_box()  # the thumb and its track
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(tb["x"] + 0.8 * tb["width"], y, steps=8)
    page.mouse.up()
    form, before = launch(page, cache)
    assert form["lp_fraction"] > 0.6, form["lp_fraction"]
    run = assert_launched_as_shown(cache, before, form)
    settled(page)  # the second click is a user's repeat, made on the drawn page (the first tests the race)
    page.get_by_role("button", name="Launch run").click()
    page.get_by_text("already has a job here").first.wait_for(timeout=90000)
    page.get_by_text("launched 2×, trained once").first.wait_for(timeout=90000)
    assert [r["run_id"] for r in Store(cache).list_runs() if r["run_id"] not in before] == [run["run_id"]]
    rows = page.locator('.dpviz-progress[role="progressbar"]').all_inner_texts()
    assert sum(run["run_id"] in t for t in rows) == 1, rows


def test_a_reload_in_between_keeps_the_form_and_launches_it(page):
    """Fields changed, the page reloaded, Launch: the reloaded form shows the changed fields and launches them."""
    page, cache, url = page
    choose(page, "strategy", "fft")
    slide(page, 0, 2, 2.0)  # ε 1.0 → 2.0, once fft's form is drawn
    page.get_by_text("ε = 2, δ").first.wait_for(timeout=30000)
    settled(page)  # fft's columns replace lp-fft's: until the redraw ends, the old seed box is there too
    seed = page.get_by_label("seed", exact=True)
    seed.fill("7")
    seed.press("Enter")
    page.wait_for_function("() => location.search.includes('seed=7')", timeout=30000)
    page.reload()
    page.get_by_text("Launch run").wait_for(timeout=60000)
    settled(page)
    form, before = launch(page, cache)
    assert (form["strategy"], form["epsilon"], form["seed"]) == ("fft", 2.0, 7)
    assert_launched_as_shown(cache, before, form)
