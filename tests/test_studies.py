"""Studies (`dpviz.studies`): readings on planted numbers, the one writer and reader with provenance, the
shipped results, and a study run end to end: each configuration trained once, stopped and resumed, and cut
into pieces that carry only what ``keep="results"`` keeps."""

import json
import shutil

import pytest

from dpviz import studies
from dpviz.errors import ConfigError
from dpviz.studies import results as study_results
from dpviz.studies import runner


def planted(study: str, values: dict, seeds=(0, 1, 2)) -> study_results.Results:
    """Results of ``study`` with per-seed numbers: {cell as tuple of (axis, value): {measure: [per seed]}}."""
    res = study_results.Results(study=study, task="default", seeds=list(seeds))
    for cell, measured in values.items():
        for i, seed in enumerate(seeds[:len(next(iter(measured.values())))]):
            res.add(dict(cell), seed, run_id=f"r{seed}", config="c", values={k: v[i] for k, v in measured.items()})
    return res


def noise_cell(eps, b):
    return (("epsilon", eps), ("bands", b), ("family", "bandmf"))


NOISE = {noise_cell(1.0, 1): {"accuracy": [0.73, 0.74, 0.745], "dip": [0, 0, 0], "rho": [0.74, 0.75, 0.755]},
         noise_cell(1.0, 4): {"accuracy": [0.72, 0.735, 0.75], "dip": [0, 0, 0], "rho": [0.74, 0.75, 0.76]},
         noise_cell(8.0, 1): {"accuracy": [0.815, 0.823, 0.831], "dip": [0, 0, 0], "rho": [0.686, 0.690, 0.694]},
         noise_cell(8.0, 4): {"accuracy": [0.838, 0.843, 0.848], "dip": [0.026, 0.03, 0.034], "rho": [0.755, 0.76, 0.765]}}


def test_the_noise_reading_says_who_wins_by_how_much_against_the_spread_and_follows_the_numbers():
    verdict, text = studies.reading("noise", planted("noise", NOISE))
    assert verdict == "BandMF ahead", (verdict, text)
    assert "At ε = 1 DP-SGD is the most accurate (0.738 ± 0.008), 0.3 points above the best correlated mechanism " \
           "(BandMF b=4: 0.735 ± 0.015), within the seeds' spread" in text, text
    assert "at ε = 8 BandMF b=4 is the most accurate (0.843 ± 0.005), 2.0 points above DP-SGD (0.823 ± 0.008), " \
           "beyond the seeds' spread" in text, text
    assert "An early kNN dip beyond its spread under BandMF b=4 at ε = 8." in text, text
    assert "moves by more than the spread at ε = 8 from 0.690 (DP-SGD) to 0.760 (BandMF b=4)" in text, text
    swapped = {**NOISE, noise_cell(8.0, 1): NOISE[noise_cell(8.0, 4)] | {"dip": [0, 0, 0], "rho": [0.686, 0.69, 0.694]},
               noise_cell(8.0, 4): NOISE[noise_cell(8.0, 1)]}
    verdict, text = studies.reading("noise", planted("noise", swapped))
    assert verdict == "DP-SGD ahead" and "at ε = 8 DP-SGD is the most accurate (0.843 ± 0.005)" in text, text
    assert "No mechanism shows an early kNN dip" in text and "is the same under every mechanism" in text, text


def test_the_split_reading_names_each_mechanisms_best_share_and_a_flat_curve():
    cell = lambda b, p: (("epsilon", 1.0), ("bands", b), ("lp_fraction", p), ("family", "bandmf"))  # noqa: E731
    values = {cell(1, 0.0): {"accuracy": [0.69, 0.70, 0.71]}, cell(1, 0.5): {"accuracy": [0.77, 0.78, 0.79]},
              cell(1, 1.0): {"accuracy": [0.70, 0.71, 0.72]}, cell(4, 0.0): {"accuracy": [0.73, 0.75, 0.77]},
              cell(4, 0.5): {"accuracy": [0.74, 0.76, 0.78]}, cell(4, 1.0): {"accuracy": [0.72, 0.74, 0.76]}}
    verdict, text = studies.reading("split", planted("split", values))
    assert text == ("At ε = 1 the best LP share is p = 0.5 under DP-SGD and p = 0.5 under BandMF b=4 (its curve flat "
                    "within the spread)."), text
    assert verdict == "an interior optimum"
    values[cell(1, 0.5)] = {"accuracy": [0.69, 0.70, 0.71]}
    values[cell(1, 1.0)] = {"accuracy": [0.80, 0.81, 0.82]}
    assert studies.reading("split", planted("split", values))[0] == "an end is best"


