"""Shared fixtures: where the real traces are, and a builder for small hand-written traces."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/ on sys.path: the shared helpers are the package `support` (tests/support/)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.paths import HTA, ROOT, SHARED_TRACES

__all__ = ["HTA", "ROOT", "SHARED_TRACES"]


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.fail(f"the shared traces are missing: {SHARED_TRACES} (set WARPWATCH_SHARED_TRACES)")
    return SHARED_TRACES
