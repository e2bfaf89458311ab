"""Helpers of tests/capture/test_dirsource.py and test_registry.py."""

from __future__ import annotations

import os
from pathlib import Path

from support.paths import HTA
from warpwatch.capture import CapturedWindow

CONTROL = HTA / "trace_diff/control/control.json.gz"


ALEXNET = HTA / "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def names(windows: list[CapturedWindow]) -> list[str]:
    return [w.path.name for w in windows if w.path is not None]


def set_mtime(path: Path, seconds: int) -> None:
    os.utime(path, ns=(seconds * 10**9, seconds * 10**9))
