"""The packages of mlatr import downwards only: the layers docs/architecture.md orders ("Layers"), and no
import circle between modules.

Every import of the sources is read (those inside functions too: a lazy import is still a dependency),
except those under ``if TYPE_CHECKING:``, which only annotate.
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


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the mlatr modules it imports (``from P import name``: the module ``P.name`` when there is
    one, else ``P``)."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level or not (node.module or "").startswith("mlatr"):
                    continue
                names = [f"{node.module}.{a.name}" for a in node.names]
                edges[mod].update(n if n in modules else node.module for n in names)
            else:
                edges[mod].update(a.name for a in node.names if a.name.startswith("mlatr"))
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
