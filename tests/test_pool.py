"""The worker pool: a sweep, the scorecard and an "auto" proxy search all go through it; its workers take
each item once and train with their share of the cores."""

import os
from pathlib import Path

import pytest

import dpviz
from dpviz import reproduce, sweeps
from dpviz.autotune import proxy
from dpviz.config import RunConfig
from dpviz.runtime import pool
from dpviz.sweeps.trials import Trials


class Reached(Exception):
    pass


def test_a_sweep_the_scorecard_and_a_proxy_search_go_through_the_one_pool(monkeypatch, cache_dir):
    calls = []

    def record(name):
        def entry(source, **kw):
            calls.append((name, type(source), kw.get("workers"), kw.get("here", True), kw.get("limit")))
            raise Reached  # where it would start training: nothing trains
        return entry

    monkeypatch.setattr(pool, "run", record("run"))
    monkeypatch.setattr(pool, "serve", record("serve"))
    study = sweeps.create_budget_sweep(RunConfig(epochs=1, batch_size=512), sweeps.budget_grid(
        epsilons=["1"], fractions=[0.0, 1.0], seeds=[0]), cache_dir=cache_dir)
    with pytest.raises(Reached):
        sweeps.run_local(study, run=dpviz.run, workers=2, cache_dir=cache_dir)
    with pytest.raises(Reached):
        reproduce.run(["003-selection"], seeds=(0,), cache_dir=cache_dir, workers=2)  # 3 runs: 2 workers
    with pytest.raises(Reached):
        proxy.search(RunConfig(strategy="fft", epochs=1, batch_size=512), ["lr_ft"], cache_dir=cache_dir, trials=2)
    assert calls == [("run", Trials, 2, True, None),  # the sweep: this process is one of the workers
                     ("run", pool.Items, 2, False, None),  # the scorecard: this process watches
                     ("serve", Trials, None, True, 1)]  # a proxy search: one trial at a time, here


def record_threads(path: str) -> None:
    import torch

    Path(path).write_text(f"{os.getpid()} {torch.get_num_threads()}")


@pytest.mark.subprocess  # two spawned workers
def test_pool_workers_take_each_item_once_with_their_share_of_the_cores(tmp_path):
    paths = [str(tmp_path / f"{i}.txt") for i in range(4)]
    heard = []
    failed = pool.run(pool.Items(paths + [str(tmp_path / "no" / "such" / "dir")], record_threads), workers=2,
                      here=False, progress=lambda k, error: heard.append((k, error is None)))
    assert failed == 0  # a failing item is answered with its error; its worker goes on
    assert [k for k, _ in heard] == [1, 2, 3, 4, 5] and sorted(ok for _, ok in heard) == [False] + [True] * 4
    seen = [Path(p).read_text().split() for p in paths]
    assert {int(threads) for _, threads in seen} == {pool.threads_per_worker(2)}
    assert os.getpid() not in {int(pid) for pid, _ in seen}  # children trained them, this process watched
