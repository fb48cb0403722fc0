"""dpviz's layers, kept: every module's imports (function-level ones included) point down or sideways,
never up, and no import circle exists.

The layers, bottom to top (a module may import its own layer's modules and any layer below):

1. leaves — errors, the catalogue (declarations that name loaders and builders by path, so data and
   models look their entries up in it), file safety, pure analyses and theory, the audit's bounds;
2. mechanisms — privacy math and the DP step, models, data, and the torch mechanics strategies use;
3. declarations — the field rules, `RunConfig`, strategies;
4. the run core — calibration, engine, trainer, `execute` (runs a concrete config), the accounting
   that runs ahead, the curvature analysis;
5. store and studies — the run store, the Optuna journal, sweeps and their trials (the trial runner
   passed in, not imported);
6. policy — `autotune` (choosing "auto" learning rates trains proxy searches);
7. the runner — resolve, then execute: the public `dpviz.run`;
8. services — jobs, audits, the reproduction scorecard, presets, the analysis service;
9. reading — results, figures, export;
10. faces — the command line and the package's public namespace (the dashboard and pages sit above
    dpviz and are checked not to be imported by it).
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dpviz"

LAYERS = [
    ("leaves", ["errors", "threads", "idle", "safefile", "plugins", "catalog", "artifacts", "storecheck", "runfiles", "owners",
                "tensorfiles", "storeschema",
                "analyses.knn", "analyses.separability", "analyses.residual", "analyses.embedding",
                "theory.setting", "theory.langevin", "theory.simulate", "theory.lab", "theory.readings",
                "audit.bounds", "audit.readings"]),
    ("mechanisms", ["privacy", "distributed", "models", "data", "lora", "sparse", "curvature", "audit.canaries",
                    "theory.overlay", "theory"]),
    ("declarations", ["fields", "strategies", "config", "tasks"]),
    ("run core", ["calibration", "engine", "resume", "trainer", "execute", "ahead", "analyses.hessian", "analyses"]),
    ("store and studies", ["store", "journal", "trials", "sweeps"]),
    ("policy", ["shipped_rates", "proxy_search", "autotune"]),
    ("runner", ["runner"]),
    ("services", ["jobs", "processes", "audit", "reproduce", "presets", "analyses.service"]),
    ("reading", ["results", "figures", "export"]),
    ("faces", ["cli", "__main__", ""]),
]

# Named exceptions: imports that are not dependencies.
# - Annotation-only imports under `if TYPE_CHECKING:` (e.g. strategies.base names the trainer's `Loop`
#   in its hooks' signatures) never run.
# - A module importing its own package's __init__ (`from . import register`) is the registration seam of
#   strategies, analyses and results: the package lists its modules, each module registers itself.


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = [] if rel.parts == ("__init__",) else list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def layer_of(name: str) -> int:
    """The layer of the longest listed prefix of ``name`` ("" is the package itself)."""
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for pre in prefixes:
            if name == pre or (pre and name.startswith(pre + ".")):
                if best is None or len(pre) > best[1]:
                    best = (i, len(pre))
    assert best is not None, f"dpviz.{name} is in no layer: add it to LAYERS"
    return best[0]


def _type_checking(node) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node outside `if TYPE_CHECKING:` blocks, at any depth."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _type_checking(node):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def targets(name: str, path: Path) -> set[str]:
    """The dpviz modules ``name`` imports ("" is the package itself)."""
    package = name.split(".") if path.name == "__init__.py" and name else name.split(".")[:-1] if name else []
    out = set()
    for node in _imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name[6:] for a in node.names if a.name == "dpviz" or a.name.startswith("dpviz.")}
            continue
        if node.level == 0:
            if not (node.module or "").startswith("dpviz"):
                continue
            base = node.module[6:]
        else:
            up = package[: len(package) - (node.level - 1)]
            base = ".".join(up + ([node.module] if node.module else []))
        for a in node.names:
            sub = f"{base}.{a.name}" if base else a.name
            out.add(sub if sub in MODULES else base)
    return {t for t in out if t in MODULES and t != name}


def own_package(name: str, target: str) -> bool:
    """``target`` is the package ``name`` belongs to (the registration seam, see above)."""
    return "." in name and name.rsplit(".", 1)[0] == target


EDGES = {name: targets(name, path) for name, path in MODULES.items()}


def test_every_module_is_in_a_layer():
    for name in MODULES:
        layer_of(name)


def test_no_module_imports_a_higher_layer():
    up = [f"dpviz.{a or '(package)'} ({LAYERS[layer_of(a)][0]}) imports dpviz.{b or '(package)'} "
          f"({LAYERS[layer_of(b)][0]})"
          for a, bs in EDGES.items() for b in bs if layer_of(b) > layer_of(a) and not own_package(a, b)]
    assert not up, "imports from a lower layer to a higher one:\n" + "\n".join(sorted(up))


def test_no_import_circle():
    edges = {a: {b for b in bs if not own_package(a, b)} for a, bs in EDGES.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(v):
        state[v] = 1
        path.append(v)
        for w in sorted(edges[v]):
            if state.get(w) == 1:
                circle = path[path.index(w):] + [w]
                raise AssertionError("import circle: " + " → ".join(f"dpviz.{m}" for m in circle))
            if w not in state:
                visit(w)
        path.pop()
        state[v] = 2

    for v in sorted(edges):
        if v not in state:
            visit(v)


def test_the_library_never_imports_the_dashboard():
    faces = [f"dpviz.{n}: {m}" for n, p in MODULES.items() for node in _imports(ast.parse(p.read_text()))
             for m in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
             if m.split(".")[0] in ("streamlit", "dashboard", "pages", "app")]
    assert not faces, faces


def test_the_checker_sees_function_level_imports_and_catches_a_planted_upward_one(tmp_path):
    """The check must be able to fail: a function-level import of the runner from the engine is caught."""
    src = "def f():\n    from .runner import run\n    return run\n"
    planted = tmp_path / "engine.py"
    planted.write_text(src)
    assert "runner" in targets("engine", planted)
    assert layer_of("runner") > layer_of("engine")
