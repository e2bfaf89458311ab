"""No import circle between warpwatch's modules, in any sub-package.

Every import statement of every module counts: at the top, inside functions, under
`if TYPE_CHECKING:`. Relative imports are resolved; `from P import name` leads to the module
P.name when there is one, else to P. Importing a module also runs its packages' `__init__`, but
that edge is left out: a package whose `__init__` gathers its own modules is no circle.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from support.paths import ROOT

PACKAGE = ROOT / "agent" / "warpwatch"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(package: str, source: str, known: Collection[str]) -> Iterator[str]:
    """The modules in `known` that `source` imports anywhere in its code; `package`: the package
    its relative imports start from (the module's, or the module itself for an `__init__`)."""
    for node in statements(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    yield f"{base}.{alias.name}"
                elif base in known:
                    yield base


def statements(node: ast.AST) -> Iterator[ast.AST]:
    """Every statement inside `node`, at any depth (functions, classes, if/try/with bodies);
    expressions are not entered: no import statement is inside one."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt | ast.excepthandler | ast.match_case):
            yield child
            yield from statements(child)


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: set(imported(package_of(name, path), path.read_text(encoding="utf-8"), known)) - {name}
        for name, path in known.items()
    }


def package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_walk_sees_imports_in_functions_and_type_checking_blocks() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    sources = {
        "warpwatch.x": "def f():\n    from .y import g\n",
        "warpwatch.y": "if TYPE_CHECKING:\n    import warpwatch.x\n",
    }
    edges = {name: set(imported("warpwatch", src, sources)) for name, src in sources.items()}
    assert circles(edges) == [["warpwatch.x", "warpwatch.y"]]


@pytest.mark.slow  # parses every module of the package: about 0.5 s on 2 cores
def test_no_module_of_warpwatch_is_in_an_import_circle() -> None:
    graph = import_graph()
    assert "warpwatch.serving.tls" in graph["warpwatch.serving.connection"]  # relative, in a sub-package
    assert "warpwatch.export.metricdefs" in graph["warpwatch.dashboards.ruletests"]  # `from ..export import md`
    assert "warpwatch.dashboards.queries" in graph["warpwatch.dashboards.ruletests_recording"]  # `from . import q`
    found = circles(graph)
    assert not found, "modules importing each other (directly or around a circle): " + "; ".join(map(", ".join, found))
