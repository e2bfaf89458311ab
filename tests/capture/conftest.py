"""Fixtures shared by the tests of tests/capture/: trace folders (one empty, one outside it) and the
vLLM/SGLang stand-ins."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import CONTROL
from support.engines.threaded import StandIn
from support.patience import HANG_GUARD_S
from warpwatch.capture.daemon import serve
from warpwatch.capture.daemon.window import Window


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


@pytest.fixture
def lockstep_replies(monkeypatch: pytest.MonkeyPatch) -> None:
    """For fake Kineto clients that send one datagram and wait for its reply before the next:
    the agent's reply deadline (`wire.REPLY_DEADLINE_S`, 50 ms) is for a real client, which stops
    waiting and would read a late reply as the answer to its next poll. A lockstep client waits
    however long the agent takes, so on a loaded machine a reply dropped as late would only fail
    the test with a timeout (issue 38: test_one_shot_senders... under stress-ng). The deadline
    itself is tested with a stalled agent and a real client (test_daemon_replies)."""
    monkeypatch.setattr(serve, "REPLY_DEADLINE_S", HANG_GUARD_S)


@pytest.fixture
def opened_windows(monkeypatch: pytest.MonkeyPatch) -> list[Window]:
    """The kineto-daemon windows opened while the test runs, in order (`Window.open` recorded):
    a window is in the list once its source's `capture` has opened it, before any poll is
    answered from it."""
    opened: list[Window] = []
    real_open = Window.open

    def recording(*args: Any, **kwargs: Any) -> Window:
        window = real_open(*args, **kwargs)
        opened.append(window)
        return window

    monkeypatch.setattr(Window, "open", recording)
    return opened
