"""dpviz's layers, kept: every module's imports (function-level ones included) point down or sideways,
never up, and no import circle exists. The layers, the top-level modules and the packages are read from
`docs/architecture.md`, so the page and the code cannot drift apart.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dpviz"
ARCH = (ROOT / "docs" / "architecture.md").read_text()


def _section(title: str) -> str:
    return ARCH.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _rows(title: str) -> list[list[str]]:
    """The body rows of the first table under ``## title``, as cells."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in _section(title).splitlines()
            if line.startswith("|")]
    return rows[2:]  # header and rule


def _names(cell: str) -> list[str]:
    return ["" if n == "__init__" else n for n in re.findall(r"`([\w.]+)`", cell)]


LAYERS = [(row[0], _names(row[1])) for row in _rows("Layers")]
TOP_LEVEL = {row[0].strip("`") for row in _rows("Top-level modules")}
PACKAGES = set(re.findall(r"^- \*\*`(\w+)/`\*\*", _section("Packages"), re.M))

# Named exceptions: imports that are not dependencies.
# - Annotation-only imports under `if TYPE_CHECKING:` never run.
# - A module importing its own package's __init__ (`from . import register`) is the registration seam of
#   strategies, analyses and results: the package lists its modules, each module registers itself.


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = [] if rel.parts == ("__init__",) else list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def top(name: str) -> str:
    """The top-level module or package ``name`` belongs to ("" is the package itself)."""
    return name.split(".")[0]


def layer_of(name: str, layers=None) -> int:
    """The layer of the row that lists ``name``'s top-level module or package."""
    for i, (_, members) in enumerate(layers or LAYERS):
        if top(name) in members:
            return i
    raise AssertionError(f"dpviz.{name} is in no layer: add {top(name) or '__init__'} to the table")


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


def spanning_rows(layers) -> list[str]:
    """Rows that name part of a package (``training.threads``): a package then spans layers."""
    return [f"{row}: {m}" for row, members in layers for m in members if "." in m]


def test_every_package_sits_whole_in_one_layer():
    assert not spanning_rows(LAYERS), "rows naming part of a package:\n" + "\n".join(spanning_rows(LAYERS))
    listed = [m for _, members in LAYERS for m in members]
    assert len(listed) == len(set(listed)), f"listed in two rows: {sorted({m for m in listed if listed.count(m) > 1})}"
    # the check can fail: a row of the old table, where `training.threads` sat with the leaves
    assert spanning_rows([("leaves", ["errors", "training.threads"])])


def package_graph(edges) -> dict[str, set[str]]:
    """Top-level module or package → those it imports (a package's own registration seam left out)."""
    graph: dict[str, set[str]] = {}
    for a, bs in edges.items():
        graph.setdefault(top(a), set()).update(top(b) for b in bs if top(b) != top(a) and not own_package(a, b))
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(v):
        state[v] = 1
        path.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_the_package_graph_has_no_cycle():
    found = cycle(package_graph(EDGES))
    assert found is None, "package cycle: " + " → ".join(f"dpviz.{m or '(package)'}" for m in found)
    # the check can fail: the old tree's strategies → analyses.curvature → analyses.hessian → training.prepare
    # → strategies is a package cycle although no module circle
    planted = {**EDGES, "strategies.continual": EDGES["strategies.continual"] | {"analyses.hessian"}}
    assert cycle(package_graph(planted)) is not None


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
    """The check must be able to fail: a function-level import of the runner from the loop is caught."""
    src = "def f():\n    from dpviz.runner import run\n    return run\n"
    planted = tmp_path / "loop.py"
    planted.write_text(src)
    assert "runner" in targets("training.loop", planted)
    assert layer_of("runner") > layer_of("training.loop")


def test_the_top_level_holds_only_the_listed_modules_and_packages():
    """A new concern gets a package (and a line in docs/architecture.md), not a 39th flat module."""
    modules = {p.stem for p in PKG.glob("*.py")}
    packages = {p.parent.name for p in PKG.glob("*/__init__.py")}
    assert modules == TOP_LEVEL, f"top-level modules not in docs/architecture.md: {modules ^ TOP_LEVEL}"
    assert packages == PACKAGES, f"packages not in docs/architecture.md: {packages ^ PACKAGES}"
    assert len(TOP_LEVEL) <= 10


