"""The dashboard stops when asked: SIGTERM or Ctrl-C (SIGINT) ends the server within seconds, and a run it was
training is stored interrupted, resumable from its last checkpoint; the server's last line says so in plain words
and it exits 0 (a thread still inside torch at exit made it abort with "terminate called without an active
exception")."""

import signal
import time

import pytest

from browser_util import browser, need_chromium, server_process
from dpviz.training import resume
from dpviz.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.subprocess]  # Chromium and a dashboard server


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_server_ends_within_seconds_and_leaves_its_run_interrupted(sig, cache_dir, tmp_path):
    need_chromium()
    with browser() as b, server_process(cache_dir, tmp_path / "server.log") as (proc, url):
        page = b.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(url, timeout=60000)
        page.get_by_text("Launch run").wait_for(timeout=120000)
        epochs = page.get_by_label("epochs", exact=True)
        epochs.fill("400")  # minutes of training: still running when the signal comes
        epochs.press("Enter")
        page.get_by_text("lp 720 steps").wait_for(timeout=60000)
        page.get_by_role("button", name="Launch run").click()
        store, deadline = Store(cache_dir), time.time() + 180
        while time.time() < deadline:  # training, past a checkpoint that a resume can start from
            runs = store.list_runs()
            if runs and runs[0]["status"] == "running" and store.load_resume(runs[0]["run_id"]) is not None:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"no checkpointed run in training: {store.list_runs()}")
        run = runs[0]
        t0 = time.time()
        proc.send_signal(sig)
        proc.wait(timeout=60)
        took = time.time() - t0
    after = Store(cache_dir).get_run(run["run_id"])
    log = (tmp_path / "server.log").read_text().strip().splitlines()
    assert proc.returncode == 0 and log[-1].startswith("dpviz: the dashboard stopped; 1 run stored interrupted ("), \
        (proc.returncode, log[-5:])  # one plain last line: no "terminate called without an active exception"
    assert took < 10, f"the server took {took:.1f} s to stop"
    assert after["status"] == "interrupted" and "--resume" in after["error"], after["error"]
    found = resume.stopped(Store(cache_dir), run["config_hash"])
    assert found is not None and found[0] == run["run_id"] and found[1]["step"] > 0
