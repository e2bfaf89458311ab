"""`--max-trace-bytes SIZE` of `warpwatch analyze` and `warpwatch fix`: the size syntax of the
agent's `max_trace_bytes` setting (`config.parse_size`: 4096, 500MB, 2GiB), greater than 0, and
errors that name the flag rather than the YAML key."""

from __future__ import annotations

import argparse

from ..config.units import parse_size
from ..errors import TraceError

FLAG = "--max-trace-bytes"


def byte_size(text: str) -> int:
    """argparse type: a positive size; argparse names the flag in front of the message."""
    stripped = text.strip()
    try:  # (a minus is read, to be refused as a bound: "-5MiB" is no typo of a size)
        value = -parse_size(stripped[1:]) if stripped.startswith("-") else parse_size(stripped)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (got {text!r})") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0 (got {text!r})")
    return value


def cli_message(exc: TraceError) -> str:
    """A trace error as a command line says it: a size limit is the flag's, not the YAML key's."""
    text = str(exc)
    return (
        text.replace("raise max_trace_bytes to read it", f"raise {FLAG} to read it")
        if exc.kind == "too_large"
        else text
    )