def private_imports(name: str, path: Path) -> list[str]:
    """``from dpviz.<other package>… import _name`` in ``name``'s source: another package's private names."""
    own = name.split(".")[0] if "." in name or path.name == "__init__.py" else None
    out = []
    for node in _imports(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("dpviz."):
            theirs = node.module.split(".")[1]
            out += [f"dpviz.{name}: {node.module}.{a.name}" for a in node.names
                    if a.name.startswith("_") and theirs != own]
    return out


def test_no_module_imports_another_packages_private_names(tmp_path):
    found = [line for name, path in MODULES.items() for line in private_imports(name, path)]
    assert not found, "private names imported across packages:\n" + "\n".join(found)
    planted = tmp_path / "loop.py"
    planted.write_text("from dpviz.store.checks import _private\n")
    assert private_imports("training.loop", planted)  # the check can fail


def _members(cls_node: ast.ClassDef) -> set[str]:
    """Methods, annotated class attributes and ``self.x = …`` assignments of a class's body."""
    out = {n.name for n in cls_node.body if isinstance(n, ast.FunctionDef)}
    out |= {n.target.id for n in cls_node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    for node in ast.walk(cls_node):
        targets_ = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets_:
            for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                    out.add(e.attr)
    return out


def _class(path: Path, name: str) -> ast.ClassDef:
    return next(n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef) and n.name == name)


def loop_uses(source: str) -> set[str]:
    """The members a strategy's source reads of the ``loop`` its hooks get."""
    return {n.attr for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "loop"}


def test_strategies_use_only_the_written_loop_api_and_the_loop_provides_it():
    """`strategies.base.LoopAPI` is the strategy API of the trainer: the strategies use nothing else of the
    loop, and `training.loop.Loop` has every member of it."""
    api = _members(_class(MODULES["strategies.base"], "LoopAPI"))
    used = {m: loop_uses(p.read_text()) - api for m, p in MODULES.items() if m.startswith("strategies.")}
    assert not any(used.values()), f"loop members used but not in LoopAPI: { {m: u for m, u in used.items() if u} }"
    missing = api - _members(_class(MODULES["training.loop"], "Loop"))
    assert not missing, f"LoopAPI members the trainer's Loop lacks: {missing}"
    assert loop_uses("def after_step(self, loop, plan, setup):\n    loop.optimizer.zero_grad()\n") - api  # can fail


def init_problems(path: Path) -> list[str]:
    """What makes a package's ``__init__.py`` more than its re-exports: over 40 lines, or a class or function
    of its own (a module ``__getattr__`` is a lazy re-export and allowed)."""
    src = path.read_text()
    out = [f"{path.relative_to(ROOT)}: {len(src.splitlines())} lines"] if len(src.splitlines()) > 40 else []
    out += [f"{path.relative_to(ROOT)}: defines {n.name}" for n in ast.parse(src).body
            if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name != "__getattr__"]
    return out


def test_package_inits_only_re_export():
    """A package's main class lives in a module named for it (`store.runstore`, `jobs.manager`), so a reader
    finds it by file name and ``__init__`` only says what the package offers."""
    found = [p for path in sorted(PKG.rglob("__init__.py")) for p in init_problems(path)]
    assert not found, "\n".join(found)
    assert init_problems(PKG / "store" / "runstore.py")  # the check can fail: what store/__init__.py held


SURFACE = {row[0]: set(_names(row[1])) for row in _rows("The faces' surface")}
FACES = {ROOT / "app.py": "every face", **{p: "every face" for d in ("dashboard", "pages") for p in (ROOT / d).glob("*.py")},
         **{p: "the command line" for p in (PKG / "cli").glob("*.py")}}


def _public_names(top_name: str) -> set[str] | None:
    """The names a face may import from ``dpviz.<top_name>``: a package's ``__all__``; None for a module (any
    public name)."""
    init = PKG / top_name / "__init__.py"
    if not init.exists():
        return None
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return set()


def face_reaches(path: Path, face: str) -> list[str]:
    """The imports of ``path`` beyond its face's surface."""
    allowed = SURFACE["every face"] | (SURFACE["the command line"] if face == "the command line" else set())
    out = []
    for node in _imports(ast.parse(path.read_text())):
        mods = [(a.name, None) for a in node.names] if isinstance(node, ast.Import) else \
            [(node.module or "", [a.name for a in node.names])] if node.level == 0 else []
        for mod, names in mods:
            if not (mod == "dpviz" or mod.startswith("dpviz.")):
                continue
            parts = mod.split(".")[1:]
            if face == "the command line" and parts[:1] == ["cli"]:
                continue
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}: {mod}"
            if not parts:  # from dpviz import x: the namespace, or a top-level module or package by name
                out += [f"{where}.{n}" for n in names or () if n.startswith("_") or
                        (n not in allowed and (PKG / n).exists() | (PKG / f"{n}.py").exists())]
                continue
            if len(parts) > 1 or parts[0] not in allowed or names is None:
                out.append(f"{where} (a module inside a package, or not on the surface)")
                continue
            public = _public_names(parts[0])
            out += [f"{where}.{n}" for n in names
                    if n.startswith("_") or (public is not None and n not in public)]
    return out


def test_the_faces_import_only_the_declared_surface(tmp_path):
    assert set(FACES.values()) <= set(SURFACE), "docs/architecture.md: the faces' surface table has no such row"
    bare = [p for p in set().union(*SURFACE.values()) if _public_names(p) == set()]
    assert not bare, f"packages on the faces' surface must say what they offer (__all__): {bare}"
    found = [line for path, face in sorted(FACES.items()) for line in face_reaches(path, face)]
    assert not found, "imports beyond the faces' surface (docs/architecture.md):\n" + "\n".join(found)
    page = tmp_path / "page.py"  # the check can fail: a page reaching into a package, as they once did
    page.write_text("def f():\n    from dpviz.analyses.hessian import predict_batch_size\n"
                    "from dpviz.training import calibration\nfrom dpviz.store import _private\n")
    assert len(face_reaches(page, "every face")) == 3
