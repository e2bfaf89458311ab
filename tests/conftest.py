"""Shared fixtures: where the real traces are, and a builder for small hand-written traces."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHARED_TRACES = Path(os.environ.get("WARPWATCH_SHARED_TRACES", ROOT.parent / "shared" / "traces"))
HTA = SHARED_TRACES / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.fail(f"the shared traces are missing: {SHARED_TRACES} (set WARPWATCH_SHARED_TRACES)")
    return SHARED_TRACES
