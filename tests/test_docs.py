"""The documentation site: it builds with ``mkdocs build --strict``, its generated reference names every
subcommand and flag of the command line and every `RunConfig` field, and every repository path a page
names in backticks exists.
"""

import argparse
import dataclasses
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dpviz.cli import build_parser
from dpviz.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "scripts"))
import docs_reference  # noqa: E402  (the hook that writes the generated pages)

# Top-level folders of the repository whose paths the pages may name; `cache/` is where the store lives at
# run time, so `cache/…` names a file of a store, not of the repository.
NOT_REPOSITORY = {"cache", ".venv", ".git", "site", ".pytest_cache"}
FILE_SUFFIXES = (".py", ".md", ".toml", ".txt", ".sh", ".yml", ".yaml", ".ini", ".ipynb", ".cfg")


# --- (a) the build ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    # not --quiet: it drops the warnings that --strict counts, and the build would pass with them
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                           str(ROOT / "mkdocs.yml"), "-d", str(out)], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


def test_site_builds_strict(site):
    for page in ("index.html", "reference/cli/index.html", "reference/config/index.html",
                 "reference/catalog/index.html", "tutorials/quickstart/index.html", "changelog/index.html"):
        assert (site / page).is_file(), page


# --- (b) the generated reference ------------------------------------------------------------------------
def sections(page: str) -> dict[str, str]:
    """The HTML of each ``<h2>`` section of ``page``, keyed by the heading's text."""
    parts = re.split(r"<h2\b", page)
    out = {}
    for part in parts[1:]:
        title = html.unescape(re.sub(r"<[^>]+>", "", part.split("</h2>", 1)[0].split(">", 1)[1])).strip(" ¶")
        out[title] = part
    return out


def cli_missing(page: str) -> list[str]:
    """Each subcommand of ``python -m dpviz`` without its section on ``page``, and each flag (option string)
    missing from its subcommand's section, outside the usage line (which names every flag without saying
    what it does)."""
    found = sections(page)
    missing = []
    for path, sub in docs_reference.subcommands(build_parser()):
        body = found.get(path)
        if body is None:
            missing.append(f"subcommand {path}")
            continue
        text = html.unescape(re.sub(r"<pre\b.*?</pre>", "", body, flags=re.S))
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help") and f"<code>{flag}</code>" not in text:
                    missing.append(f"{path} {flag}")
    return missing


def config_missing(page: str) -> list[str]:
    text = html.unescape(page)
    return [f.name for f in dataclasses.fields(RunConfig) if f"<code>{f.name}</code>" not in text]


def test_every_subcommand_and_flag_is_in_the_cli_reference(site):
    page = (site / "reference" / "cli" / "index.html").read_text()
    assert not cli_missing(page)
    assert len(docs_reference.subcommands(build_parser())) >= 14


def test_every_runconfig_field_is_in_the_config_reference(site):
    page = (site / "reference" / "config" / "index.html").read_text()
    assert not config_missing(page)


@pytest.mark.subprocess
def test_every_dataset_backbone_strategy_and_task_is_in_the_catalogue(site):
    """Read in a fresh process, as the build reads them: this one may hold other tests' plugin entries."""
    code = ("import json; from dpviz import catalog, strategies, tasks; "
            "print(json.dumps([*catalog.DATASETS, *catalog.BACKBONES, *strategies.REGISTRY, *tasks.TASKS]))")
    env = {k: v for k, v in os.environ.items() if k not in ("DPVIZ_PLUGINS", "DPVIZ_STRATEGIES")}
    names = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                      env=env, cwd=ROOT).stdout)
    text = html.unescape((site / "reference" / "catalog" / "index.html").read_text())
    assert [n for n in names if f"<td><code>{n}</code></td>" not in text] == []


def test_the_reference_checks_can_fail(site):
    """A page without one flag, one subcommand or one field is caught."""
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert cli_missing(cli.replace("--lp-fraction", "--lp-share")) == \
        [f"{p} --lp-fraction" for p, s in docs_reference.subcommands(build_parser())
         if any("--lp-fraction" in a.option_strings for a in s._actions)]
    without_reproduce = re.sub(r'<h2 id="reproduce".*?(?=<h2|\Z)', "", cli, flags=re.S)
    assert cli_missing(without_reproduce) == ["subcommand reproduce"]
    config = (site / "reference" / "config" / "index.html").read_text()
    assert config_missing(config.replace("<code>lora_rank</code>", "<code>rank</code>")) == ["lora_rank"]


