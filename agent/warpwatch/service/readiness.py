"""Readiness, what /readyz answers: are rounds finishing on time? Reads an injected clock, so tests
drive it with a fake (the wall clock's steps are `clockwatch`)."""

from __future__ import annotations

from collections.abc import Callable

from ..config.table import Config

READY_SLACK_S = 10.0
"""Beyond period + jitter + window + collect_timeout, how late a round may finish and /readyz stay 200."""


class Readiness:
    """(ready, reason) for /readyz from when the service started and when its last round finished."""

    def __init__(
        self,
        config: Config,
        monotonic: Callable[[], float],
        slack_s: float = READY_SLACK_S,
        period: Callable[[], float] | None = None,
    ) -> None:
        self.extra_s = config.jitter + config.window + config.collect_timeout + slack_s
        self.period_now = period or (lambda: config.period)
        """The period in force (stretched by the overhead budget)."""
        self.monotonic = monotonic
        self.started_at: float | None = None
        self.last_round_end: float | None = None

    @property
    def slack_s(self) -> float:
        """How long after the start or the last round the next round may finish."""
        return self.period_now() + self.extra_s

    def started(self) -> None:
        """The service has started: the first round is due within `slack_s` from now."""
        self.started_at = self.monotonic()

    def round_finished(self) -> None:
        self.last_round_end = self.monotonic()

    def check(self, stopping: bool) -> tuple[bool, str]:
        if stopping:
            return False, "shutting down"
        now = self.monotonic()
        if self.last_round_end is None:
            started = self.started_at if self.started_at is not None else now
            if now - started <= self.slack_s:
                return True, "no window expected yet"
            return False, f"no round finished in the {now - started:.0f}s since start"
        age = now - self.last_round_end
        if age <= self.slack_s:
            return True, f"last round finished {age:.0f}s ago"
        return False, f"last round finished {age:.0f}s ago (expected every {self.period_now():g}s)"
