"""Fixtures shared by the tests of tests/capture/: an empty trace folder, and one outside it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from support.agent import CONTROL


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    return d


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    shutil.copy(CONTROL, d / "secret.json.gz")
    return d
