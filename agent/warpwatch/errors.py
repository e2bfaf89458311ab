"""The project's exception tree. Every expected failure is one of these; only the CLI exits."""

from __future__ import annotations


class WarpwatchError(Exception):
    """Base of every error warpwatch raises on purpose."""


TRACE_ERROR_KINDS = ("invalid_trace", "too_large", "io_error")
"""`TraceError.kind`: the `read` fault reason it is counted as (`model.FAULTS`)."""


class TraceError(WarpwatchError):
    """A trace file cannot be read: the message names the file and what is wrong with it.

    `kind` is one of `TRACE_ERROR_KINDS`; the service counts the failure under it. A reader that
    does not say it gets the kind its reason's wording implies (`cannot read`/`no such file`/...
    -> io_error, `larger than` -> too_large, anything else -> invalid_trace)."""

    def __init__(self, path: str, reason: str, *, kind: str | None = None) -> None:
        self.path = path
        self.reason = reason
        self.kind = kind if kind is not None else _kind_of(reason)
        super().__init__(f"{path}: {reason}")


def _kind_of(reason: str) -> str:
    if reason.startswith(("cannot read", "no such file", "permission denied", "is a directory")):
        return "io_error"
    if reason.startswith("larger than"):
        return "too_large"
    return "invalid_trace"


class ConfigError(WarpwatchError):
    """A setting is invalid: the message names the setting and the value given."""


class CaptureError(WarpwatchError):
    """A source could not produce a window (server gone, time-out, socket taken...)."""
