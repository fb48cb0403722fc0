"""A study is one file: this one declares a toy study, and dpviz finds it everywhere: in Python, on the command
line (a child naming this module in DPVIZ_PLUGINS), on the Studies page, in the results and in the docs."""

import json
import subprocess
import sys

import pytest

from dpviz import studies
from dpviz.studies import Measure, Study

try:  # the dashboard's test helpers (pytest puts tests/ on the path; a CLI child importing this file has none)
    from test_app import app_env, open_page  # noqa: F401
except ImportError:
    pass

TOY = "toy-budget"


def read(res):
    """More budget, more accuracy? Pure: from the per-seed numbers."""
    acc = sorted((float(e["cell"]["epsilon"]), st[0]) for e in res.cells.values()
                 if (st := res.stats(e["cell"], "accuracy")))
    if len(acc) < 2:
        return "not read", "Fewer than two ε read."
    rises = acc[-1][1] >= acc[0][1]
    return ("rises" if rises else "falls"), (f"Test accuracy goes from {acc[0][1]:.3f} at ε = {acc[0][0]:g} to "
                                             f"{acc[-1][1]:.3f} at ε = {acc[-1][0]:g}.")


TOY_STUDY = Study(
    name=TOY, title="Toy: accuracy against the budget", question="Does a larger ε buy a more accurate DP-LP head?",
    axes={"epsilon": (1.0, 8.0)}, fields=lambda cell: {"epsilon": float(cell["epsilon"])},
    base=dict(strategy="lp", train_size=200, epochs=1, batch_size=50),
    measures=(Measure(name="accuracy", label="test accuracy"), Measure(name="steps", label="DP steps", fmt=".0f")),
    measure=lambda store, s, cfg: {"accuracy": s["test_accuracy"], "steps": sum(p["steps"] for p in s["phases"])},
    read=read)

if TOY not in studies.STUDIES:  # on import, so a CLI child naming this module in DPVIZ_PLUGINS sees it too
    studies.register_study(TOY_STUDY)


@pytest.fixture
def toy():
    studies.STUDIES.setdefault(TOY, TOY_STUDY)
    yield TOY
    studies.STUDIES.pop(TOY, None)


def test_the_toy_runs_from_python_and_its_numbers_are_results_like_any_studys(toy, cache_dir):
    res = studies.run(toy, task="default", seeds=(0,), cache_dir=cache_dir)
    assert len(res.run_ids()) == 2
    saved = json.loads((cache_dir / "studies" / f"{toy}_default.json").read_text())
    assert saved["study"] == toy and {c["cell"]["epsilon"] for c in saved["cells"]} == {1.0, 8.0}
    assert [r.study for r in studies.available("default", store_root=cache_dir) if r.study == toy] == [toy]
    verdict, sentence = studies.reading(toy, res)
    assert verdict in ("rises", "falls") and "at ε = 8" in sentence


@pytest.mark.subprocess
def test_the_toy_is_on_the_command_line_run_shown_and_refused_like_any_study(toy, cli_env):
    env = dict(cli_env, DPVIZ_PLUGINS="test_toy_study", PYTHONPATH=f"{cli_env['PYTHONPATH']}:tests")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "dpviz", "study", *args], capture_output=True, text=True,
                              env=env, timeout=300)

    listed = json.loads(cli("list", "--json").stdout)
    assert TOY in [s["name"] for s in listed]
    ran = cli("run", TOY, "--seeds", "0")
    assert ran.returncode == 0, ran.stderr
    assert "verdict: " in ran.stdout and "Test accuracy goes from" in ran.stdout
    assert f"python -m dpviz study run {TOY} --task default --seeds 0" in ran.stdout  # its provenance
    shown = cli("show", TOY)
    assert shown.returncode == 0 and "Test accuracy goes from" in shown.stdout
    bad = cli("run", TOY, "--vary", "bands=2")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "dpviz: error: vary: one of this study's axes (epsilon); got 'bands'"]


def test_the_toy_is_on_the_studies_page_with_its_results(toy, app_env):
    studies.run(toy, task="default", seeds=(0,), cache_dir=app_env)
    at = open_page("pages/studies.py")
    assert TOY in at.selectbox(key="sd_study").options or "Toy: accuracy against the budget" in \
        at.selectbox(key="sd_study").options
    at.selectbox(key="sd_study").set_value(TOY).run()
    assert any("0 of 6 runs read" in c.value or "2 of 6 runs read" in c.value for c in at.caption)  # 3 seeds asked
    at.number_input(key="sd_seeds").set_value(1).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("2 of 2 runs read" in c.value for c in at.caption), [c.value for c in at.caption]
    assert any("Test accuracy goes from" in m.value for m in at.markdown)


def test_the_toy_is_in_the_generated_docs(toy):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "scripts"))
    import docs_reference

    page = docs_reference.studies_page()
    assert "## Toy: accuracy against the budget (`toy-budget`)" in page
    assert "Does a larger ε buy a more accurate DP-LP head?" in page
