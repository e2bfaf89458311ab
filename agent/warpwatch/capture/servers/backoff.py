"""The back-off every profiling-server source shares: the wait after a failed window (doubling up
to a cap), and the windows not opened on purpose, counted by reason. A dialect's checks before a
start (`Dialect.before_start`) report their refusals through it."""

from __future__ import annotations

import logging
from collections import Counter

from .. import CapturedWindow
from .options import ServerOptions

log = logging.getLogger("warpwatch.capture.servers")


class Backoff:
    """The wait after a failed window (`backoff_s`, doubling up to `max_backoff_s`), and the
    windows not opened on purpose, counted by reason (`sourcestats.SKIP_REASONS`)."""

    def __init__(self, options: ServerOptions) -> None:
        self.name = options.label
        self.backoff_s = options.backoff_s
        self.max_backoff_s = options.max_backoff_s
        self._clock = options.clock
        """The source's clock: the back-off is measured on it."""
        self.skipped: Counter[str] = Counter()
        self._failures = 0
        self._until = 0.0
        self._disabled_logged = False
        self._unhealthy = False

    def waiting(self) -> bool:
        """Whether the source is backing off now (logged)."""
        now = self._clock.now()
        if now < self._until:
            log.debug("%s: backing off, next try in %.0f s", self.name, self._until - now)
            return True
        return False

    def over(self) -> bool:
        """Whether the back-off has run out (or none is under way)."""
        return self._clock.now() >= self._until

    def healthy(self) -> None:
        """A window went through: no back-off now."""
        if self._unhealthy:
            log.info("%s: profiling endpoints answer again", self.name)
        self._failures = 0
        self._until = 0.0
        self._unhealthy = False

    def fail(self, message: str, *, disabled: bool = False) -> CapturedWindow:
        """A failed window (logged), and a longer wait before the next one."""
        delay = min(self.max_backoff_s, self.backoff_s * (2**self._failures))
        self._failures = min(self._failures + 1, 60)
        self._until = self._clock.now() + delay
        self._unhealthy = True
        if disabled:
            if not self._disabled_logged:
                log.warning("%s: %s Skipping windows; next try in %.0f s.", self.name, message, delay)
                self._disabled_logged = True
            else:
                log.debug("%s: still disabled; next try in %.0f s", self.name, delay)
        else:
            log.warning("%s: %s; next try in %.0f s", self.name, message, delay)
        return CapturedWindow(source=self.name, path=None, error=message, outcome="failed")

    def refuse(self, reason: str, message: str) -> CapturedWindow:
        """A window skipped on purpose (`sourcestats.SKIP_REASONS`): counted, logged, backed off."""
        self.skipped[reason] += 1
        return self.fail(message)

    def skip(self, reason: str, why: str) -> None:
        """No window this round, on purpose (counted, logged; no back-off)."""
        self.skipped[reason] += 1
        log.info("%s: no window this round: %s", self.name, why)
