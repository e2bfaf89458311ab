"""The project's exception tree. Every expected failure is one of these; only the CLI exits."""

from __future__ import annotations

from typing import Literal

TraceFault = Literal["invalid_trace", "too_large", "io_error"]
"""Why a trace could not be read: the `reason` of its `read` fault (`export.FAULTS`)."""


class WarpwatchError(Exception):
    """Base of every error warpwatch raises on purpose."""


class TraceError(WarpwatchError):
    """A trace file cannot be read: the message names the file and what is wrong with it.

    `kind` says why, as the `read` fault counts it: `invalid_trace` (empty, truncated, not JSON,
    not a Kineto trace), `too_large` (over `max_trace_bytes` or the memory budget) or `io_error`
    (the file could not be opened or read). `TraceError(message, kind=...)` without a reason
    takes the message as it is.
    """

    def __init__(self, path: str, reason: str = "", *, kind: TraceFault = "invalid_trace") -> None:
        self.path = path
        self.reason = reason or path
        self.kind: TraceFault = kind
        super().__init__(f"{path}: {reason}" if reason else path)


class ConfigError(WarpwatchError):
    """A setting is invalid: the message names the setting and the value given."""


class CaptureError(WarpwatchError):
    """A source could not produce a window (server gone, time-out, socket taken...)."""
