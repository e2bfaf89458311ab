"""Signals: each of `STOP_SIGNALS` stops the agent cleanly."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from ..logs import event

log = logging.getLogger("warpwatch.service")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Each stops the agent cleanly (exit status 0). SIGHUP too: the agent reads its settings once,
at start, so a "reload" is a restart, which the supervisor (Kubernetes, systemd) then does; before,
SIGHUP's default action killed the process without a log line and left the daemon's socket file."""


@contextmanager
def handle_signals(stop: threading.Event) -> Iterator[None]:
    """`STOP_SIGNALS` set `stop` while inside (main thread only); previous handlers restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        event(log, "signal", name=signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