def test_results_keep_numbers_per_seed_derive_their_display_and_record_where_they_come_from(tmp_path):
    res = planted("noise", {noise_cell(1.0, 1): {"accuracy": [0.5, 0.6]}}, seeds=(0, 1, 2))
    assert res.values(dict(noise_cell(1.0, 1)), "accuracy") == [0.5, 0.6]
    assert res.text(dict(noise_cell(1.0, 1)), "accuracy") == "0.550 ± 0.071 (2 of 3)"
    from dpviz.store import Store

    store = Store(tmp_path / "store")
    res.provenance = study_results.provenance("python -m dpviz study run noise", store, res.run_ids())
    study_results.save(res, store.root, private=["dip", "rho", "r2"])
    path = tmp_path / "store" / "studies" / "noise_default.json"
    doc = json.loads(path.read_text())
    assert doc["private_statistics"] == ["dip", "rho", "r2"]
    assert doc["cells"][0]["runs"]["1"]["values"]["accuracy"] == 0.6  # a number, not a string
    assert set(doc["provenance"]) >= {"command", "dpviz", "commit", "machine", "device", "date", "store"}
    assert "±" not in path.read_text()  # no display string is stored
    back = study_results.load("noise", "default", store_root=store.root, shipped=False)
    assert back.values(dict(noise_cell(1.0, 1)), "accuracy") == [0.5, 0.6]


def test_a_store_cell_replaces_the_shipped_one_cell_by_cell(tmp_path):
    shipped = studies.stored("noise", task="real-text")
    assert shipped.cells and {e["source"] for e in shipped.cells.values()} == {"shipped"}
    assert shipped.shipped_provenance["per_seed"] == "lost"  # converted from a table of means: said
    one = next(iter(shipped.cells.values()))["cell"]
    mine = study_results.Results(study="noise", task="real-text")
    mine.add(one, 0, run_id="r0", config="c", values={"accuracy": 0.99})
    study_results.save(mine, tmp_path)
    merged = study_results.load("noise", "real-text", store_root=tmp_path)
    assert merged.source(one) == "store" and merged.stats(one, "accuracy") == (0.99, 0.0, 1)
    others = [e for k, e in merged.cells.items() if k != studies.cell_key(one)]
    assert others and {e["source"] for e in others} == {"shipped"}


def test_every_shipped_results_file_reads_and_names_a_registered_study():
    names = study_results.shipped_names()
    assert {"noise_default", "split_default", "parts_default", "lora_default", "public-first_default",
            "noise_real-vision", "split_real-vision"} <= set(names), names
    for name in [n for n in names if not n.startswith("scorecard_")]:  # the scorecard's: test_reproduce.py
        res = study_results.shipped_file(name)
        assert res is not None and res.study in studies.STUDIES and res.cells, name
        assert study_results.results_name(res.study, res.task, res.scale, res.sets) == name
        verdict, _ = studies.reading(res.study, res)
        assert verdict != "not read", name
    kept = study_results.shipped_file("noise_default")
    assert kept.provenance["per_seed"] == "kept" and all(e["runs"] for e in kept.cells.values())


def test_a_study_refuses_bad_input_in_one_line_before_anything_trains(tmp_path):
    with pytest.raises(ConfigError, match="^study: one of noise, split"):
        studies.get("nope")
    with pytest.raises(ConfigError, match="^vary: one of this study's axes"):
        runner.plan(studies.get("noise"), vary={"eps": (1,)})
    with pytest.raises(ConfigError, match="^scale: a size default has"):
        runner.plan(studies.get("noise"), scale="large")
    with pytest.raises(ConfigError, match="^keep: one of all, results"):
        studies.run("noise", keep="some", cache_dir=tmp_path / "s")
    with pytest.raises(ConfigError, match="^set: fields no axis of this study sets .*--vary"):
        studies.run("noise", sets={"epsilon": 4.0}, cache_dir=tmp_path / "s")
    with pytest.raises(ConfigError, match="^vary: numbers for epsilon; got 'abc'"):
        studies.run("noise", vary={"epsilon": ("abc",)}, cache_dir=tmp_path / "s")
    with pytest.raises(ConfigError, match="^vary: whole numbers for bands; got 2.5"):
        studies.run("noise", vary={"bands": (2.5,)}, cache_dir=tmp_path / "s")
    with pytest.raises(ConfigError, match="^vary: values of method among auto, negative-binomial, fixed"):
        studies.run("private-tuning", vary={"method": ("foo",)}, cache_dir=tmp_path / "s")
    with pytest.raises(ConfigError, match="^scale: a size default has"):
        studies.stored("noise", scale="large", cache_dir=tmp_path / "s")
    assert not (tmp_path / "s" / "studies").exists()


