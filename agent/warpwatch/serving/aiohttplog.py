"""What aiohttp's request handler logs, as the agent's own rate-limited one-line events.

aiohttp logs every request its parser refuses (a bad method, a missing Host, an invalid header,
a line too long: answered 400 or 431 before any handler runs) with `logger.exception`, that is at
ERROR level with the parser's traceback and the client's raw bytes. Input is not a bug: here each
becomes one `http_bad_request` line (rate-limited per kind, the bytes cut and escaped) and a count
in `warpwatch_http_rejected_total{reason="bad_request"}`. Anything else aiohttp reports (a handler
that raised: a bug) is one `http_error` line, its traceback at debug level only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError

from ..logs import RepeatFilter, event, limited_event

log = logging.getLogger("warpwatch.http")

DETAIL_CHARS = 200
"""Of a parser error's message (which quotes the client's bytes), what a log line keeps."""


class AiohttpLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The `logger` aiohttp's `RequestHandler` is given (`web.Server(..., logger=AiohttpLog(...))`)."""

    def __init__(self, repeats: RepeatFilter, count: Callable[[str], None]) -> None:
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self._repeats = repeats
        self._count = count

    def log(
        self,
        level: int,
        msg: object,
        *args: object,
        exc_info: Any = None,
        stack_info: bool = False,
        stacklevel: int = 1,
        extra: Mapping[str, object] | None = None,
        **kwargs: Any,
    ) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else None
        try:
            text = str(msg) % args if args else str(msg)
        except (TypeError, ValueError):
            text = str(msg)
        if isinstance(exc, HttpProcessingError):
            self._count("bad_request")
            limited_event(
                log,
                self._repeats,
                ("bad_request", type(exc).__name__),
                "http_bad_request",
                logging.INFO,
                error=type(exc).__name__,
                detail=_cut(exc),
                context=text,
            )
        elif exc is not None:
            limited_event(
                log,
                self._repeats,
                ("aiohttp", type(exc).__name__),
                "http_error",
                logging.WARNING,
                error=f"{type(exc).__name__}: {_cut(exc)}",
                context=text,
            )
            event(log, "http_error_traceback", logging.DEBUG, exc_info=exc)
        elif level >= logging.WARNING:
            limited_event(log, self._repeats, ("aiohttp", text), "http_error", logging.WARNING, context=text)
        else:
            event(log, "aiohttp", logging.DEBUG, context=text)


def _cut(exc: BaseException) -> str:
    """The exception's message on one line, at most `DETAIL_CHARS` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 3] + "..."
