"""The store's read side refuses what its write side refuses, and a file is what its run wrote there.

An independent tester's cases, each as a test: links inside ``tensors/`` (the folder, a sub-folder), a FIFO in
place of a shared tensor file (a read used to block forever), step files swapped, truncated or replaced by a raw
tensor, weights whose bases form a cycle, a damaged shared tensor's message (it named the tensor sub-folder as a
run), a fresh store whose ``tensors/`` is a link (refused before training), and ``--force`` while the same
configuration trains (it said nothing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
import torch

from dpviz.errors import StoreError
from dpviz.store import Store

BIG = (160, 160)  # 100 KiB in float32: kept once per store, by reference


def _run(s: Store, seed: int = 0) -> str:
    """A stored run with full weights at step 0, changed weights at steps 4 and 8 (based on 0), and a model."""
    rid = s.create_run(f"{seed:016x}", "{}")
    g = torch.Generator().manual_seed(seed)
    first = {"emb": torch.randn(BIG, generator=g), "w": torch.randn(BIG, generator=g), "b": torch.zeros(3)}
    s.save_weights(rid, 0, first)
    for step in (4, 8):
        s.save_weights(rid, step, {**first, "w": first["w"] + step, "b": torch.full((3,), float(step))},
                       base=(0, first))
    s.save_features(rid, 0, {"layer_0": torch.ones(4, 2).numpy(), "labels": torch.zeros(4).numpy()})
    s.save_model(rid, {**first, "b": torch.ones(3)}, {"seed": seed})
    s.finish_run(rid, "finished", summary={})
    return rid


def _tensor_file(s: Store) -> os.PathLike:
    return sorted((s.root / "tensors").glob("*/*.pt"))[0]


def _fresh(tmp_path) -> tuple[Store, str]:
    s = Store(tmp_path / "store")
    rid = _run(s)
    Store(tmp_path / "store")  # a second opening: nothing cached in this process decides the reads below
    return s, rid


def _blocked_read(fn, timeout: float = 10.0):
    """Call ``fn`` in a thread; fail if it has not returned (or raised) within ``timeout`` (a blocked open)."""
    out: list = []

    def go():
        try:
            out.append(("ok", fn()))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(("err", e))

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    assert out, f"the read blocked for more than {timeout} s"
    return out[0]


@pytest.mark.parametrize("where", ["tensors", "tensors/<xx>"])
def test_a_link_inside_tensors_is_refused_when_reading(tmp_path, where):
    s, rid = _fresh(tmp_path)
    folder = s.root / "tensors" if where == "tensors" else _tensor_file(s).parent
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(folder, elsewhere)  # the same bytes: only the link itself is wrong
    shutil.rmtree(folder)
    os.symlink(elsewhere, folder)
    with pytest.raises(StoreError, match=r"is a link: remove it"):
        s.load_weights(rid, 4)
    if where == "tensors":  # a store whose own folder is a link: refused before anything trains
        with pytest.raises(StoreError, match=r"tensors is a link"):
            s.create_run("f" * 16, "{}")


def test_a_fifo_in_place_of_a_shared_tensor_is_refused_at_once(tmp_path):
    s, rid = _fresh(tmp_path)
    path = _tensor_file(s)
    path.unlink()
    os.mkfifo(path)
    kind, err = _blocked_read(lambda: s.load_weights(rid, 4))
    assert kind == "err" and isinstance(err, StoreError), err
    assert "a FIFO" in str(err) and str(path) in str(err) and rid in str(err), err


def test_swapped_step_files_are_refused_naming_the_run(tmp_path):
    s, rid = _fresh(tmp_path)
    a, b = (s.run_dir(rid) / "weights" / f"step_{k:06d}.pt" for k in (0, 4))
    tmp = a.with_name("swap")
    os.replace(a, tmp), os.replace(b, a), os.replace(tmp, b)
    with pytest.raises(StoreError, match=rf"not the file run {rid} wrote there.*python -m dpviz delete {rid}"):
        s.load_weights(rid, 4)


@pytest.mark.parametrize("damage", ["truncated", "raw tensor", "features edited"])
def test_a_damaged_step_file_is_refused_naming_the_run(tmp_path, damage):
    s, rid = _fresh(tmp_path)
    if damage == "features edited":
        path = s.run_dir(rid) / "features" / "step_000000.npz"
        data = bytearray(path.read_bytes())
        data[-30] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(StoreError, match=rf"run {rid}"):
            s.load_features(rid, 0)
        return
    path = s.run_dir(rid) / "weights" / "step_000008.pt"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        torch.save(torch.zeros(3), path)
    with pytest.raises(StoreError, match=rf"run {rid}"):
        s.load_weights(rid, 8)


def test_weights_whose_bases_form_a_cycle_are_refused_not_a_recursion_error(tmp_path):
    from dpviz.store import artifacts

    s = Store(tmp_path / "store")
    rid = s.create_run("c" * 16, "{}")
    for step, base in ((4, 8), (8, 4)):  # written by hand: dpviz never writes this
        path = s.run_dir(rid) / "weights" / f"step_{step:06d}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            artifacts.write_pt(f, "weights", {"base": base, "state_dict": {"b": torch.zeros(2)}})
    with pytest.raises(StoreError, match=r"bases form a cycle \(4 → 8 → 4\).*delete run"):
        s.load_weights(rid, 4)


@pytest.mark.subprocess
def test_a_damaged_shared_tensor_names_the_runs_that_use_it_and_a_remedy_that_works(tmp_path, cli_env):
    s = Store(tmp_path / "store")
    rids = [_run(s, seed=0), _run(s, seed=0)]  # the same tensors: both runs use each file
    path = _tensor_file(s)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(StoreError) as e:
        for step in (0, 4, 8):
            s.load_weights(rids[0], step)
    text = str(e.value)
    assert all(r in text for r in rids) and f"python -m dpviz delete {' '.join(sorted(rids))}" in text, text
    assert f"delete run {path.parent.name}" not in text  # the tensors sub-folder is no run
    cmd = text.split("`")[1].split()[1:]  # the remedy, as printed, works
    out = subprocess.run([sys.executable, *cmd], env={**cli_env, "DPVIZ_CACHE_DIR": str(s.root)},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert Store(s.root).list_runs() == [] and not path.exists()


@pytest.mark.subprocess
def test_force_while_the_configuration_trains_says_so_and_list_marks_both(cli_env, cache_dir):
    """--force trains beside a run that is training, never silently: one line says which run trains and that
    ε is spent again, and `list` marks each training of the configuration."""
    args = [sys.executable, "-m", "dpviz", "run", "--strategy", "fft", "--epochs", "20", "--lr-ft", "0.01"]
    env = {**cli_env, "DPVIZ_BACKGROUND_ANALYSES": "off"}
    first = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not Store(cache_dir).list_runs("running"):
            time.sleep(0.2)
        live = Store(cache_dir).list_runs("running")
        assert live, "the first run never started"
        forced = subprocess.run([*args, "--force"], env=env, capture_output=True, text=True)
    finally:
        first.wait(timeout=300)
    assert forced.returncode == 0 and first.returncode == 0, forced.stderr
    said = [line for line in forced.stderr.splitlines() if "--force" in line]
    assert len(said) == 1 and f"run {live[0]['run_id']} of this configuration is training now" in said[0], said
    assert "spends its privacy budget" in said[0] and "again" in said[0]
    listed = subprocess.run([sys.executable, "-m", "dpviz", "list"], env=env, capture_output=True, text=True).stdout
    assert sum("trained 2×" in line for line in listed.splitlines()) == 2, listed


FLAGS = ["--strategy", "fft", "--epochs", "12", "--epsilon", "1", "--lr-ft", "0.05", "--checkpoint-every", "4"]


def _killed_mid_run(env, cache_dir) -> tuple[str, int]:
    """A `run` process killed (SIGKILL) once its run has a snapshot past step 0: (its run id, the snapshot's step)."""
    proc = subprocess.Popen([sys.executable, "-m", "dpviz", "run", *FLAGS, "--quiet"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while time.time() < deadline:
        runs = Store(cache_dir).list_runs("running")
        snap = Store(cache_dir).load_resume(runs[0]["run_id"]) if runs else None
        if snap is not None and snap["step"] > 0:
            break
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    assert snap is not None, "no snapshot before the deadline"
    return runs[0]["run_id"], Store(cache_dir).load_resume(runs[0]["run_id"])["step"]  # read after the kill


@pytest.mark.subprocess
def test_a_plain_request_goes_on_with_an_interrupted_run_and_fresh_starts_over(cli_env, cache_dir):
    """A run killed at a snapshot, then the same command: that run goes on from its snapshot (one row, the
    same ε, one line on stderr), not a second run from step 0. --fresh trains a new run and says what it costs."""
    env = {**cli_env, "DPVIZ_BACKGROUND_ANALYSES": "off"}
    rid, step = _killed_mid_run(env, cache_dir)
    again = subprocess.run([sys.executable, "-m", "dpviz", "run", *FLAGS, "--json", "--quiet"], env=env,
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    summary = __import__("json").loads(again.stdout)
    assert summary["run_id"] == rid and summary["epsilon_spent"] <= 1.0, summary
    assert f"run {rid} of this configuration stopped at step {step}; going on with it" in again.stderr
    runs = Store(cache_dir).list_runs()
    assert [r["run_id"] for r in runs] == [rid] and runs[0]["status"] == "finished"
    Store(cache_dir).delete_run(rid)
    rid, step = _killed_mid_run(env, cache_dir)
    fresh = subprocess.run([sys.executable, "-m", "dpviz", "run", *FLAGS, "--fresh", "--json", "--quiet"], env=env,
                           capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stderr
    assert f"--fresh: run {rid} of this configuration stopped at step {step}" in fresh.stderr
    assert "spends its privacy budget" in fresh.stderr
    assert __import__("json").loads(fresh.stdout)["run_id"] != rid and len(Store(cache_dir).list_runs(kind=None)) == 2


@pytest.mark.slow
def test_twin_private_searches_train_each_trial_once(cache_dir):
    """Two identical searches at once: K trials trained in all (they used to train 5 for K = 3); both return
    the one release."""
    from dpviz import runner
    from dpviz.privacy import selection
    from dpviz.sweeps import private

    search = private.PrivateSearch(base=RunConfig_(), space={"lr_lp": (0.05, 5.0)}, total_epsilon=8.0,
                                   distribution=selection.FIXED, mean_trials=3)
    store, trained, out = Store(cache_dir), [], []

    def counted(cfg, **kw):  # a trial's run: trained here, or answered by the twin's (cached)
        summary = runner.run(cfg, **kw)
        if not summary.get("cached"):
            trained.append(summary["run_id"])
        return summary

    def one():
        try:
            out.append(private.run_search(search, run=counted, store=store))
        except Exception as e:  # noqa: BLE001 - shown by the assertion below
            out.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    [t.start() for t in threads]
    [t.join(300) for t in threads]
    assert len(out) == 2 and all(isinstance(o, dict) for o in out), out
    assert out[0]["released_run_id"] == out[1]["released_run_id"], out
    assert len(trained) == 3, trained  # K = 3 trainings, whichever search trained each
    assert [r["run_id"] for r in store.list_runs(kind=None)] == [out[0]["released_run_id"]]


def RunConfig_():
    from dpviz.config import RunConfig

    return RunConfig(strategy="lp", epochs=2)


@pytest.mark.slow
def test_a_private_search_killed_mid_way_resumes_and_trains_each_trial_once(cache_dir):
    """The search's process dies at step 3 of its third of K = 4 trials (the trial's run is then interrupted, as
    `Store.start_run` marks a dead owner's), and the search is asked again: the two finished trials answer from
    the store, the third goes on from its snapshot, the fourth trains — 4 trainings in all (it used to be 6:
    the losing trials were deleted as it went, and it started over) — and one release within the total ε."""
    from dpviz import runner
    from dpviz.privacy import selection
    from dpviz.sweeps import private

    class Died(Exception):
        pass

    search = private.PrivateSearch(base=RunConfig_().replace(strategy="fft", checkpoint_every=2),
                                   space={"lr_ft": (0.01, 0.5)}, total_epsilon=8.0, distribution=selection.FIXED,
                                   mean_trials=4)
    store, trained = Store(cache_dir), []

    def counted(cfg, **kw):
        summary = runner.run(cfg, **kw)
        if not summary.get("cached"):
            trained.append(summary["run_id"])
        return summary

    def dies(i, k, step=None, total=None):
        if i == 2 and step == 3:
            raise Died

    with pytest.raises(Died):
        private.run_search(search, run=counted, store=store, progress=dies)
    cut = [r for r in store.list_runs(kind=None) if r["status"] != "finished"]
    assert len(trained) == 2 and len(cut) == 1 and store.load_resume(cut[0]["run_id"])["step"] == 2
    store.finish_run(cut[0]["run_id"], "interrupted", error="its process died")
    entry = private.run_search(search, run=counted, store=store)
    assert len(trained) == 4 and cut[0]["run_id"] in trained, trained  # the cut trial went on, once
    assert entry["trials_drawn"] == 4 and [r["run_id"] for r in store.list_runs(kind=None)] == \
        [entry["released_run_id"]]
