"""The compiled hot paths, each optional: `trace/_gpuscan.c` (the reader's skimming) and
`_windowmath.c` (the per-launch loops of the analysis, `windowmath.py`). setup.py builds them where a C compiler
is found; each has a Python twin that gives the same results (tests/trace/test_gpuscan.py,
tests/analysis/test_windowmath.py) and runs where the module is missing, or everywhere when
WARPWATCH_PURE_PYTHON=1."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

ENABLED = os.environ.get("WARPWATCH_PURE_PYTHON", "") in ("", "0")


def load(name: str) -> ModuleType | None:
    """The compiled module `name`, or None (not built, or WARPWATCH_PURE_PYTHON=1)."""
    if not ENABLED:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


MODULES = ("warpwatch.trace._gpuscan", "warpwatch.analysis._windowmath")


def describe() -> str:
    """For the agent's start line: which compiled modules are in use ("all", "none (...)", or the
    list), so that an image or install that reads traces in pure Python is seen at once."""
    loaded = [name.rsplit(".", 1)[1] for name in MODULES if load(name) is not None]
    if len(loaded) == len(MODULES):
        return "all"
    if not ENABLED:
        return "none (WARPWATCH_PURE_PYTHON=1)"
    return ",".join(loaded) if loaded else "none (not built: no C compiler at install)"
