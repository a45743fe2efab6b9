"""The packages of mlatr import downwards only: the layers docs/architecture.md orders ("Layers"), and no
import circle between modules.

Every import of the sources is read (those inside functions too: a lazy import is still a dependency;
relative ones resolved against their package), except those under ``if TYPE_CHECKING:``, which only annotate,
and so is every lazy-import map (a module-level ``_LAZY`` dict whose values name the modules imported on first
access: ``mlatr``'s and ``mlatr.search``'s).
"""

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "mlatr"
ARCHITECTURE = SRC.parent.parent / "docs" / "architecture.md"


def _modules() -> dict[str, Path]:
    out = {}
    for f in SRC.rglob("*.py"):
        parts = f.relative_to(SRC.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(tree: ast.AST) -> list[ast.stmt]:
    """The import statements of ``tree``, those under ``if TYPE_CHECKING:`` left out."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found.extend(i for n in node.orelse for i in _imports(ast.Module([n], [])))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        found.extend(_imports(node))
    return found


def _resolved(mod: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module name of ``node`` in module ``mod`` (a relative import resolved against its package)."""
    if not node.level:
        return node.module or ""
    package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _lazy_targets(tree: ast.AST) -> list[str]:
    """The modules a module-level ``_LAZY`` map names (its values: a module, or a (module, attribute) pair)."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and "_LAZY" in ast.unparse(node).split("=")[0]:
            for value in getattr(node.value, "values", []):
                first = value.elts[0] if isinstance(value, ast.Tuple) else value
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found.append(first.value)
    return found


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the mlatr modules it imports (``from P import name``: the module ``P.name`` when there is
    one, else ``P``; relative imports resolved; the modules of its lazy-import map)."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _imports(tree):
            if isinstance(node, ast.ImportFrom):
                module = _resolved(mod, path, node)
                if not module.startswith("mlatr"):
                    continue
                names = [f"{module}.{a.name}" for a in node.names]
                edges[mod].update(n if n in modules else module for n in names)
            else:
                edges[mod].update(a.name for a in node.names if a.name.startswith("mlatr"))
        edges[mod].update(t for t in _lazy_targets(tree) if t.startswith("mlatr"))
        edges[mod].discard(mod)
    return edges


def _layers() -> list[list[str]]:
    """The layers listed in docs/architecture.md's "Layers" block, lowest first: each a list of packages
    or modules (``mlatr.search``, ``mlatr.errors``)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = text.split("<!-- layers -->")[1].split("<!-- /layers -->")[0]
    return [re.findall(r"`(mlatr(?:\.\w+)?)`", line) for line in block.splitlines() if re.match(r"\s*\d+\.", line)]


def _unit(module: str, units: set[str]) -> str:
    """The package or top-level module of the layer list that ``module`` belongs to."""
    parts = module.split(".")
    for n in range(len(parts), 1, -1):
        if ".".join(parts[:n]) in units:
            return ".".join(parts[:n])
    if module == "mlatr" and module in units:  # the package's own __init__, not everything under it
        return module
    raise AssertionError(f"{module} is in no layer of docs/architecture.md")


def test_every_import_points_down_the_layers():
    layers = _layers()
    assert len(layers) >= 8
    level = {unit: i for i, units in enumerate(layers) for unit in units}
    modules = _modules()
    wrong = []
    for mod, targets in _edges(modules).items():
        mine = _unit(mod, set(level))
        for target in targets:
            theirs = _unit(target, set(level))
            if theirs == mine or (level[theirs] == level[mine] == 0):  # a package inside; the foundation
                continue
            if level[theirs] >= level[mine]:
                wrong.append(f"{mod} (layer {level[mine] + 1}) imports {target} (layer {level[theirs] + 1})")
    assert not wrong, "imports that do not point down the layers:\n" + "\n".join(sorted(wrong))


def test_the_library_never_imports_the_lab():
    """What a user imports (everything but the lab and the command line above it) has no import of mlatr.lab."""
    above = ("mlatr.lab", "mlatr.commands", "mlatr.cli", "mlatr.__main__")
    modules = _modules()
    assert any(m.startswith("mlatr.lab.") for m in modules)
    wrong = [f"{mod} imports {target}" for mod, targets in _edges(modules).items()
             if mod != "mlatr" and not mod.startswith(above) for target in targets if target.startswith("mlatr.lab")]
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_circle_between_modules():
    edges = _edges(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_walk_sees_lazy_imports_and_skips_type_checking_ones():
    tree = ast.parse("import mlatr.a\nif TYPE_CHECKING:\n    import mlatr.b\ndef f():\n    from mlatr.c import d\n")
    assert [ast.unparse(n) for n in _imports(tree)] == ["import mlatr.a", "from mlatr.c import d"]


def test_the_walk_resolves_relative_imports_and_reads_lazy_maps(tmp_path):
    init = tmp_path / "__init__.py"
    tree = ast.parse("from . import errors\nfrom .search import index\n")
    assert [_resolved("mlatr", init, n) for n in _imports(tree)] == ["mlatr", "mlatr.search"]
    assert _resolved("mlatr.search.index", tmp_path / "index.py", _imports(ast.parse("from ..data import x"))[0]) \
        == "mlatr.data"
    lazy = ast.parse('_LAZY = {"a": ("mlatr.search.index", "Index"), "b": "mlatr.search.build"}\n')
    assert _lazy_targets(lazy) == ["mlatr.search.index", "mlatr.search.build"]
