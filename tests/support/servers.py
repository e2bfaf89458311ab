"""Helpers of tests/capture/test_servers.py and test_servers_faults.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.engines.threaded import SglangStandIn, StandIn, VllmStandIn
from warpwatch.capture import CapturedWindow

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
