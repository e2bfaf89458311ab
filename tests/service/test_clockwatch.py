"""Steps of the wall clock between rounds (`service.clockwatch`), driven by fake clocks."""

from __future__ import annotations

from warpwatch.service.clockwatch import ClockWatch


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
