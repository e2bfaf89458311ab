"""Fixtures shared by the tests of tests/analysis/."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.cudaocc import (
    DRIVER_SOURCE,
    GXX,
    HEADER_DIR,
)


@pytest.fixture(scope="session")
def occ_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver, compiled once per session."""
    assert GXX is not None and HEADER_DIR is not None
    binary = tmp_path_factory.mktemp("cuda_occ") / "occ_driver"
    subprocess.run(
        [
            GXX,
            "-O1",
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{HEADER_DIR}",
            str(DRIVER_SOURCE),
            "-o",
            str(binary),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return binary
