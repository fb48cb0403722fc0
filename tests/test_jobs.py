"""Background jobs: one job per configuration, stored answers with their real curves, an interrupted server's
runs left resumable; the wait policy every dpviz process starts with; labels that tell runs apart."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from dpviz import results
from dpviz.training import resume
from dpviz.jobs import JobManager
from dpviz.store import Store
from dpviz.runtime.threads import SPIN, set_wait_policy


@pytest.mark.slow
def test_a_config_launched_again_joins_its_job_and_a_stored_one_answers_with_its_curves(cache_dir, fast_cfg):
    cfg = fast_cfg(strategy="lp-fft", lr_lp=0.5, lr_ft=0.01)
    jm = JobManager(cache_dir, max_workers=2, analyses=False)
    first = jm.submit(cfg)
    again = jm.submit(cfg)  # queued or training: the same job, not a second spend of ε
    assert again is first and first.joined == 1
    first.wait(120)
    assert jm.submit(cfg) is first and first.joined == 2  # finished and stored: still the one job
    stored = Store(cache_dir).list_runs()
    assert len(stored) == 1 and stored[0]["status"] == "finished"
    other = JobManager(cache_dir, max_workers=1, analyses=False)  # another server: answered from the store
    job = other.submit(cfg)
    summary = job.wait(60)
    assert summary["cached"] and job.cached and job.run_id == stored[0]["run_id"]
    assert job.last["test_accuracy"] == summary["test_accuracy"] is not None
    assert job.step == job.total_steps == stored[0]["total_steps"] > 0
    assert "answered from the store" in other.state(job)["text"]
    curve = results.curves(Store(cache_dir), [job.run_id, first.run_id], ["loss"])
    assert len(curve) == len(Store(cache_dir).metrics(job.run_id, "loss")["loss"]) > 2  # each point once
    assert list(curve["step"]) == sorted(curve["step"])  # never drawn back to its start
    forced = jm.submit(cfg, force=True)  # asked for: a second run
    forced.wait(120)
    assert forced is not first and len(Store(cache_dir).list_runs()) == 2
    for m in (jm, other):
        m.shutdown()


@pytest.mark.slow
def test_an_interrupted_manager_stores_its_run_interrupted_and_resumable(cache_dir, fast_cfg):
    cfg = fast_cfg(strategy="fft", epochs=300, lr_ft=0.01)
    jm = JobManager(cache_dir, max_workers=1, analyses=False)
    job = jm.submit(cfg)
    store, deadline = Store(cache_dir), time.time() + 120
    while time.time() < deadline and not (job.run_id and job.step > 0 and store.load_resume(job.run_id)):
        time.sleep(0.2)
    assert job.status == "running", job.status
    t0 = time.time()
    assert jm.interrupt(timeout=5) == [job.run_id]
    assert time.time() - t0 < 6
    run = store.get_run(job.run_id)
    assert run["status"] == "interrupted" and "--resume" in run["error"]
    found = resume.stopped(store, run["config_hash"])
    assert found is not None and found[0] == job.run_id and 0 < found[1]["step"] < run["total_steps"]


@pytest.mark.subprocess
def test_dpviz_sets_a_short_openmp_spin_unless_the_user_set_one():
    assert set_wait_policy({}) == SPIN
    env = {"GOMP_SPINCOUNT": "50"}
    assert set_wait_policy(env) == {} and env == {"GOMP_SPINCOUNT": "50"}
    clean = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    probe = "import os, sys; import dpviz; print(os.environ.get('GOMP_SPINCOUNT'))"
    late = "import os, torch, dpviz; print(os.environ.get('GOMP_SPINCOUNT'))"  # torch first: too late, unset
    out = [subprocess.run([sys.executable, "-c", c], env=clean, capture_output=True, text=True).stdout.strip()
           for c in (probe, late)]
    assert out == [SPIN["GOMP_SPINCOUNT"], "None"]


def test_labels_name_what_tells_the_runs_apart():
    def run(rid, **c):
        base = dict(strategy="lp-fft", epsilon=1.0, lp_fraction=0.3, seed=0, dataset="digits", backbone="cnn",
                    lr_lp=0.5, lr_ft=0.01)
        return {"run_id": rid, "kind": "user", "config": {**base, **c}}

    runs = [run("a"), run("b", lp_fraction=0.6), run("c", seed=1), run("d", strategy="lp", lp_fraction=0.3)]
    labels = results.run_labels(runs)
    assert len({v.split(" [")[0] for v in labels.values()}) == 4, labels  # distinct without their ids
    assert labels["b"].startswith("lp-fft ε=1 p=0.6") and "seed=1" in labels["c"]
    assert "p=" not in labels["d"]  # lp reads no LP fraction
    both = results.run_labels([run("a"), run("t", dataset="tweets", backbone="minilm")])
    assert "dataset=tweets" in both["t"] and "backbone=minilm" in both["t"]
    # max_length differs too, and is named only where a text dataset reads it (an image run never says it)
    mixed = results.run_labels([run("v", dataset="fashion-mnist", backbone="efficientnet_lite0", max_length=64),
                                run("t", dataset="tweets", backbone="minilm", max_length=48)])
    assert "max_length=48" in mixed["t"] and "max_length" not in mixed["v"], mixed
    assert results.run_labels([run("a"), run("a2")])["a2"] == "lp-fft ε=1 p=0.3 [a2]"  # nothing differs


def test_a_launch_and_a_job_are_named_by_what_tells_them_apart():
    from dpviz.config import RunConfig

    cfg = RunConfig(dataset="glyphs", seed=3, epsilon=2.0, lp_fraction=0.5)
    assert results.launch_label(cfg.to_dict()) == "lp-fft ε=2 p=0.5 dataset=glyphs seed=3"
    assert results.launch_label(RunConfig().to_dict()) == "lp-fft ε=1 p=0.3"  # the defaults: nothing to name
    jobs = {1: RunConfig().to_dict(), 2: RunConfig(dataset="glyphs").to_dict(), 3: RunConfig(seed=4).to_dict()}
    names = results.config_labels(jobs)
    assert names == {1: "lp-fft ε=1 p=0.3 dataset=digits seed=0", 2: "lp-fft ε=1 p=0.3 dataset=glyphs seed=0",
                     3: "lp-fft ε=1 p=0.3 dataset=digits seed=4"}


def test_a_figure_over_runs_of_two_datasets_says_so():
    import pandas as pd

    from dpviz import figures

    df = pd.DataFrame([dict(run_id=r, label=r, strategy="lp", epsilon=1.0, seed=0, group=r, dataset=d, step=s,
                            metric="loss", value=1.0 / (s + 1)) for r, d in (("a", "digits"), ("b", "tweets"))
                       for s in range(3)])
    title = figures.metric_curves(df, "loss").layout.title.text
    assert "runs on different datasets: digits, tweets" in title
    assert "datasets" not in figures.metric_curves(df[df.dataset == "digits"], "loss").layout.title.text


def test_an_error_message_is_shown_as_plain_text():
    from dashboard.layout import plain

    assert plain("/data/*/x_1.txt costs $5, _a_ [b](c)") == "/data/\\*/x_1.txt costs \\$5, \\_a\\_ \\[b\\](c)"
    assert json.dumps(plain("ok")) == '"ok"'


@pytest.mark.slow
def test_cancel_is_acknowledged_at_once_and_stops_a_search_trial_within_seconds(cache_dir, monkeypatch):
    """A job searching its "auto" rates is cancelled inside a trial: its line says so at once, and it ends
    cancelled within seconds, not after the trial (nor the search)."""
    from dpviz.config import RunConfig

    monkeypatch.setenv("DPVIZ_AUTO_SEARCH", "on")
    jm = JobManager(cache_dir, max_workers=1, analyses=False)
    job = jm.submit(RunConfig(strategy="fft", epsilon=8.0, epochs=3))  # off the shipped grid: it searches
    deadline = time.time() + 120
    while not (job.phase == "searching" and Store(cache_dir).list_runs(kind=None)) and time.time() < deadline:
        time.sleep(0.05)  # until a trial's run is training
    assert job.phase == "searching"
    while "left" not in jm.state(job)["text"] and time.time() < deadline:
        time.sleep(0.05)  # the trial's steps count, with a measured estimate
    assert re.search(r"trial 1 of \d+, step \d+ of \d+, about (\d+ min )?\d+ s left", jm.state(job)["text"])
    job.cancel()
    assert jm.state(job)["phase"] == "cancelling" and "cancelling" in jm.state(job)["text"]
    t0 = time.time()
    job.wait(60)  # a cancelled job ends without an error
    assert job.status == "cancelled" and time.time() - t0 < 10
    assert jm.state(job)["phase"] == "cancelled"
    trial = Store(cache_dir).list_runs(kind=None)[-1]
    assert trial["status"] == "cancelled" and trial["kind"] == "search"
    jm.shutdown()


def test_a_wait_reads_as_a_person_reads_it():
    from dpviz.jobs import duration

    assert [duration(s) for s in (0.3, 4.4, 59.6, 200, 3725)] == ["under 1 s", "4 s", "1 min 00 s", "3 min 20 s",
                                                               "1 h 02 min"]


def test_a_pass_over_the_data_before_the_first_step_is_counted(cache_dir, fast_cfg):
    """An LP run's passes (the test split, the evaluation subset, the training set's features) report their rows
    as they go, and a job's line counts them with the time left."""
    from dpviz.jobs import Job
    from dpviz.training import loop, prepare

    seen = []
    prep = prepare.prepare(fast_cfg(strategy="lp", lr_lp=0.5).fixed_rates(), cache_dir=cache_dir)
    loop.train(prep, store=None, run_id="x", progress=lambda step, total, last: seen.append((step, last.get("pass"))))
    passes = [p for step, p in seen if p is not None]
    assert {p[0] for p in passes} >= {"test split", "features of the training set"}
    train = [p for p in passes if p[0] == "features of the training set"]
    assert train[-1][1] == train[-1][2] == prep.bundle.n and all(step == 0 for step, p in seen if p)
    jm = JobManager(cache_dir, max_workers=1, analyses=False)
    job = Job(job_id=1, cfg=prep.cfg, phase="training", last={"pass": ["features of the training set", 512, 2048, 4.0]})
    assert jm.state(job)["text"] == "before the first step: features of the training set, 512 of 2,048, about 12 s left"
    jm.shutdown()


