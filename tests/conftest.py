"""Shared fixtures: where the real traces are (tests/support/paths.py), and a clear stop without them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/ on sys.path: the shared helpers are the package `support` (tests/support/)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.paths import MISSING, SHARED_TRACES


def pytest_sessionstart(session: pytest.Session) -> None:
    """Without the corpus, one clear message instead of collection errors and failures by the hundred."""
    if not SHARED_TRACES.is_dir():
        raise pytest.UsageError(MISSING)


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.fail(MISSING)
    return SHARED_TRACES
