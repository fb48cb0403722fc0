"""A benchmark's figures reach the documentation only through the results file it writes."""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))

import docs_reference  # noqa: E402
import results  # noqa: E402


def test_a_results_file_names_its_command_date_and_machine_and_the_page_is_made_from_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(ROOT / "bench" / "bench_paths.py"), "--tries", "1"])
    path = results.record("paths", title="Everyday paths", columns=["path", "measured"],
                          rows=[["cached answer", "0.22 s"]], notes="a note", folder=tmp_path)
    doc = json.loads(path.read_text())
    assert doc["command"] == "python bench/bench_paths.py --tries 1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", doc["date"]) and "CPU cores" in doc["machine"]
    monkeypatch.setattr(results, "FOLDER", tmp_path)
    page = docs_reference.measured_page()
    assert "## Everyday paths" in page and "| cached answer | 0.22 s |" in page and doc["date"] in page
    doc["rows"] = [["cached answer", "9.99 s"]]  # the file changes: so does the page, nothing else to edit
    path.write_text(json.dumps(doc))
    assert "| cached answer | 9.99 s |" in docs_reference.measured_page()


def test_every_shipped_results_file_is_complete():
    for r in results.read_all():
        assert {"title", "columns", "rows", "command", "date", "machine"} <= set(r), r["name"]
        assert all(len(row) == len(r["columns"]) for row in r["rows"]), r["name"]


def test_a_page_s_results_mark_becomes_the_file_s_table_and_an_unknown_mark_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "FOLDER", tmp_path)
    results.record("paths", title="Everyday paths", columns=["path", "measured"], rows=[["cached", "0.2 s"]],
                   folder=tmp_path)
    page = "# Benchmarks\n\nBefore.\n\n<!-- results: paths -->\n\nAfter.\n"
    out = docs_reference.with_results(page)
    assert "| cached | 0.2 s |" in out and "<!-- results" not in out and "After." in out
    with pytest.raises(KeyError, match="no results file bench/results/gone.json"):
        docs_reference.with_results("<!-- results: gone -->\n")


def test_every_results_mark_in_the_docs_names_a_shipped_file():
    shipped = {r["name"] for r in results.read_all()}
    for page in (ROOT / "docs").rglob("*.md"):
        for name in docs_reference.RESULTS_MARK.findall(page.read_text()):
            assert name in shipped, f"{page.relative_to(ROOT)} marks {name}, which bench/results/ lacks"


def readme_quotes(readme: str, doc: dict) -> list[str]:
    """The test suite's figures (each row's first "N min SS s" in ``ci``'s file) that ``readme`` lacks."""
    firsts = [re.search(r"\d+ min \d\d s", row[-1]) for row in doc["rows"]]
    return [m.group(0) for m in firsts if m and m.group(0) not in readme]


def test_the_readme_quotes_the_test_suite_s_measured_times():
    readme = (ROOT / "README.md").read_text()
    doc = next(r for r in results.read_all() if r["name"] == "ci")
    assert doc["rows"] and readme_quotes(readme, doc) == []
    stale = {**doc, "rows": [[*r[:-1], "99 min 59 s"] for r in doc["rows"]]}  # a re-measure: the README must follow
    assert readme_quotes(readme, stale) == ["99 min 59 s"] * len(doc["rows"])
