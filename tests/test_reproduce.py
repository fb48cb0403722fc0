"""The reproduction scorecard: verdicts on planted measurements, the claim registry, one real row."""

import json
import subprocess
import sys

import pytest

from dpviz import reproduce as r
from dpviz.reproduce import claims
from dpviz.figures.reproduce import claim_figure


def test_pair_verdict_needs_a_gap_beyond_one_pooled_std():
    assert r.judge_pair({"groups": {"A": [0.70, 0.72, 0.71], "B": [0.50, 0.52, 0.51]}})[0] == r.AGREES
    assert r.judge_pair({"groups": {"A": [0.60, 0.70, 0.50], "B": [0.58, 0.62, 0.57]}})[0] == r.PARTLY
    verdict, reading = r.judge_pair({"groups": {"A": [0.40, 0.41], "B": [0.60, 0.61]}})
    assert verdict == r.DOES_NOT and reading.startswith("A 0.405 ± 0.007 is lower than B 0.605")


def test_a_third_group_is_shown_beside_the_pair_and_never_judged():
    pair = {"A": [0.70, 0.72, 0.71], "B": [0.50, 0.52, 0.51]}
    for third in ([0.10, 0.11, 0.12], [0.90, 0.91, 0.92]):
        verdict, reading = r.judge_pair({"groups": {**pair, "C": third}})
        assert verdict == r.AGREES and reading.endswith(f"(C: {r.fmt(third)})")


def test_one_seed_shows_a_mean_without_a_spread():
    verdict, reading = r.judge_pair({"groups": {"A": [0.653], "B": [0.60]}})
    assert reading == "A 0.653 is higher than B 0.600." and "±" not in reading


def test_dip_verdict_wants_fft_to_dip_and_lp_fft_not():
    assert r.judge_dip({"dips": {"fft": [0.05, 0.04], "lp-fft": [0.0, 0.01]}})[0] == r.AGREES
    assert r.judge_dip({"dips": {"fft": [0.05, 0.04], "lp-fft": [0.05, 0.04]}})[0] == r.PARTLY
    assert r.judge_dip({"dips": {"fft": [0.0, -0.01], "lp-fft": [0.0, 0.0]}})[0] == r.DOES_NOT
    reading = r.judge_dip({"dips": {"fft": [-0.009, -0.009], "lp-fft": [0.02, 0.02]}})[1]
    assert "FFT rises 0.009" in reading and "LP-FFT drops 0.020" in reading  # a rise is called a rise


CURVES = {"1": {0.0: [0.5], 0.2: [0.7], 1.0: [0.55]}, "8": {0.0: [0.84], 0.4: [0.9], 1.0: [0.77]}}


def test_budget_verdicts_interior_optimum_and_its_shift():
    assert r.judge_interior({"curves": CURVES}) == (r.AGREES, "best LP share p = 0.2 at ε = 1, p = 0.4 at ε = 8.")
    assert r.judge_shift({"curves": CURVES})[0] == r.DOES_NOT  # 0.2 at ε = 1 is below 0.4 at ε = 8
    shifted = {"1": {0.0: [0.5], 0.6: [0.7]}, "8": {0.0: [0.9], 0.6: [0.7]}}
    assert r.judge_shift({"curves": shifted})[0] == r.AGREES
    assert r.judge_interior({"curves": shifted})[0] == r.PARTLY  # ε = 8's best is pure FFT


