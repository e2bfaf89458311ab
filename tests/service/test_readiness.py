"""Readiness over time (`service.readiness`), driven by a fake clock."""

from __future__ import annotations

from warpwatch.config.table import Config
from warpwatch.service.readiness import Readiness


def test_readiness_allows_one_slack_after_the_start_and_after_each_round() -> None:
    now = [1000.0]
    config = Config(source=("stub:1",), period=60.0, window=1.0, jitter=5.0, collect_timeout=30.0)
    ready = Readiness(config, lambda: now[0], slack_s=10.0)
    assert ready.slack_s == 60 + 5 + 1 + 30 + 10
    ready.started()
    now[0] += 106
    assert ready.check(stopping=False) == (True, "no window expected yet")
    now[0] += 1
    assert ready.check(stopping=False) == (False, "no round finished in the 107s since start")
    ready.round_finished()
    assert ready.check(stopping=False) == (True, "last round finished 0s ago")
    now[0] += 200
    assert ready.check(stopping=False) == (False, "last round finished 200s ago (expected every 60s)")
    assert ready.check(stopping=True) == (False, "shutting down")