def test_generated_pages_cover_the_parser_and_the_config():
    """The generated Markdown alone (no build): every subcommand has a section and every field a row."""
    cli = docs_reference.cli_page()
    for path, sub in docs_reference.subcommands(build_parser()):
        assert f"## `{path}`" in cli
        assert all(f"`{flag}`" in cli for a in sub._actions for flag in a.option_strings
                   if not isinstance(a, argparse._HelpAction))
    config = docs_reference.config_page()
    assert all(f"| `{f.name}` |" in config for f in dataclasses.fields(RunConfig))


# --- (c) paths the pages name ---------------------------------------------------------------------------
def named_paths(text: str) -> set[str]:
    """The repository paths ``text`` names in backticks: a name under one of the repository's top-level
    folders (`dpviz/store/__init__.py`, `bench/`), or any name of a source or text file (`run.sh`,
    `dpviz/figures/sparse.py`), which pages write from the repository's root. Placeholders (`runs/<id>/`,
    `*.txt`) and the folders of a store or a dataset (`runs/`, `MNIST/raw/`) are not repository paths."""
    top = {p.name for p in ROOT.iterdir() if p.is_dir()} - NOT_REPOSITORY
    out = set()
    for span in re.findall(r"(?<!`)`([^`\n]+)`(?!`)", re.sub(r"```.*?```", "", text, flags=re.S)):
        span = span.strip()
        if re.search(r"[\s<>*{}…$:=|,()\[\]]", span) or span.startswith(("-", "/", "~", ".venv")):
            continue
        first = span.split("/", 1)[0]
        if ("/" in span and first in top) or span.endswith(FILE_SUFFIXES):
            out.add(span)
    return out


def pages() -> dict[str, str]:
    """Every page of the site as Markdown: the files under docs/ and the generated reference."""
    found = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md"))}
    found.update({f"(generated) {uri}": page() for uri, page in docs_reference.PAGES.items()})
    return found


def missing_paths(found: dict[str, str]) -> list[str]:
    return [f"{page}: `{path}`" for page, text in found.items() for path in sorted(named_paths(text))
            if not (ROOT / path.rstrip("/")).exists()]


def test_every_path_a_page_names_exists():
    found = pages()
    assert "docs/architecture.md" in found and any(named_paths(t) for t in found.values())
    assert not missing_paths(found), "pages name paths the repository does not have"


def test_the_path_check_can_fail():
    page = "See `dpviz/store/__init__.py`, `bench/bench_paths.py` and `dpviz/store/nothing.py`, not `runs/<id>/`."
    assert named_paths(page) == {"dpviz/store/__init__.py", "bench/bench_paths.py", "dpviz/store/nothing.py"}
    assert missing_paths({"page.md": page}) == ["page.md: `dpviz/store/nothing.py`"]


RUNNABLE = re.compile(r"<!-- runnable -->\s*\n```(python|bash)\n(.*?)```", re.S)


def runnable_blocks() -> list[tuple[str, str, str]]:
    """(page, language, code) of every fenced block a page marks ``<!-- runnable -->``."""
    return [(page, lang, src) for page, text in pages().items() for lang, src in RUNNABLE.findall(text)]


def run_block(lang: str, src: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DPVIZ_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    if lang == "python":
        return subprocess.run([sys.executable, "-c", src], env=env, cwd=cache.parent, capture_output=True, text=True)
    script = re.sub(r"^dpviz ", f"{sys.executable} -m dpviz ", src, flags=re.M)
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env, cwd=cache.parent, capture_output=True,
                          text=True)


@pytest.mark.subprocess
def test_the_runnable_blocks_of_the_guides_run(tmp_path):
    blocks = runnable_blocks()
    assert {lang for _, lang, _ in blocks} == {"python", "bash"}
    for i, (page, lang, src) in enumerate(blocks):
        cache = tmp_path / f"block{i}" / "cache"
        cache.parent.mkdir()
        out = run_block(lang, src, cache)
        assert out.returncode == 0, f"{page}: a {lang} block failed:\n{src}\n{out.stderr[-2000:]}"


@pytest.mark.subprocess
def test_a_broken_runnable_block_fails(tmp_path):
    cache = tmp_path / "cache"
    assert run_block("bash", "dpviz run --epsilon -1 --json\n", cache).returncode == 2
    assert run_block("python", "import dpviz\ndpviz.RunConfig(epochs=0)\n", cache).returncode != 0
