"""A clock of the test's: it reads what the test last set, so that a source's waits and
deadlines follow the test's plan, not how fast a loaded machine runs it."""

from __future__ import annotations


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
