"""`warpwatch run` on a real GPU (`pytest -m gpu tests/gpu`); deselected by default (`-m "not gpu"`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.gpu
def test_the_agent_exports_kernel_and_nvml_metrics_on_a_gpu() -> None:
    result = subprocess.run(
        [sys.executable, str(HERE / "run_agent_gpu.py")], capture_output=True, text=True, timeout=600
    )
    print(result.stdout[-8000:], result.stderr[-3000:])
    assert result.returncode == 0