def test_law_verdicts_and_the_fit():
    geometric = [8.0, 4.0, 2.0, 1.0, 0.5]
    assert r.fit_r2(geometric) == pytest.approx(1.0) and r.fit_r2([1.0, 1.0, 1.0]) != r.fit_r2(geometric)
    assert r.fit_r2([1.0, 5.0, 4.0, 2.0, 1.0], 1) == pytest.approx(r.fit_r2([5.0, 4.0, 2.0, 1.0]))
    assert r.judge_law({"r2_from_1": [0.95, 0.97], "r2_all": [0.91, 0.93]})[0] == r.AGREES
    assert r.judge_law({"r2_from_1": [0.95, 0.97], "r2_all": [0.2, 0.3]})[0] == r.PARTLY
    assert r.judge_law_breaks({"r2_constant": [0.3], "r2_tuned": [0.95]})[0] == r.AGREES
    assert r.judge_law_breaks({"r2_constant": [0.95], "r2_tuned": [0.97]})[0] == r.DOES_NOT
    # a straight line that rises is no law: MiniLM's constant-rate runs fit well on a growing D_l
    rising = {"r2_constant": [0.95, 0.85], "r2_tuned": [0.5, 0.9], "rho_constant": [1.08, 1.05],
              "rho_tuned": [0.92, 0.90]}
    verdict, reading = r.judge_law_breaks(rising)
    assert verdict == r.AGREES and "grows with depth" in reading and "ρ 1.06 and 0.91" in reading
    assert r.judge_law_breaks({**rising, "r2_constant": [0.95, 0.93], "rho_constant": [0.95, 0.97]})[0] == r.DOES_NOT
    assert r.judge_law({"r2_from_1": [0.95], "r2_all": [0.93], "rho_from_1": [1.1]})[0] == r.DOES_NOT
    assert r.judge_law({"r2_from_1": [0.95], "r2_all": [0.93], "rho_from_1": [0.8]})[0] == r.AGREES
    assert abs(r.fit_rho([8.0, 4.0, 2.0, 1.0]) - 0.5) < 1e-9 and abs(r.fit_rho([5.0, 1.0, 2.0, 4.0], 1) - 2) < 1e-9


def test_curvature_and_public_phase_verdicts():
    assert r.judge_decelerator({"dominant": ["decelerator"] * 3 + ["curvature"]})[0] == r.AGREES
    assert r.judge_decelerator({"dominant": ["sampling", "curvature"]})[0] == r.DOES_NOT
    gains = {"1": ([0.6, 0.61], [0.5, 0.52]), "2": ([0.69, 0.71], [0.7, 0.7])}
    assert r.judge_public_first({"gains": gains})[0] == r.PARTLY
    # the measurement reads the claim's own group names ("continual ε=1", "fft ε=2", …) into gains per ε
    claim = r.REGISTRY["004-public"]
    groups = {g: [{"test_accuracy": 0.5 + 0.1 * i} for i, _ in enumerate(cfgs)]
              for g, cfgs in claim.configs("default", (0, 1)).items()}
    m = claim.measure(None, groups)
    assert set(m["gains"]) == {"1", "2"} and m["gains"]["1"] == ([0.5, 0.6], [0.5, 0.6])


@pytest.mark.parametrize("task", ["default", "real-text", "real-vision"])
def test_every_claim_names_its_seed_file_and_plans_one_run_per_seed_on_each_task(task):
    from dpviz import tasks

    assert {c.seed for c in r.CLAIMS} == {"000", "001", "002", "003", "004"} and len(r.REGISTRY) == len(r.CLAIMS)
    own = tasks.task_fields(task)
    for c in r.CLAIMS:
        assert r.SEED_FILES[c.seed].startswith(c.seed + "_") and c.why_not(task) is None
        groups = c.configs(task, (0, 1, 2))
        assert groups and all([cfg.seed for cfg in cfgs] == [0, 1, 2] for cfgs in groups.values())
        assert all(cfg.auto or cfg.lr_ft == 0.05 for cfgs in groups.values() for cfg in cfgs)  # auto unless the claim
        for cfg in (cfg for cfgs in groups.values() for cfg in cfgs):  # the task's data and model, its scorecard size
            assert cfg.dataset == own.get("dataset", "digits") and (task == "default" or cfg.backbone == own["backbone"])
            assert all(getattr(cfg, k) == v for k, v in r.SCALE[task].items())
        if task != "default":
            assert "CNN" not in c.experiment(task) and "ViT" not in c.experiment(task)
    budget = r.REGISTRY["001-shift"].configs(task, (0,))
    fractions, epsilons = r.SWEEPS[task]
    assert len(budget) == len(fractions) * len(epsilons) and {c.lp_fraction for (c,) in budget.values()} == set(fractions)
    if task == "real-text":  # the sweep: p ∈ {0, 0.1, …, 1} at ε ∈ {0.5, 1, 2, 8}
        assert len(fractions) == 11 and epsilons == (0.5, 1.0, 2.0, 8.0)
    # a real task's accuracy-only runs are tested at their phase ends only; runs read for features are not
    (p0,) = budget["ε=1 p=0"]
    (dip,) = r.REGISTRY["000-dip"].configs(task, (0,))["fft"]
    assert (p0.eval_every == claims.ONLY_PHASE_ENDS) == (task != "default") and dip.eval_every == 10
    if task != "default":  # a real task's DP-FFT runs train once: the law reads 000-dip's, curvature DP-FFT's at ε = 1
        hashes = {c.id: {g: [x.hash() for x in v] for g, v in c.configs(task, (0, 1)).items()} for c in r.CLAIMS}
        assert hashes["002-law"]["tuned"] == hashes["000-dip"]["fft"]
        assert hashes["004-decelerator"]["fft"] == hashes["000-lpfft"]["DP-FFT"] == hashes["002-constant"]["tuned"]
    if task == "default":  # the toy task's law on its ViT, and the same runs as before tasks (their hashes)
        from dpviz.config import RunConfig

        (law,) = r.REGISTRY["002-law"].configs(task, (0,))["tuned"]
        assert law.hash() == RunConfig(backbone="vit", strategy="fft", epsilon=8.0, seed=0).hash()


