"""A study as a user runs it in the browser: the Studies page on a fresh store shows the shipped reading, runs a
small study of one's own from its fields, counts the runs read, redraws the reading from them, and saves the
study's report."""

from __future__ import annotations

import time

import pytest

from browser_util import browser, need_chromium, server

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.subprocess]  # Chromium and a dashboard server


def test_a_study_runs_from_the_page_counts_its_runs_and_reads_them(cache_dir, tmp_path):
    need_chromium()
    with browser() as b, server(cache_dir, tmp_path / "server.log") as url:
        page = b.new_page(viewport={"width": 1280, "height": 1200}, accept_downloads=True)
        page.goto(f"{url}/studies", timeout=60000)
        page.get_by_text("shipped with dpviz").first.wait_for(timeout=90000)  # a fresh store reads the shipped study
        page.get_by_label("seeds", exact=True).fill("1")
        page.get_by_label("seeds", exact=True).press("Enter")
        page.get_by_text("axes and fields set on every run").click()
        page.get_by_label("ε", exact=True).fill("8")
        page.get_by_label("ε", exact=True).press("Enter")
        fields = page.get_by_label("fields set on every run (FIELD=VALUE, space-separated)", exact=True)
        fields.fill("train_size=200 epochs=1 batch_size=50")
        fields.press("Enter")
        page.get_by_text("0 of 3 runs read").wait_for(timeout=60000)
        page.get_by_role("button", name="Run / resume").click()
        deadline = time.time() + 300
        while "3 of 3 runs read" not in page.inner_text("body"):
            assert time.time() < deadline, page.inner_text("body")[-2000:]
            page.wait_for_timeout(1000)
        body = page.inner_text("body")
        assert "this store" in body and "--set train_size=200 epochs=1 batch_size=50 --vary epsilon=8" in body, body
        assert "At ε = 8" in body, body[-2000:]  # the reading, redrawn from the runs of one's own
        files = []
        page.on("download", lambda d: files.append(d))
        page.get_by_role("button", name="Report HTML").first.click()
        t0 = time.time()
        while not files and time.time() - t0 < 120:
            page.wait_for_timeout(1000)
        assert files, page.inner_text("body")[-1500:]
        html = open(files[0].path(), encoding="utf-8").read()
        assert "dpviz report: DP-SGD beside BandMF on default" in html and "--vary epsilon=8" in html