def test_a_training_line_gives_the_time_left_at_the_measured_pace_and_the_first_step_counts_seconds(cache_dir):
    from dpviz.config import RunConfig
    from dpviz.jobs import Job, eta, time_left

    jm = JobManager(cache_dir, max_workers=1, analyses=False)
    now = time.time()
    pace = eta.Pace(phases=[("fft", 100)], eval_every=10)
    for step in range(10, 31):  # 2 s a step from step 10 to 30
        pace.observe(step, now - 40.0 + 2.0 * (step - 10))
    job = Job(job_id=1, cfg=RunConfig(), phase="training", step=30, total_steps=100, pace=pace)
    assert jm.state(job)["text"] == "training (step 30 of 100, about 2 min 20 s left)"  # 2 s a step, 70 to go
    job.pace = None  # no step measured yet: no promise
    assert jm.state(job)["text"] == "training (step 30 of 100)"
    first = Job(job_id=2, cfg=RunConfig(), phase="training", since=now - 14.2)
    assert jm.state(first)["text"].endswith("takes longest): 14 s so far")
    early = eta.Pace(phases=[("fft", 10)])
    early.observe(5, now - 0.5), early.observe(6, now)
    assert time_left(early) is None  # fewer steps than a window measured: too early to say
    jm.shutdown()


