"""Readiness over time and clock steps (`service.health`), driven by fake clocks."""

from __future__ import annotations

from warpwatch.config import Config
from warpwatch.service.health import ClockWatch, Readiness


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


def test_a_step_of_the_wall_clock_is_told_apart_from_time_passing() -> None:
    wall, mono = [5000.0], [10.0]
    watch = ClockWatch(lambda: wall[0], lambda: mono[0], jump_s=1.0)
    assert watch.step() is None  # the first look only marks
    wall[0] += 30
    mono[0] += 30
    assert watch.step() is None
    wall[0] += 3600 + 30
    mono[0] += 30
    assert watch.step() == 3600.0
    wall[0] -= 0.5
    assert watch.step() is None  # within jump_s