def test_a_claim_a_task_cannot_read_says_why_instead_of_a_verdict(monkeypatch, cache_dir):
    from dpviz import tasks

    monkeypatch.setitem(tasks.TASKS, "no-public", tasks.Task(name="no-public", label="text without public data",
                                                             modality="text", public=None,
                                                             fields=dict(dataset="tweets", backbone="minilm")))
    claim = r.REGISTRY["004-public"]
    assert "public text data" in claim.why_not("no-public") and r.REGISTRY["000-lpfft"].why_not("no-public") is None
    assert "004-public" not in r.plan([claim], (0,), "no-public")
    (row,) = r.stored_rows(["004-public"], task="no-public", cache_dir=cache_dir)
    assert row["verdict"] == r.NOT_READ and row["reading"] == claim.why_not("no-public") and row["task"] == "no-public"
    assert r.run(["004-public"], task="no-public", cache_dir=cache_dir) == [row]  # nothing trains
    fig = claim_figure({"id": "001-shift", "seed": "001", "verdict": r.AGREES,
                        "measured": {"ε=1 p=0": {"mean": 0.5, "std": 0.1}, "ε=1 p=0.2": {"mean": 0.7, "std": 0.0},
                                     "ε=8 p=0": {"mean": 0.8, "std": 0.0}}})
    assert [tr.name for tr in fig.data] == ["ε = 1", "ε = 8"] and list(fig.data[0].x) == [0.0, 0.2]


