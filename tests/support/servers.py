"""Helpers of tests/capture/test_servers.py and test_servers_faults.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from support.engines.threaded import SglangStandIn, StandIn, VllmStandIn
from support.patience import hang_guard
from warpwatch.capture import CapturedWindow
from warpwatch.capture.servers.clock import WindowClock

LOGGER = "warpwatch.capture.servers"


TOKEN = "s3cret-t0ken-value"


FAST = {"poll_interval_s": 0.05, "retry_pause_s": 0.05, "request_timeout_s": 5.0}


def _vllm(standins: list[StandIn], trace_dir: Path, **kw: Any) -> VllmStandIn:
    s = VllmStandIn(trace_dir, **kw)
    standins.append(s)
    return s


def _sglang(standins: list[StandIn], trace_dir: Path, **kw: Any) -> SglangStandIn:
    s = SglangStandIn(trace_dir, **kw)
    standins.append(s)
    return s


def _ok(windows: list[CapturedWindow]) -> list[CapturedWindow]:
    return [w for w in windows if w.path is not None]


class PatientClock(WindowClock):
    """A source's clock for the tests whose budgets are short (issue 38): it moves only while the
    source lets time pass (`sleep`: the window, a poll's interval, a retry's pause), by what it
    asked and after really waiting that long, or when the test moves it (`advance`, where the test
    would sleep). While the source awaits the server's answer it stands still and waits for the
    answer itself, up to `hang_guard()`.

    On the real clock a 0.3-s budget also pays for the stand-in's stop (it gzips the ranks' traces
    before it answers) and for the agent's own work: a starved test process once found no file of
    a rank that was there (run 2 of session 32). Here the budget counts the source's polls only,
    so a slow machine makes the test longer, never its windows different. Tests of what a slow
    server does to a window keep the real clock (tests/capture/test_servers.py)."""

    def __init__(self) -> None:
        self._t = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._t += seconds

    def sleep(self, interrupt: threading.Event, seconds: float) -> bool:
        if interrupt.wait(max(0.0, seconds)):
            return True
        self.advance(max(0.0, seconds))
        return interrupt.is_set()

    def await_answer(self, answered: threading.Event, seconds: float) -> bool:
        return answered.wait(hang_guard(seconds))
