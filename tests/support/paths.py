"""Where things are: the checkout, and the real traces recorded by others (../shared/traces)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED_TRACES = Path(os.environ.get("WARPWATCH_SHARED_TRACES") or ROOT.parent / "shared" / "traces")
HTA = SHARED_TRACES / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data"

MISSING = (
    f"the shared traces are missing: {SHARED_TRACES}. They are the corpus of public Kineto traces the tests "
    "read (HolisticTraceAnalysis', Kineto's and PARAM's test traces; sources and licences in its SOURCES.md), "
    "kept beside the clone as ../shared/traces. Get it as docs/development.md says ('Running the tests'), or set "
    "WARPWATCH_SHARED_TRACES to where it is."
)


def corpus_bytes(relative: str) -> bytes:
    """A corpus file's bytes (read by modules at import): the clear message when it is missing."""
    import pytest

    path = SHARED_TRACES / relative
    if not path.is_file():
        raise pytest.UsageError(f"{MISSING} (missing file: {relative})")
    return path.read_bytes()
