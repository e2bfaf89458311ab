"""The benchmarks' command lines start in a venv made from pyproject.toml: every third-party module
benchmarks/ imports when a script loads (what `--help` needs) is declared, in the core dependencies
or in the `bench` (or `torch`) extra, and `dev` brings `bench`. Imports inside functions are left
out: they load one optional comparison when it runs (atheris, a dev dependency; orjson and HTA,
which run in benchmarks/.venv-hta)."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

import tomllib

from support.paths import ROOT

BENCHMARKS = ROOT / "benchmarks"
LOCAL = {"warpwatch", "support"}
"""Modules the benchmarks import from this checkout (the package, tests/support)."""


def project() -> dict[str, object]:
    doc: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return doc


def names(requirements: object) -> set[str]:
    """The distribution names of a list of requirement strings, normalised (PEP 503)."""
    assert isinstance(requirements, list)
    return {re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]).lower() for r in requirements}


def loaded(node: ast.AST) -> Iterator[ast.AST]:
    """The statements run when a module loads: all but the bodies of functions."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield child
            yield from loaded(child)


def third_party_imports() -> dict[str, Path]:
    """Each top-level module benchmarks/ imports as a script loads, neither the standard library nor
    its own."""
    own = {p.stem for p in BENCHMARKS.rglob("*.py")} | {p.name for p in BENCHMARKS.rglob("*") if p.is_dir()}
    found: dict[str, Path] = {}
    for path in sorted(BENCHMARKS.rglob("*.py")):
        for node in loaded(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in own | LOCAL:
                    found.setdefault(top, path)
    return found


def test_every_third_party_module_the_benchmarks_import_is_declared() -> None:
    meta = project()
    extras = meta["optional-dependencies"]
    assert isinstance(extras, dict)
    declared = names(meta["dependencies"]) | names(extras["bench"]) | names(extras["torch"])
    installed = packages_distributions()
    imports = third_party_imports()
    assert "psutil" in imports  # benchmarks/overheadkit/watch.py: the agent's CPU and memory
    for module, path in imports.items():
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in installed.get(module, [module])}
        assert dists & declared, f"{path.relative_to(ROOT)} imports {module}: declare it in the `bench` extra"


def test_the_dev_extra_brings_the_bench_extra() -> None:
    extras = project()["optional-dependencies"]
    assert isinstance(extras, dict)
    assert "warpwatch[bench]" in extras["dev"]
