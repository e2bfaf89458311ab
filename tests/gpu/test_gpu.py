"""GPU checks: run only where an NVIDIA GPU is present (`pytest -m gpu tests/gpu`); deselected in CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.gpu
def test_daemon_attach_exports_corrected_metrics_for_a_2_to_the_31_block_grid() -> None:
    result = subprocess.run(
        [sys.executable, str(HERE / "gpu_daemon_check.py")], capture_output=True, text=True, timeout=300
    )
    print(result.stdout[-6000:], result.stderr[-3000:])
    assert result.returncode == 0
