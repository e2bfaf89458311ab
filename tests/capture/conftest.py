"""Fixtures shared by the tests of tests/capture/: trace folders (one empty, one outside it) and the
vLLM/SGLang stand-ins."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.agent import CONTROL
from support.engines.threaded import StandIn


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


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    d = tmp_path / "profiles"
    d.mkdir()
    return d


@pytest.fixture
def standins() -> Iterator[list[StandIn]]:
    made: list[StandIn] = []
    yield made
    for s in made:
        s.close()
