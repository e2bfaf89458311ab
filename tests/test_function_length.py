"""No function of the package is longer than 60 lines, outside the generated-dashboard code
(`dashboards/`) and the port of CUDA's occupancy calculator (`analysis/cudaocc.py`), which follow
their originals."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agent" / "warpwatch"
MAX_LINES = 60
EXEMPT = ("dashboards/", "analysis/cudaocc.py")


def long_functions(root: Path = PACKAGE, limit: int = MAX_LINES) -> list[str]:
    """`path:line name (n lines)` for every function or method over `limit` lines, decorators
    and docstring included."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(EXEMPT):
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - start + 1
                if lines > limit:
                    found.append(f"{rel}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_60_lines() -> None:
    assert long_functions() == []


if __name__ == "__main__":
    print("\n".join(long_functions()) or "none")