def test_two_writers_on_one_store_keep_each_others_cells_and_a_damaged_file_is_named_not_replaced(tmp_path):
    from dpviz.errors import StoreError

    one, two = (study_results.Results(study="noise", task="default") for _ in range(2))
    one.add(dict(noise_cell(1.0, 1)), 0, run_id="a", config="c1", values={"accuracy": 0.5})
    two.add(dict(noise_cell(8.0, 1)), 1, run_id="b", config="c2", values={"accuracy": 0.8})
    study_results.save(one, tmp_path)
    study_results.save(two, tmp_path)  # read before `one` was written: its cells must survive
    back = study_results.load("noise", "default", store_root=tmp_path, shipped=False)
    assert back.values(dict(noise_cell(1.0, 1)), "accuracy") == [0.5]
    assert back.values(dict(noise_cell(8.0, 1)), "accuracy") == [0.8] and back.seeds == [0, 1]
    path = tmp_path / "studies" / "noise_default.json"
    path.write_text("{not json")
    with pytest.raises(StoreError, match="noise_default.json: not a results file dpviz can read"):
        study_results.save(one, tmp_path)
    assert path.read_text() == "{not json"


def test_cells_that_set_the_same_fields_are_one_and_seeds_are_outermost():
    items = runner.plan(studies.get("noise"), seeds=(0, 1), vary={"family": ("bandmf", "bandmf-momentum")})
    assert len(items) == 2 * 2 * 5  # DP-SGD once per ε, not once per correlated family
    alone = runner.plan(studies.get("noise"), seeds=(0,), vary={"family": ("bandmf-momentum",)})
    assert alone[0].cell == {"epsilon": 1.0, "bands": 1, "family": "bandmf"}  # DP-SGD's cell, whatever the family
    assert [it.seed for it in items] == [0] * 10 + [1] * 10
    assert {it.config.mechanism for it in items} == {"dp-sgd", "bandmf", "bandmf-momentum"}


TINY = {"train_size": 200, "epochs": 1, "batch_size": 50}
BUILT_IN = ("noise", "split", "parts", "lora", "public-first", "private-tuning", "distortion", "law", "proxy-tuning",
            "depth", "curvature", "decelerator", "sparse-selection")


@pytest.mark.slow
def test_a_study_trains_each_configuration_once_and_a_stopped_study_resumes(cache_dir):
    """Two ε × DP-SGD, one seed, on 200 digits: a first pass stopped after its first run, then the same call
    trains only the other; a third call trains nothing (the results file answers)."""
    from dpviz.store import Store

    kw = dict(task="default", seeds=(0,), sets=TINY, vary={"bands": (1,)}, cache_dir=cache_dir)
    import threading

    stop = threading.Event()
    seen = []

    def progress(done, total, label):
        seen.append(done)
        if done == 1:
            stop.set()

    first = studies.run("noise", cancel=stop, progress=progress, **kw)
    assert len(first.run_ids()) == 1 and len(Store(cache_dir).list_runs()) == 1
    second = studies.run("noise", **kw)
    assert len(second.run_ids()) == 2 and len(Store(cache_dir).list_runs()) == 2
    assert second.run_ids()[0] == first.run_ids()[0]  # the first run answered, not trained again
    third = studies.run("noise", **kw)
    assert third.run_ids() == second.run_ids() and len(Store(cache_dir).list_runs()) == 2
    # a run of the user's that a cell of the study equals: keep="results" reads it and leaves its files
    from dpviz.runner import run

    at4 = {**kw, "vary": {"bands": (1,), "epsilon": (4.0,)}}
    mine = run(runner.plan(studies.get("noise"), **{k: v for k, v in at4.items() if k != "cache_dir"})[0].config,
               cache_dir=cache_dir, rates="grid")["run_id"]
    before = Store(cache_dir).feature_steps(mine)
    assert mine in studies.run("noise", keep="results", **at4).run_ids()
    assert len(Store(cache_dir).list_runs()) == 3  # answered, not trained again
    assert before and Store(cache_dir).feature_steps(mine) == before
    for e in third.cells.values():
        v = e["runs"]["0"]["values"]
        assert 0 < v["accuracy"] <= 1 and v["epsilon_spent"] <= e["cell"]["epsilon"]


