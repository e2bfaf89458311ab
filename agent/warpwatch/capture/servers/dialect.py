"""What differs between the profiling servers (`Dialect`), and the back-off every source shares
(`Backoff`): a dialect's checks before a start report through it."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

from .. import CapturedWindow
from .client import Reply, ServerClient
from .options import ServerOptions
from .session import Session

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


class Dialect:
    """One server's requests and trace names. The defaults are a server whose stop answers once
    its workers have written their traces, and whose every start may be sent."""

    requests_before_start = 0
    """Requests `before_start` may send (each with its retries)."""

    def before_start(self, client: ServerClient, options: ServerOptions, backoff: Backoff) -> CapturedWindow | None:
        """A refusal (a failed window from `backoff`) when starting now is not safe, else None."""
        return None

    def start_body(self) -> bytes | None:
        return None

    def stop_body(self) -> bytes | None:
        return None

    def refusal_reason(self, reply: Reply) -> str | None:
        """A `sourcestats.SKIP_REASONS` entry when a refused start means the window was skipped on purpose."""
        return None

    def stop_waits_for_files(self) -> bool:
        """Whether `/stop_profile` answers only after every rank has written its trace."""
        return True

    def expected(self, expected_files: int | None) -> int | None:
        """Worker files one window should give: `expected_files` (the source's setting), else what
        the server reports."""
        return expected_files

    def step_bounded(self) -> bool:
        """Whether a window is a profile the server ends by itself (never sent a stop)."""
        return False

    def session_filter(self) -> Callable[[str], bool] | None:
        """Which trace names a step-bounded session may own (None: any)."""
        return None

    def late_filter(self, session: Session) -> Callable[[str], bool] | None:
        """Which names may still be `session`'s once its window is over (None: any new one). A
        server whose file names carry the session's id narrows it: a person's profile written
        into the same folder meanwhile is not taken (nor deleted)."""
        return session.accept

    def is_trace_name(self, name: str) -> bool:
        raise NotImplementedError

    def is_worker_trace(self, name: str) -> bool:
        """Whether a trace file is a worker's (with kernels), not the server front end's."""
        return True

    def labels_for(self, name: str) -> dict[str, str]:
        raise NotImplementedError

    def enable_hint(self) -> str:
        """How to turn the server's profiler on, with the folder the agent reads."""
        raise NotImplementedError

    def inspect_windows(
        self, source: str, trace_dir: Path, windows: list[CapturedWindow], files: Mapping[str, int]
    ) -> None:
        """Sees each round's windows (and the trace files counted by kind) before the service does."""