@pytest.mark.slow
def test_a_job_alone_trains_on_every_core_and_two_at_once_share_them(cache_dir, fast_cfg):
    from dpviz.runtime import pool

    jm = JobManager(cache_dir, max_workers=2, analyses=False)  # the dashboard's two workers
    alone = jm.submit(fast_cfg(seed=1))
    alone.wait(120)
    assert alone.threads_seen == {pool.threads_per_worker(1)}  # every core: os.cpu_count()
    longer, shorter = jm.submit(fast_cfg(seed=2, epochs=12)), jm.submit(fast_cfg(seed=3, epochs=3))
    longer.wait(240), shorter.wait(240)
    for job in (longer, shorter):  # half each while both trained
        assert pool.threads_per_worker(2) in job.threads_seen, job.threads_seen
    assert pool.threads_per_worker(1) in longer.threads_seen  # every core again once the other had finished


def test_a_pages_task_shares_the_cores_with_the_jobs_by_the_one_rule(cache_dir, fast_cfg):
    """A page's task (an audit, a private search…) runs on the manager's task threads and counts among the
    work training: alone it has every core, beside a training job half of them, and the job half too."""
    import threading

    import torch

    from dpviz.runtime import pool

    jm = JobManager(cache_dir, max_workers=2, analyses=False)
    release, seen = threading.Event(), []

    def work(progress, cancel):
        progress(0, 1, "alone")
        seen.append(torch.get_num_threads())
        release.wait(120)
        progress(1, 1, "beside a job")
        seen.append(torch.get_num_threads())
        return "done"

    task = jm.run_task("audit", work)
    while not seen:
        time.sleep(0.05)
    job = jm.submit(fast_cfg(seed=11, epochs=6))
    while job.step < 2 and not job.done:
        time.sleep(0.05)
    release.set()
    assert task.future.result(120) == "done"
    job.wait(240)
    assert seen == [pool.threads_per_worker(1), pool.threads_per_worker(2)]
    assert pool.threads_per_worker(2) in job.threads_seen  # the job gave half to the task
    jm.shutdown()


def test_a_page_s_analysis_runs_on_one_core_at_the_lowest_priority_while_anything_trains(cache_dir):
    """Background analyses yield to training: one torch thread while a job or task trains (checked as each
    starts), every core once nothing does, and their threads at nice 19 either way."""
    import os
    import threading

    import torch

    from dpviz.runtime.pool import threads_per_worker

    jm = JobManager(cache_dir, max_workers=1, analyses=False)

    def probe():
        return torch.get_num_threads(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    release, started = threading.Event(), threading.Event()

    def training(progress, cancel):  # a page's task counts as training while it runs
        started.set()
        release.wait(30)

    task = jm.run_task("holds the cores", training)
    assert started.wait(30)
    assert jm.background(jm.analysis_pool, probe).result(30) == (1, 19)
    assert jm.background(jm.curvature_pool, probe).result(30) == (1, 19)
    release.set()
    task.future.result(30)
    assert jm.background(jm.analysis_pool, probe).result(30) == (threads_per_worker(1), 19)
    jm.shutdown()