@pytest.mark.slow
def test_a_study_cut_into_three_pieces_carrying_only_what_keep_results_keeps_gives_the_uncut_results(tmp_path,
                                                                                                    backbone_cache):
    """The same four runs uncut, and in pieces that each train to the next checkpoint, each piece in a fresh store that receives
    only the previous piece's store after pruning (its results file, database and the unfinished run's
    snapshot): the same cells, seeds, configurations and numbers."""
    kw = dict(task="default", seeds=(0,), sets={**TINY, "train_size": 800, "checkpoint_every": 8},
              vary={"bands": (1, 2), "epsilon": (1.0, 8.0)})

    def fresh(name):
        d = tmp_path / name
        d.mkdir()
        (d / "backbones").symlink_to(backbone_cache)
        return d

    uncut = studies.run("noise", cache_dir=fresh("uncut"), **kw)
    total = len(runner.plan(studies.get("noise"), **{k: v for k, v in kw.items()}))
    prev, pieces, carried, mid_run = None, 0, [], 0
    while True:
        here = fresh(f"piece{pieces}")
        if prev is not None:  # what the previous piece kept, and nothing else
            for p in prev.iterdir():
                if p.name != "backbones":
                    (shutil.copytree if p.is_dir() else shutil.copy2)(p, here / p.name)
        res = studies.run("noise", cache_dir=here, keep="results", stop_after=0.1, **kw)  # each piece: one checkpoint
        pieces += 1
        carried.append(sum(f.stat().st_size for f in here.rglob("*") if f.is_file() and "backbones" not in f.parts))
        from dpviz.store import Store

        st = Store(here)
        for rid in res.run_ids():  # every run read is pruned: no checkpoint's features or weights travel
            assert st.feature_steps(rid) == [] and st.weight_steps(rid) == []
        mid_run += any(st.has_resume(r["run_id"]) for r in st.list_runs() if r["run_id"] not in res.run_ids())
        if len(res.run_ids()) == total:
            break
        assert pieces < 20, "the pieces make no progress"
        prev = here
    assert pieces >= 3 and mid_run >= 1, (pieces, mid_run)  # a run stopped mid-way travelled and went on
    assert max(carried) < 20 * 2**20, carried  # tens of MiB at most between pieces
    for k, e in uncut.cells.items():
        mine = res.cells[k]["runs"]["0"]
        assert mine["config"] == e["runs"]["0"]["config"]
        for name, v in e["runs"]["0"]["values"].items():
            assert mine["values"][name] == pytest.approx(v, abs=1e-6), (k, name)


try:  # the dashboard's test helpers
    from test_app import app_env, open_page  # noqa: F401
except ImportError:
    pass


@pytest.mark.slow
def test_a_fresh_store_reads_the_shipped_studies_on_the_reproduction_and_budget_pages(app_env):
    """Nothing trained: the Reproduction page reads every study shipped for the chosen task, with where its numbers
    come from, and the Budget page shows the ε × LP-share trade-off of the split study until a sweep exists."""
    at = open_page("pages/reproduction.py")
    at.selectbox(key="re_noise_task").set_value("real-vision").run()
    assert not at.exception, [e.value for e in at.exception]
    said = [m.value for m in at.markdown]
    assert any(m.startswith("*DP-SGD beside BandMF (at medium)*") for m in said), said
    assert any("the best LP share is p = 0.2 under DP-SGD" in m for m in said), said
    assert any("*shipped with dpviz*" in c.value and "per-seed values lost" in c.value for c in at.caption)
    at = open_page("pages/budget.py")
    assert not at.exception, [e.value for e in at.exception]
    assert any("*The best LP share per mechanism on default*" == m.value for m in at.markdown)
    assert any("python -m dpviz study run split --task default --seeds 0 1 2" in c.value for c in at.caption)
    at = open_page("pages/continual.py")
    assert not at.exception, [e.value for e in at.exception]
    assert any(m.value.startswith("**Reading.** *public first") for m in at.markdown), [m.value for m in at.markdown]


