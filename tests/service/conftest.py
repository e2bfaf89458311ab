"""Fixtures shared by the tests of tests/service/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.tracebuild import kernel, span, trace_doc


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ~25 MB trace (80,000 launches of 200 kernels): seconds of reading and analysis."""
    n = 80_000
    events = [span(0, n * 10 + 100)] + [
        kernel(
            f"void heavy_kernel_{i % 200}<float, {i % 7}>(float*, int)",
            ts=10 + i * 10,
            dur=5,
            grid=(i % 5000 + 1, 1, 1),
        )
        for i in range(n)
    ]
    path = tmp_path_factory.mktemp("big") / "big.json"
    path.write_bytes(json.dumps(trace_doc(events)).encode())
    assert path.stat().st_size > 20_000_000
    return path
