"""A round's captures: every source's `capture()` side by side, each in its own daemon thread, all
bounded by one deadline. A source whose capture has not returned by then gives a `timed_out` window,
and is skipped by later rounds until it returns (one capture per source at a time). At shutdown,
`release` ends every source: what it has in flight within the time left, then `close`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..capture import CapturedWindow, Source
from ..logs import event

log = logging.getLogger("warpwatch.service")

CAPTURE_GRACE_S = 5.0
"""Beyond window + collect_timeout (+ the source's stated overhead), how long a round waits for a capture."""


class CaptureFanout:
    """Runs the captures of one round (`capture`); remembers which sources are still busy."""

    def __init__(self, *, grace_s: float = CAPTURE_GRACE_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.grace_s = grace_s
        self.monotonic = monotonic
        self._busy: set[Source] = set()
        self._lock = threading.Lock()

    def busy(self, source: Source) -> bool:
        """Whether `source`'s last capture has not returned yet."""
        with self._lock:
            return source in self._busy

    def bound(self, sources: Sequence[Source], window_s: float, timeout_s: float) -> float:
        """How long a round waits for its captures."""
        return window_s + timeout_s + self.grace_s + max((s.capture_overhead_s for s in sources), default=0.0)

    def capture(
        self,
        sources: Sequence[Source],
        window_s: float,
        fixed_window_s: float,
        timeout_s: float,
        on_busy: Callable[[Source], None] = lambda source: None,
    ) -> list[CapturedWindow]:
        """Every source's windows, in source order. Sources whose windows the agent times
        (`Source.windows_timed_by`) get `window_s`, the others `fixed_window_s`; a source still busy is
        skipped (`on_busy`)."""
        out: dict[int, list[CapturedWindow]] = {}
        threads: list[threading.Thread] = []
        started: set[int] = set()
        for i, src in enumerate(sources):
            with self._lock:
                if src in self._busy:
                    on_busy(src)
                    continue
                self._busy.add(src)
            started.add(i)
            window = window_s if src.windows_timed_by == "agent" else fixed_window_s
            event(log, "capture_started", logging.DEBUG, source=src.name, window_s=window)
            t = threading.Thread(
                target=self._one, args=(src, window, timeout_s, out, i), name=f"warpwatch-capture-{i}", daemon=True
            )
            t.start()
            threads.append(t)
        bound = self.bound(sources, max(window_s, fixed_window_s), timeout_s)
        deadline = self.monotonic() + bound
        for t in threads:
            t.join(max(0.0, deadline - self.monotonic()))
        windows: list[CapturedWindow] = []
        for i, src in enumerate(sources):
            if i in out:
                windows.extend(out[i])
            elif i in started:
                windows.append(
                    CapturedWindow(
                        source=src.name,
                        path=None,
                        outcome="timed_out",
                        error=f"capture did not return within {bound:g}s",
                    )
                )
        return windows

    def _one(
        self, src: Source, window_s: float, timeout_s: float, out: dict[int, list[CapturedWindow]], i: int
    ) -> None:
        try:
            out[i] = src.capture(window_s, timeout_s)
        except Exception as exc:
            out[i] = [
                CapturedWindow(
                    source=src.name,
                    path=None,
                    outcome="failed",
                    failure="raised",
                    error=f"capture raised {type(exc).__name__}: {exc}",
                )
            ]
        finally:
            with self._lock:
                self._busy.discard(src)


def release(sources: Sequence[Source], seconds: float) -> None:
    """Each source's `finish` with what is left of `seconds` (a window still being written), then
    its `close`; a source that fails either is logged and the others still end."""
    deadline = time.monotonic() + seconds
    for src in sources:
        try:
            try:
                src.finish(max(0.0, deadline - time.monotonic()))
            finally:
                src.close()
        except Exception as exc:
            event(log, "source_close_failed", logging.WARNING, source=src.name, error=str(exc))
