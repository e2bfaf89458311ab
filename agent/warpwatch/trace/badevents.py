"""An event the Trace cannot be built from: `BadEvent`, raised while a piece is scanned, and
`describe_bad_event`, which finds where it is and writes the message; with `first_span`, the read
of the Trace events' spans whose invalid one is such an event."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import msgspec

from ..model import TraceWindow
from .values import finite_number


class BadEvent(Exception):
    """An event the Trace cannot be built from; `describe_bad_event` finds its index for the message."""

    def __init__(self, event: Any, problem: str, detail: str = "") -> None:
        super().__init__(problem)
        self.event = event
        self.problem = problem
        self.detail = detail


def first_span(spans: Iterable[tuple[Any, Any]]) -> TraceWindow | None:
    """The first Trace event with a positive duration (an invalid one before it is an error:
    BadEvent whose `event` is the rank of that span among the Trace events)."""
    for k, (ts, dur) in enumerate(spans):
        t = finite_number(ts)
        d = finite_number(dur)
        if t is None or d is None or d < 0:
            raise BadEvent(k, "span")
        if d > 0:
            return TraceWindow(t, t + d, "trace_span")
    return None


def describe_bad_event(bad: BadEvent, events: list[Any]) -> tuple[int, str]:
    """(index of the bad event in `events`, message with `{index}` standing for its index in
    the whole document)."""
    if bad.problem == "span":  # bad.event is the rank of the span among Trace events
        spans = (i for i, ev in enumerate(events) if ev.cat == "Trace" and getattr(ev, "ph", "X") == "X")
        index = next(i for k, i in enumerate(spans) if k == bad.event)
    else:
        index = next(i for i, ev in enumerate(events) if ev is bad.event)
    ev = events[index]
    if bad.problem == "args":
        return index, f"unexpected structure: {braces(bad.detail)} - at `$.traceEvents[{{index}}].args`"
    name: Any = ev.name
    if isinstance(name, msgspec.Raw):
        with contextlib.suppress(msgspec.DecodeError):
            name = msgspec.json.decode(name)
    return index, "traceEvents[{index}] " + braces(
        f"({ev.cat!s:.20} {name!s:.60}): ts/dur must be finite numbers, "
        f"dur >= 0 (got ts={ev.ts!r:.30}, dur={ev.dur!r:.30})"
    )


def braces(text: str) -> str:
    """Text put in a message template as it is."""
    return text.replace("{", "{{").replace("}", "}}")
