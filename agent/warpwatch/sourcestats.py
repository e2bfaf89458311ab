"""What a source counts about itself and its peers: one shape for every source.

Below both `capture` (the sources fill it in, `Source.stats()`) and `export` (`selfmetrics` turns
it into the agent's own metrics), so that neither imports the other: a source names no metric,
and the exporter knows no source class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FILE_KINDS", "SKIP_REASONS", "SourceStats"]

SKIP_REASONS = ("unsafe_request", "profile_in_use", "previous_flush_pending", "session_pending")
"""Why a server source (vllm, sglang) opened no window: the server's version cannot be profiled
without risk; someone else's profile runs; the last window's traces are still being written or its
stop is unanswered; a step-bounded profile still waits for requests."""
FILE_KINDS = ("worker", "late", "cpu_only", "abandoned", "leftover")
"""Trace files a server source found, by kind: handed over in their window; handed over after their
window timed out; a CPU-only trace of the server's front end (deleted unread); never completed,
given up; an earlier run's session, written after that agent exited (claimed: deleted unread)."""


@dataclass(frozen=True)
class SourceStats:
    """Counts since start, read at each scrape. A source fills in the parts it keeps; the others
    stay at their defaults, and the metrics of a part no source keeps are not exported."""

    clients: int | None = None
    """Peers registered now (the kineto-daemon source's Kineto clients); None for a source
    without peers, which then exports none of the client and datagram counts below."""
    clients_seen: int = 0
    """Peers that ever registered (new sender addresses)."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Datagrams dropped unanswered by reason (malformed)."""
    replies_dropped: dict[str, int] = field(default_factory=dict)
    """Replies not sent by reason (stale, send_failed, unsafe_address)."""
    evicted: dict[str, int] = field(default_factory=dict)
    """Peers dropped from the registry by reason (registry_full, undeliverable)."""
    exits_in_window: int = 0
    """Peers that went silent (exited) while a window they had been configured for was open."""
    skipped: dict[str, int] | None = None
    """Windows not opened on purpose, by reason (`SKIP_REASONS`); None for a source that never
    skips a window on purpose, which then exports neither this nor `files`."""
    files: dict[str, int] = field(default_factory=dict)
    """Trace files found, by kind (`FILE_KINDS`)."""

    @property
    def has_peers(self) -> bool:
        return self.clients is not None

    @property
    def skips(self) -> bool:
        return self.skipped is not None
