"""The clock watch: steps of the wall clock between two rounds (NTP, a VM resumed), told apart from
time passing by the monotonic clock. Reads injected clocks, so tests drive it with fakes."""

from __future__ import annotations

from collections.abc import Callable

from .ticker import CLOCK_JUMP_S


class ClockWatch:
    """Compares the wall clock with the monotonic clock from one round to the next."""

    def __init__(self, wall: Callable[[], float], monotonic: Callable[[], float], jump_s: float = CLOCK_JUMP_S) -> None:
        self.wall = wall
        self.monotonic = monotonic
        self.jump_s = jump_s
        self._mark: tuple[float, float] | None = None

    def step(self) -> float | None:
        """Seconds the wall clock was stepped since the last call, when beyond `jump_s`; else None."""
        wall, mono = self.wall(), self.monotonic()
        mark, self._mark = self._mark, (wall, mono)
        if mark is None:
            return None
        step = (wall - mark[0]) - (mono - mark[1])
        return step if abs(step) > self.jump_s else None
