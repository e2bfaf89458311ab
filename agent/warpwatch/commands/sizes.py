"""`--max-trace-bytes SIZE` of `warpwatch analyze` and `warpwatch fix`: the size syntax of the
agent's `max_trace_bytes` setting (`config.parse_size`: 4096, 500MB, 2GiB), greater than 0, and
errors that name the flag rather than the YAML key."""

from __future__ import annotations

import argparse

from ..config.units import parse_size
from ..errors import TraceError
from ..trace import DEFAULT_MAX_BYTES

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


def add_max_trace_bytes(p: argparse.ArgumentParser) -> None:
    """Give a command that reads a trace the `--max-trace-bytes SIZE` flag (`args.max_trace_bytes`,
    default the reader's `DEFAULT_MAX_BYTES`)."""
    p.add_argument(
        FLAG,
        type=byte_size,
        default=DEFAULT_MAX_BYTES,
        metavar="SIZE",
        help="refuse traces larger than this once decompressed: bytes, or a size such as 500MB or 2GiB (default 2GiB)",
    )


def cli_message(exc: TraceError) -> str:
    """A trace error as a command line says it: a size limit is the flag's, not the YAML key's."""
    text = str(exc)
    return (
        text.replace("raise max_trace_bytes to read it", f"raise {FLAG} to read it")
        if exc.kind == "too_large"
        else text
    )
