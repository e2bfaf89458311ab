"""Shared fixtures: where the real traces are, and a builder for small hand-written traces."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHARED_TRACES = Path(os.environ.get("WARPWATCH_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
HTA = SHARED_TRACES / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data"


MISSING = (
    f"the shared traces are missing: {SHARED_TRACES}. They are the corpus of public Kineto traces the tests "
    "read (HolisticTraceAnalysis', Kineto's and PARAM's test traces; sources and licences in its SOURCES.md), "
    "kept beside the clone as ../shared/traces. Get it as the README says ('Running the tests'), or set "
    "WARPWATCH_SHARED_TRACES to where it is."
)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Without the corpus, one clear message instead of collection errors and failures by the hundred."""
    if not SHARED_TRACES.is_dir():
        raise pytest.UsageError(MISSING)


def corpus_bytes(relative: str) -> bytes:
    """A corpus file's bytes (read by modules at import): the clear message when it is missing."""
    path = SHARED_TRACES / relative
    if not path.is_file():
        raise pytest.UsageError(f"{MISSING} (missing file: {relative})")
    return path.read_bytes()


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.fail(MISSING)
    return SHARED_TRACES
