"""What the HTTP server refuses, and how it reports it: the `reason` values of
`warpwatch_http_rejected_total` (`REJECT_REASONS`) and `RejectLog`, the counts by reason with the
rate-limited log line of each rejection."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..logs import RepeatFilter, limited_event

log = logging.getLogger("warpwatch.http")

REJECT_REASONS: tuple[str, ...] = (
    "too_many_connections",  # refused at the connection bound (503 or close)
    "evicted",  # an idle or silent connection closed to make room for a new one
    "header_timeout",  # a request's headers did not arrive within the deadline (no response)
    "headers_too_large",  # request line and headers over max_header_bytes (431)
    "auth_busy",  # the basic-auth queue was full (429)
    "slow_reader",  # the client did not read its response within write_timeout_s
    "client_gone",  # the client closed before its response was sent
    "tls_failed",  # TLS handshake failed, plain HTTP on the TLS port, or a client SAN not allowed
    "accept_failed",  # accept() failed (EMFILE, ENFILE, ENOBUFS...): retried after a back-off
    "bad_request",  # the HTTP parser refused the request (400, 431 from llhttp's limits), logged in one line
    "not_found",  # a path the agent does not serve, or no kept evidence id (404)
)
"""`reason` label values of `warpwatch_http_rejected_total`: public API, like metric names."""


class RejectLog:
    """Counts by reason (`REJECT_REASONS`) of what a server refused, and the log lines saying so:
    once, then at most once a minute per reason with the number left out (`logs.RepeatFilter`)."""

    def __init__(self) -> None:
        self.rejected: dict[str, int] = dict.fromkeys(REJECT_REASONS, 0)
        """Counts by reason (`REJECT_REASONS`); read by the metrics collector from any thread."""
        self._repeats = RepeatFilter(60.0)

    def count(self, reason: str) -> None:
        """Count one of `REJECT_REASONS` (the caller logs it)."""
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def reject(self, reason: str, peer: str, detail: str, level: int = logging.WARNING) -> None:
        """Count a rejected connection or request and log it: once, then at most once a minute per
        reason with the number left out (`logs.RepeatFilter`)."""
        self.count(reason)
        limited_event(
            log, self._repeats, ("http", reason), "http_rejected", level, reason=reason, client=peer, detail=detail
        )

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's own reports (a transport's fatal error...): one rate-limited line, no traceback."""
        exc = context.get("exception")
        error = f"{type(exc).__name__}: {exc}" if exc is not None else str(context.get("message"))
        limited_event(
            log,
            self._repeats,
            ("asyncio", type(exc).__name__ if exc else "message"),
            "http_error",
            logging.WARNING,
            error=error,
        )