@pytest.mark.slow
@pytest.mark.subprocess
def test_one_claim_end_to_end_from_the_cli_in_two_workers_and_resumed_from_the_store(cli_env, cache_dir):
    cmd = [sys.executable, "-m", "dpviz", "reproduce", "--claims", "003-selection", "--seeds", "2", "--json"]
    out = subprocess.run(cmd + ["--workers", "2"], env=cli_env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "[6/6] 2 workers" in out.stderr  # 3 selections × 2 seeds, trained by the pool
    from dpviz.store import Store

    stored = [(r["config_hash"], r["status"]) for r in Store(cache_dir).list_runs()]
    assert len(stored) == 6 and {s for _, s in stored} == {"finished"}  # each run trained once, none twice
    (row,) = json.loads(out.stdout)
    assert row["id"] == "003-selection" and row["verdict"] in r.VERDICTS and row["seeds"] == 2
    assert set(row["measured"]) == {"SPARTA rows", "random rows", "magnitude rows"} and row["seed_file"].startswith("003_")
    assert [row] == r.stored_rows(["003-selection"], seeds=(0, 1), cache_dir=cache_dir)  # read back, nothing run
    from dpviz.studies import scorecard as filed  # the pass's rows, filed as study results by the one writer

    res = filed.load(task="default", store_root=cache_dir, shipped=False)
    kept = filed.rows(res)["003-selection"]
    assert {k: v for k, v in kept.items() if k not in ("source", "provenance")} == row
    assert filed.rejudge(kept) == (row["verdict"], row["reading"])
    assert res.provenance["command"].startswith("python -m dpviz reproduce --task default --seeds 2 --claims "
                                                "003-selection") and res.provenance["per_seed"] == "kept"
    bad = subprocess.run(cmd[:4] + ["--claims", "999"], env=cli_env, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("dpviz: error: claims: some of 000-lpfft")
    bad = subprocess.run(cmd[:4] + ["--task", "imagenet"], env=cli_env, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("dpviz: error: task: one of default, real-text")
    bad = subprocess.run(cmd[:4] + ["--workers", "0"], env=cli_env, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("dpviz: error: workers: an integer >= 1; got 0")


TINY_TEXT = {"train_size": 64, "max_length": 16, "batch_size": 32, "eval_subset": 40, "checkpoint_every": -1,
             "lr_ft": 0.05}


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.real  # its child trains the real-text task
def test_the_law_claim_end_to_end_on_the_real_text_task_from_the_cli(cli_env, cache_dir):
    """002-law on MiniLM over tweets, tiny (64 tweets of 16 tokens, a fixed rate: no search): the law read over
    the embeddings and the 6 blocks, stored, and read back as the page reads it."""
    cmd = [sys.executable, "-m", "dpviz", "reproduce", "--task", "real-text", "--claims", "002-law", "--seeds", "2",
           "--set", *(f"{k}={v}" for k, v in TINY_TEXT.items()), "--json"]
    out = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["task"] == "real-text" and row["verdict"] in r.VERDICTS and row["seeds"] == 2
    assert row["preset"].startswith("MiniLM on tweets") and row["private_statistics"]
    from dpviz.analyses.service import analyze
    from dpviz.store import Store

    run_id = row["run_ids"]["tuned"][0]
    cfg = Store(cache_dir).get_run(run_id)["config"]
    assert (cfg["backbone"], cfg["dataset"], cfg["train_size"], cfg["epochs"]) == ("minilm", "tweets", 64, 3)
    assert len(analyze(Store(cache_dir), run_id, "separability")["fuzziness"]) == 7  # embeddings + 6 blocks
    assert [row] == r.stored_rows(["002-law"], task="real-text", seeds=(0, 1), changes=TINY_TEXT, cache_dir=cache_dir)


@pytest.mark.parametrize("task", ["real-text", "real-vision"])
def test_every_real_task_scorecard_run_takes_its_rates_from_the_shipped_grid(tmp_path, task):
    """A real task's scorecard trains no search: the grid holds each of its runs' keys (its time counts on it)."""
    from dpviz import autotune

    seen = {}
    for c in r.CLAIMS:
        for g, cfgs in c.configs(task, (0,)).items():
            seen.update({cfg.hash(): (c.id, g, cfg) for cfg in cfgs})
    for cid, g, cfg in seen.values():
        _, res = autotune.resolve(cfg, cache_dir=tmp_path, search_ok=False)
        assert res.source in ("shipped", "unused"), (cid, g, res.source)  # "unused": a fixed rate and LP's unread


@pytest.mark.slow
def test_a_pass_cut_into_pieces_resumes_its_stopped_run_from_the_checkpoint(cache_dir, monkeypatch):
    """A piece stops mid-run (as `stop_after` does: the cancel event); the next piece reopens that run from its
    last checkpoint instead of training it again from step 0."""
    import threading

    from dpviz.store import Store
    from dpviz.training import loop

    tiny = {"epochs": 6, "checkpoint_every": 4, "lr_lp": 0.5, "lr_ft": 0.01}
    stop, real = threading.Event(), loop.Loop.checkpoint

    def checkpoint(self):
        real(self)
        if self.step >= 8:
            stop.set()

    monkeypatch.setattr(loop.Loop, "checkpoint", checkpoint)
    assert r.run(["000-lpfft"], seeds=(0,), changes=tiny, cache_dir=cache_dir, cancel=stop) == []
    store = Store(cache_dir)
    (cut,) = store.list_runs(kind=None)
    assert cut["status"] == "cancelled" and store.load_resume(cut["run_id"])["step"] == 8
    monkeypatch.setattr(loop.Loop, "checkpoint", real)
    (row,) = r.run(["000-lpfft"], seeds=(0,), changes=tiny, cache_dir=cache_dir)
    runs = store.list_runs(kind=None)
    assert len(runs) == 2 and all(x["status"] == "finished" for x in runs)  # the two groups' runs, once each
    resumed = store.get_run(cut["run_id"])
    assert resumed["status"] == "finished" and cut["run_id"] in [i for ids in row["run_ids"].values() for i in ids]
    assert any(e["kind"] == "phase" and "from step" in (e["message"] or "") for e in store.events(cut["run_id"]))


@pytest.mark.subprocess
def test_stop_after_stops_a_pass_and_the_cli_says_how_to_go_on(cli_env):
    cmd = [sys.executable, "-m", "dpviz", "reproduce", "--claims", "000-lpfft", "--seeds", "1", "--stop-after",
           "0.0001", "--json"]
    out = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and json.loads(out.stdout) == []
    assert "the same command goes on" in out.stderr
    bad = subprocess.run(cmd[:-2] + ["0", "--json"], env=cli_env, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("dpviz: error: stop-after: minutes > 0")


def test_scorecard_rows_are_filed_as_study_results_and_their_verdicts_follow_from_the_numbers_they_keep(tmp_path):
    """One writer, one reader: rows saved into a store's scorecard file with their provenance, merged claim by
    claim, read back over the shipped rows; a row's verdict is its judge's on the measurement it keeps, so
    numbers changed in the file change the verdict judged from them."""
    from dpviz.studies import scorecard as filed
    from dpviz.store import Store

    def lpfft(a, b, claim="000-lpfft"):
        groups = {g: [{"test_accuracy": x, "run_id": f"{g}-{i}"} for i, x in enumerate(v)]
                  for g, v in zip(("DP-LP-FFT", "DP-FFT"), (a, b))}
        return {**r.row(r.REGISTRY["000-lpfft"], None, groups, "default"), "id": claim}

    store = Store(tmp_path)
    ahead = lpfft([0.70, 0.71, 0.72], [0.60, 0.61, 0.62])
    filed.save_rows([ahead], task="default", store=store, command="python -m dpviz reproduce", seeds=(0, 1, 2))
    behind = lpfft([0.50, 0.51, 0.52], [0.60, 0.61, 0.62], claim="003-sparse")
    filed.save_rows([behind], task="default", store=store, command="python -m dpviz reproduce", seeds=(0, 1, 2))
    res = filed.load(task="default", store_root=tmp_path)
    rows = filed.rows(res)
    assert rows["000-lpfft"]["source"] == "store" and rows["003-sparse"]["verdict"] == r.DOES_NOT
    assert rows["004-public"]["source"] == "shipped"  # the shipped scorecard answers for the claims not run here
    assert filed.rejudge(rows["000-lpfft"]) == (r.AGREES, ahead["reading"])
    assert set(res.provenance) >= {"command", "dpviz", "commit", "machine", "device", "date", "store"}
    planted = {**rows["000-lpfft"], "measurement": {"groups": {"DP-LP-FFT": [0.5, 0.51, 0.52],
                                                               "DP-FFT": [0.6, 0.61, 0.62]}}}
    assert filed.rejudge(planted)[0] == r.DOES_NOT
    assert filed.file_name("real-vision", "medium", {"mechanism": "bandmf", "bands": 2, "device": "cuda"}) == \
        "scorecard_real-vision_medium_bandmf-b2"


def test_every_shipped_scorecard_reads_and_its_kept_measurements_give_its_verdicts():
    from dpviz.studies import scorecard as filed
    from dpviz.studies import results as study_results

    names = [n for n in study_results.shipped_names() if n.startswith("scorecard_")]
    assert {"scorecard_default", "scorecard_real-text", "scorecard_real-vision"} <= set(names)
    for name in names:
        res = study_results.shipped_file(name)
        assert res.study == filed.NAME and res.provenance.get("command", "").startswith("python -m dpviz reproduce")
        for claim, row in filed.rows(res).items():
            assert claim in r.REGISTRY and row["verdict"] in (*r.VERDICTS, r.NOT_READ)
            judged = filed.rejudge(row)
            assert judged is None or judged[0] == row["verdict"], (name, claim)