def test_the_parts_reading_tests_the_gap_paired_by_seed():
    cell = lambda eps, parts: (("epsilon", eps), ("parts", parts), ("bands", 4))  # noqa: E731
    # the same seeds under both assignments: a constant +0.010 gap is beyond chance though the seeds' spread is wide
    values = {cell(1.0, "independent"): {"accuracy": [0.61, 0.66, 0.71]},
              cell(1.0, "equal"): {"accuracy": [0.60, 0.651, 0.699]}}
    verdict, text = studies.reading("parts", planted("parts", values))
    assert verdict == "independent parts gain accuracy", (verdict, text)
    assert "+0.010 ± 0.001 over 3 paired seeds; paired t = " in text and "beyond chance at 95 %" in text, text
    values[cell(1.0, "equal")] = {"accuracy": [0.62, 0.64, 0.72]}  # the gap changes sign from seed to seed
    assert studies.reading("parts", planted("parts", values))[0] == "no difference beyond chance"


def test_the_lora_public_first_and_private_tuning_readings_follow_their_numbers():
    lora = {(("lora_rank", r), ("epsilon", 8.0)): {"accuracy": [a - 0.01, a, a + 0.01]}
            for r, a in ((1, 0.65), (8, 0.72))}
    verdict, text = studies.reading("lora", planted("lora", lora))
    assert verdict == "the rank matters" and "At ε = 8 rank 8 is the most accurate (0.720 ± 0.010)" in text, text
    pub = {(("epsilon", 1.0), ("strategy", "continual")): {"accuracy": [0.50, 0.52, 0.54]},
           (("epsilon", 1.0), ("strategy", "fft")): {"accuracy": [0.60, 0.61, 0.62]}}
    verdict, text = studies.reading("public-first", planted("public-first", pub))
    assert verdict == "public first hurts" and "(-9.0 points, beyond the spread)" in text, text
    tune = {(("epsilon", 1.0), ("method", "auto")): {"accuracy": [0.63, 0.64, 0.65]},
            (("epsilon", 1.0), ("method", "fixed")): {"accuracy": [0.36, 0.41, 0.46]},
            (("epsilon", 8.0), ("method", "auto")): {"accuracy": [0.80, 0.81, 0.82]},
            (("epsilon", 8.0), ("method", "negative-binomial")): {"accuracy": [0.79, 0.80, 0.84]}}
    verdict, text = studies.reading("private-tuning", planted("private-tuning", tune))
    assert verdict == "public rates win", (verdict, text)
    tune[(("epsilon", 8.0), ("method", "negative-binomial"))] = {"accuracy": [0.88, 0.89, 0.90]}
    assert studies.reading("private-tuning", planted("private-tuning", tune))[0] == "a search wins"


def test_a_study_whose_cells_differ_only_in_how_they_run_keeps_them_apart():
    items = runner.plan(studies.get("private-tuning"), seeds=(0,))
    assert [it.cell["method"] for it in items] == ["auto", "negative-binomial", "fixed"] * 2
    assert len({it.config.hash() for it in items}) == 2  # one configuration per ε, three ways to release it


def test_every_study_draws_its_shipped_results_each_cell_once():
    """A study without a figure of its own draws its first measure per cell; every shipped cell is in a figure."""
    assert [n for n in studies.names() if n in BUILT_IN] == list(BUILT_IN)
    for name in BUILT_IN:  # not a study another test file registered
        study = studies.get(name)
        found = studies.available() if name != "depth" else [studies.stored(name, task="real-vision", scale="small")]
        res = next((r for r in found if r.study == name), None)
        assert res is not None, f"{name}: no shipped results"
        fig = studies.figure(name, res)
        assert fig is not None, name
        drawn = study.measures[0].name if study.figure is None else "accuracy"  # the default figure: the first
        assert sum(len(t.y) for t in fig.data) == sum(1 for e in res.cells.values() if res.stats(e["cell"], drawn)), name
    fig = studies.figure("lora", studies.stored("lora"))
    assert [t.name for t in fig.data] == ["rank r 1", "rank r 2", "rank r 4", "rank r 8"]


def test_a_study_at_a_larger_size_tests_its_runs_as_seldom_as_the_scorecards():
    from dpviz.reproduce import SCALES

    every = SCALES["medium"]["real-vision"]["every"]
    small, medium = (runner.plan(studies.get("noise"), task="real-vision", scale=s, seeds=(0,)) for s in ("small", "medium"))
    assert every > 1 and medium[0].config.eval_every == small[0].config.eval_every * every
    assert medium[0].config.checkpoint_every == small[0].config.checkpoint_every * every
    mine = runner.plan(studies.get("noise"), task="real-vision", scale="medium", seeds=(0,), sets={"eval_every": 5})
    assert mine[0].config.eval_every == 5  # the user's own interval stays
