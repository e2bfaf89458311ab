"""No function of the package is longer than 60 lines, outside the port of CUDA's occupancy
calculator (`analysis/cudaocc.py`), which follows its original. Run as a script, it lists the
functions over the limit."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agent" / "warpwatch"
MAX_LINES = 60
EXEMPT = ("analysis/cudaocc.py",)
LONG_FOR_NOW: frozenset[str] = frozenset()
"""Functions known to be longer, each to be split (none now)."""


def long_functions(limit: int = MAX_LINES, allowed: frozenset[str] = LONG_FOR_NOW) -> list[str]:
    """`path name (n lines)` for every function or method over `limit` lines (decorators and
    docstring included), but those in `allowed` (`path name`)."""
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(EXEMPT):
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - start + 1
                if lines > limit and f"{rel} {node.name}" not in allowed:
                    found.append(f"{rel} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_60_lines() -> None:
    assert long_functions() == []


def test_the_functions_known_to_be_long_still_are() -> None:
    """An entry of `LONG_FOR_NOW` goes once its function is split."""
    assert {entry.rsplit(" (", 1)[0] for entry in long_functions(allowed=frozenset())} == LONG_FOR_NOW


if __name__ == "__main__":
    print("\n".join(long_functions(allowed=frozenset())) or "none")
