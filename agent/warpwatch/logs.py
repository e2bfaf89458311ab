"""Structured logs: one line per event, `key=value` text (logfmt) or JSON.

    ts=2026-08-01T12:00:00.123Z level=info event=window source=dir:/traces outcome=ok seconds=0.042

Call `event(logger, "name", key=value, ...)`; records from other libraries (APScheduler) come
out in the same format with their message as `msg`. Expected failures are logged as one line
with an `error` field; a traceback is added only at `debug` level (for unexpected errors).
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

FIELDS_ATTR = "warpwatch_fields"
_RESERVED = ("ts", "level", "logger", "event")


def event(logger: logging.Logger, name: str, level: int = logging.INFO, /, *,
          exc_info: BaseException | None = None, **fields: Any) -> None:
    """Log one event with structured fields (`name`, `level` are positional: any key is a field)."""
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={FIELDS_ATTR: fields}, exc_info=exc_info)


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
    return json.dumps(text, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`key=value` pairs separated by spaces; values with spaces or quotes are JSON-quoted."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_text_value(v)}" for k, v in _fields(record).items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str, ensure_ascii=False)


def configure(level: str = "info", fmt: str = "text", stream: IO[str] | None = None) -> logging.Handler:
    """Route every log record through one handler in the chosen format (replacing earlier ones)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # APScheduler reports every job run at info; only its warnings concern the user.
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, root.level))
    return handler
