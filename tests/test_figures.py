"""The figure package: one style module, strategy colours from the registry, LoRA on the sparse profile."""

import ast
import re
from pathlib import Path

import pandas as pd
import pytest

from dpviz import figures, results, strategies
from dpviz.figures import style

FIGURES = Path(figures.__file__).parent


@pytest.mark.parametrize("path", sorted(p.name for p in FIGURES.glob("*.py")
                                        if p.name not in ("__init__.py", "style.py")))
def test_figure_modules_take_their_style_from_the_style_module_only(path):
    src = (FIGURES / path).read_text()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.level == 1 and node.module == "style", f"{path} imports from {'.' * node.level}{node.module}"
            assert not [a.name for a in node.names if a.name.startswith("_")], f"{path} imports a private helper"
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("dpviz.figures", "dpviz.results")):
            raise AssertionError(f"{path} imports {node.module}")
    assert not re.findall(r"#[0-9a-fA-F]{6}\b", src), f"{path} keeps its own colours (palette: style.py)"


def curves(strats) -> pd.DataFrame:
    return pd.DataFrame([{"run_id": s, "label": s, "strategy": s, "epsilon": 1.0, "seed": 0, "group": s, "step": k,
                          "metric": "loss", "value": 1.0 / (k + 1)} for s in strats for k in range(3)])


def test_every_registered_strategy_is_drawn_in_its_declared_colour(monkeypatch):
    class Toy:  # a strategy registered after figures was imported
        color = "#123456"

    monkeypatch.setitem(strategies.REGISTRY, "toy", Toy)
    names = [*strategies.names(), "unregistered"]
    fig = figures.metric_curves(curves(names), "loss")
    drawn = {tr.name: tr.line.color for tr in fig.data}
    safe = {n: style._SAFE.get(strategies.get(n).color.lower(), strategies.get(n).color) for n in strategies.names()}
    assert drawn == {**safe, "unregistered": style.GREY}  # a matplotlib default: its Okabe–Ito counterpart
    assert drawn["toy"] == "#123456" and drawn["continual"] != style.GREY
    assert set(safe.values()) - {"#123456"} <= set(style.OKABE_ITO.values())  # the built-ins: colour-blind safe


def test_sparse_profile_draws_lora_ranks_in_the_lora_colour():
    rows = pd.DataFrame([{"epsilon": e, "strategy": "lora", "selection": "sparta", "sparsity": 0.2, "lora_rank": r,
                          "seed": 0, "test_accuracy": 0.5 + r / 100, "trainable_fraction": 0.01 * r}
                         for e in (1.0, 8.0) for r in (8, 1, 4, 2)]
                        + [{"epsilon": e, "strategy": "sparse", "selection": "sparta", "sparsity": 0.2, "lora_rank": 4,
                            "seed": 0, "test_accuracy": 0.6, "trainable_fraction": 0.2} for e in (1.0, 8.0)])
    fig = figures.sparse.profile_figure(results.profile_table(rows))
    lora = [tr for tr in fig.data if tr.legendgroup == "lora"]
    assert len(lora) == 2 and [tr.showlegend for tr in lora] == [True, False]  # one panel per ε, one legend entry
    for tr in lora:
        assert tr.marker.color == tr.line.color == style.color("lora")
        assert list(tr.x) == pytest.approx([1.0, 2.0, 4.0, 8.0])  # 100 · trainable_fraction, sorted
        assert tr.text == ("r = 1", "r = 2", "r = 4", "r = 8") and "text" in tr.mode
    sparta = [tr for tr in fig.data if tr.legendgroup == "sparta"][0]
    assert sparta.marker.color == style.color("sparse") and sparta.text is None


def test_private_caption_marks_statistics_of_private_data():
    assert figures.private_caption("dpviz: fft") == \
        "dpviz: fft — statistics of private data, NOT covered by the DP guarantee"
