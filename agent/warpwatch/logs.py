"""Structured logs: one line per event, `key=value` text (logfmt) or JSON.

    ts=2026-08-01T12:00:00.123Z level=info event=window source=dir:/traces outcome=ok seconds=0.042

Call `event(logger, "name", key=value, ...)`; records from other libraries come out in the same
format with their message as `msg`. Expected failures are logged as one line with an `error`
field; a traceback is added only at `debug` level (for unexpected errors).

A line is always one line, whatever the values hold (kernel names and file names come from
untrusted traces): values with spaces, quotes, `=`, backslashes or anything not printable are
JSON-quoted, and characters that are not printable (control characters, line and paragraph
separators, lone surrogates) are written as `\\uXXXX` escapes in both formats.

A fault that repeats every window (a bad file replayed in a loop, a lost GPU, an unreadable
folder) is logged once, then at most once per `RepeatFilter.interval_s` with the number of
repeats left out meanwhile (`repeats=N`); the repeats in between go to `debug` level.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import IO, Any

FIELDS_ATTR = "warpwatch_fields"
_RESERVED = ("ts", "level", "logger", "event")


def event(
    logger: logging.Logger,
    name: str,
    level: int = logging.INFO,
    /,
    *,
    exc_info: BaseException | None = None,
    **fields: Any,
) -> None:
    """Log one event with structured fields (`name`, `level` are positional: any key is a field)."""
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={FIELDS_ATTR: fields}, exc_info=exc_info)


class RepeatFilter:
    """Which repeats of a keyed event to log: the first, then one per `interval_s` (module doc).

    Thread-safe; remembers at most `max_keys` keys (the least recently seen are forgotten).
    """

    def __init__(
        self, interval_s: float = 600.0, *, max_keys: int = 1024, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = interval_s
        self._max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[Hashable, list[float]] = OrderedDict()  # key -> [last logged, repeats left out]

    def check(self, key: Hashable) -> int | None:
        """None to leave this occurrence out; else how many were left out since the last one logged."""
        now = self._clock()
        with self._lock:
            entry = self._seen.get(key)
            if entry is None:
                self._seen[key] = [now, 0.0]
                while len(self._seen) > self._max_keys:
                    self._seen.popitem(last=False)
                return 0
            self._seen.move_to_end(key)
            if now - entry[0] < self.interval_s:
                entry[1] += 1
                return None
            repeats = int(entry[1])
            entry[0], entry[1] = now, 0.0
            return repeats


def limited_event(
    logger: logging.Logger,
    limiter: RepeatFilter,
    key: Hashable,
    name: str,
    level: int = logging.WARNING,
    /,
    *,
    exc_info: BaseException | None = None,
    **fields: Any,
) -> None:
    """`event`, at `level` when `limiter` lets this repeat through (with `repeats=N` when some were
    left out), else at debug level."""
    repeats = limiter.check(key)
    if repeats is None:
        event(logger, name, logging.DEBUG, exc_info=exc_info, **fields, repeated=True)
    else:
        event(logger, name, level, exc_info=exc_info, **fields, repeats=repeats or None)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
    out: dict[str, Any] = {"ts": ts, "level": record.levelname.lower()}
    custom: Mapping[str, Any] | None = getattr(record, FIELDS_ATTR, None)
    if custom is None:
        out["logger"] = record.name
        out["event"] = "log"
        out["msg"] = record.getMessage()
    else:
        out["event"] = record.msg
        for key, value in custom.items():
            if value is None:
                continue  # unknown: left out rather than printed as null
            out[f"{key}_" if key in _RESERVED else key] = value
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        out.setdefault("error", f"{type(exc).__name__}: {exc}")
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            out["traceback"] = logging.Formatter().formatException(record.exc_info)
    return out


_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def _escape(match: re.Match[str]) -> str:
    c = match.group(0)
    if c.isprintable():
        return c
    code = ord(c)
    if code > 0xFFFF:  # a JSON escape is UTF-16: a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def _json(value: Any) -> str:
    """JSON text with every character that is not printable escaped (module doc). Outside strings
    JSON is ASCII, so any such character sits inside a string, where an escape is valid."""
    return _UNPRINTABLE.sub(_escape, json.dumps(value, default=str, ensure_ascii=False))


def _text_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    text = str(value)
    if text and not any(c in text for c in ' "=\\') and text.isprintable():
        return text
    return _json(text)


class TextFormatter(logging.Formatter):
    """`key=value` pairs separated by spaces; values with spaces, quotes or unprintable characters
    are JSON-quoted."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_text_value(v)}" for k, v in _fields(record).items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return _json(_fields(record))


def configure(level: str = "info", fmt: str = "text", stream: IO[str] | None = None) -> logging.Handler:
    """Route every log record through one handler in the chosen format (replacing earlier ones)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
