"""The project's exception tree. Every expected failure is one of these; only the CLI exits."""

from __future__ import annotations


class WarpwatchError(Exception):
    """Base of every error warpwatch raises on purpose."""


class TraceError(WarpwatchError):
    """A trace file cannot be read: the message names the file and what is wrong with it."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class ConfigError(WarpwatchError):
    """A setting is invalid: the message names the setting and the value given."""


class CaptureError(WarpwatchError):
    """A source could not produce a window (server gone, time-out, socket taken...)."""
