"""Capture: where windows come from.

A *source* turns "open a window now" into zero or more finished trace files. The service
calls `Source.capture()` once per scheduled window (never concurrently), analyses every
`CapturedWindow` it returns, and calls `CapturedWindow.done()` afterwards so the source can
delete or forget the file. Sources never analyse and never touch Prometheus.

To add a source: implement the `Source` protocol in a module of this package and register
its spec prefix in `warpwatch.capture.registry.build_source`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..model import Outcome

__all__ = ["CapturedWindow", "Outcome", "Source", "SourceStats", "capture_overhead_s"]


@dataclass(frozen=True)
class CapturedWindow:
    """One trace produced for one window, or the reason none came.

    `path` is None when the window failed before a file existed; `error` then says why and
    `outcome` is "failed" or "timed_out". `requested` is the capture interval the source asked
    for, as Unix epoch microseconds, used when the trace has no `Trace` span event.
    `labels` carries `process`/`rank` and similar identities of the traced process.
    """

    source: str
    path: Path | None
    labels: dict[str, str] = field(default_factory=dict)
    requested: tuple[float, float] | None = None
    error: str | None = None
    outcome: Outcome | None = None
    on_done: Callable[[bool], None] | None = None
    """Called with True when the window was analysed (any outcome), so the source may delete it."""

    def done(self, processed: bool = True) -> None:
        if self.on_done is not None:
            self.on_done(processed)


@dataclass(frozen=True)
class SourceStats:
    """What a source counts about its peers, for the agent's own metrics (`selfmetrics`). A source
    reports it with an optional `stats()` method; the kineto-daemon source does."""

    clients: int
    clients_seen: int
    dropped: dict[str, int] = field(default_factory=dict)
    """Datagrams dropped unanswered by reason (malformed)."""
    replies_dropped: dict[str, int] = field(default_factory=dict)
    """Replies not sent by reason (stale, send_failed, unsafe_address)."""
    evicted: dict[str, int] = field(default_factory=dict)
    """Clients dropped from the registry by reason (registry_full, undeliverable)."""


def capture_overhead_s(source: object) -> float:
    """Seconds a source's capture may take beyond `window_s + timeout_s` (e.g. the Kineto daemon's
    start lead and poll wait, an HTTP server's start/stop requests). A source states it with an
    optional `capture_overhead_s` attribute or property; without one it is 0."""
    value = getattr(source, "capture_overhead_s", 0.0)
    return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0


@runtime_checkable
class Source(Protocol):
    """Where windows come from. One instance per `--source` spec."""

    name: str
    """The spec as the user wrote it (used in logs and metrics)."""

    def start(self) -> None:
        """Acquire resources (bind sockets, check folders). Raise CaptureError to refuse."""

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        """Open one window of `window_s` seconds and return what it produced.

        Blocks at most about `window_s + timeout_s + capture_overhead_s(source)`. Returns [] when
        nothing is there yet.
        Must not raise for expected failures: return a CapturedWindow with `error` set.
        """

    def close(self) -> None:
        """Release everything; called once at shutdown, possibly from another thread."""
