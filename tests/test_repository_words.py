"""The repository speaks of the product as it is: a short README, and no narration of how it was built
(numbered work periods, issue numbers, dated re-run diaries) in the README, the docs, the code or its
comments. What changed for users is in CHANGELOG.md by version; history is in git."""

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess  # git

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200

NARRATION = [
    (r"\bissue\s*#?\d+", "an issue number"),
    (r"\b(this|last|previous|next|earlier|a later) (session|turn|work period)\b", "a work period"),
    (r"\b(session|stop|work period) \d+\b", "a numbered work period"),
    (r"\b(first|second|third|fourth|fifth|sixth|previous|earlier) (session|turn|work period)\b", "a work period"),
    (r"\bre-run on \d{4}-\d\d-\d\d", "a dated re-run diary"),
    (r"\bre-run after\b", "a re-run diary"),
]


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    keep = (".py", ".md", ".yml", ".toml", ".ini", ".sh", ".txt", ".ipynb")
    return [ROOT / f for f in out if f.endswith(keep) and (ROOT / f).is_file()
            and f not in ("tests/test_repository_words.py", "CHANGELOG.md")]


def narration(text: str) -> list[str]:
    return [f"{what}: {m.group(0)!r}" for pattern, what in NARRATION
            for m in re.finditer(pattern, text, flags=re.I)]


def test_the_readme_is_short_and_undated():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", text), "the README names a date: figures' dates go beside them on the site"


def test_nothing_narrates_how_the_repository_was_built():
    found = [f"{p.relative_to(ROOT)}: {hit}" for p in tracked_text_files() for hit in narration(p.read_text())]
    assert not found, "\n".join(found)


def test_the_narration_check_can_fail():
    # a made-up sentence with one phrase of each kind the check refuses (a dated re-run, an issue number, a
    # numbered work period), assembled here so that no file of the repository holds such a sentence
    planted = "; ".join(["Re-run on " + "2026-11-24 after the layering", "issue " + "31 asked for it",
                         "in the fourth " + "session."])
    assert len(narration(planted)) == 3
    assert not narration("a session-scoped fixture; pytest's session; the first pass over the data")
