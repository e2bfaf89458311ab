"""Skimming: the GPU events of a piece, found in its bytes, decoded without the rest.

Most of a trace is CPU-side (operators, runtime calls, flows, Python frames): the analysis needs
only kernels, memcpy/memset (the GPU extent), the `Trace` span and, on AMD, hip* runtime calls.
`skim_scan` finds those events by their category (a `"cat"` key whose value is `kernel`...) and
reads only them; the other events of the piece are not decoded at all, which is most of the cost
of a large trace. Two implementations, with the same results (tests/trace/test_gpuscan.py):

- the compiled scanner, `_gpuscan.c` (built by setup.py where a C compiler is found): finds the
  events, parses them and builds the launches in one pass; it answers None for anything it is
  not sure of (and for a piece that may hold hip* runtime calls), and then
- `skim` cuts each GPU event from its `{` to the next cut between two events, and msgspec
  decodes them strictly.

A GPU event found must be one of the piece's events, not an object nested in another event's
value: its `{` follows the piece's start or a `}` and a comma (not a `:`, nor another value of an
array), and where an array of objects may be (a `[` before a `{`) the piece decodes with each GPU
event replaced by a `0` that must stay at the top level (`_top_level`). The compiled scanner
leaves every piece where some `{` follows a `[`, or a comma after no `}`, to this module.

What it gives up: invalid JSON inside a skipped event is not noticed (the head and the first piece
of every document, and its tail, are always decoded whole, so a file that is not a trace still
fails there). Anything unexpected -- a slice that does not decode, a category written with
escapes, a bad event whose index an error message needs -- sends the piece, or the document, back
to the strict decoder, so results and error messages do not change.
"""

from __future__ import annotations

import re

import msgspec

from ..model import KernelLaunch
from ..runtime import native
from .schema import HIP_MARK, PART, PART_FAST, Interned, Scanned, scan

_native = native.load("warpwatch.trace._gpuscan")
NATIVE = _native is not None
"""Skim with the compiled scanner (`_gpuscan.c`); False: the Python path alone (`native`)."""

_GPU_EVENT = re.compile(rb'"cat"\s*:\s*"(?:(?:kernel|Kernel|gpu_memcpy|gpu_memset|Memcpy|Memset|Trace)"|[^"\\]*\\)')
"""The `"cat"` key of a GPU event, or of any event whose category holds an escape (which could
spell a GPU category: then the piece is decoded whole)."""
_HIP_CALL = re.compile(rb'"name"\s*:\s*"hip')
BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*\{")
"""A cut between two events (`}`, `,`, `{`); the piece readers cut there too."""


class _Skipped(msgspec.Struct, gc=False):
    """Any object, its keys skipped."""


_TOP: msgspec.json.Decoder[list[int | _Skipped]] = msgspec.json.Decoder(list[int | _Skipped])
_ARRAY_OF_OBJECTS = re.compile(rb"\[[ \t\n\r]*\{")
"""Where an object may be an element of an array (the first object of an array of objects)."""
_JSON_WS = b" \t\n\r"


def skim_scan(text: bytes | bytearray, end: int, interned: Interned, *, amd: bool = False) -> Scanned | None:
    """The Trace's share of the whole events `text[:end]`, from their GPU events alone (its
    `events` is -1: the others were not counted); None: decode the piece whole.

    The compiled scanner first (it answers None for anything it is not sure of, and for a piece
    that may hold hip* runtime calls, which it does not read), then `skim` and msgspec. `amd`: the
    trace's head names an AMD device (look for hip* runtime calls everywhere)."""
    if NATIVE and not amd and _native is not None:
        got = _native.scan(text, end, KernelLaunch, interned.names, interned.dims)
        if got is not None:
            launches, correlations, span, lo, hi = got
            return Scanned(-1, launches, correlations, [], span, lo, hi)
    hip = amd or text.find(HIP_MARK, 0, end) >= 0
    data = skim(text, end, hip=hip)
    if data is None:
        return None
    try:
        events, fast = PART_FAST.decode(data), True
    except msgspec.ValidationError:
        try:
            events, fast = PART.decode(data), False
        except (msgspec.DecodeError, RecursionError):
            return None
    except (msgspec.DecodeError, RecursionError):
        return None
    scanned = scan(events, fast, interned, hip=hip)
    scanned.events = -1
    return scanned


def skim(text: bytes | bytearray, end: int, *, hip: bool = False) -> bytes | None:
    """The GPU events among the whole events `text[:end]`, as one JSON list in document order;
    None when an event's start cannot be found (then decode the piece whole)."""
    spans: list[tuple[int, int]] = []
    for pattern in (_GPU_EVENT, _HIP_CALL) if hip else (_GPU_EVENT,):
        last = 0
        for m in pattern.finditer(text, 0, end):
            if m.group().endswith(b"\\"):
                return None
            at = m.start()
            if at < last:
                continue
            start = text.rfind(b"{", last, at)
            if start < 0 or not _starts_event(text, start):
                return None
            cut = BETWEEN_EVENTS.search(text, m.end(), end)
            last = cut.start() + 1 if cut else end
            spans.append((start, last))
    if hip:  # two searches: back to document order, each event once
        spans.sort()
        spans = [s for i, s in enumerate(spans) if i == 0 or s[0] >= spans[i - 1][1]]
    if spans and _ARRAY_OF_OBJECTS.search(text, 1 if text[:1] == b"[" else 0, end) and not _top_level(text, spans):
        return None
    return b"[" + b",".join([text[a:b] for a, b in spans]) + b"]"


def _starts_event(text: bytes | bytearray, start: int) -> bool:
    """Does the `{` at `start` follow the piece's start (or its `[`), or a `}` and a comma?
    (`_gpuscan.c` asks the same of every event it reads.)"""
    first = 1 if text[:1] == b"[" else 0
    head = text[max(first, start - 16) : start].rstrip(_JSON_WS)  # (Kineto's `},\n  {`: one look)
    if head.endswith(b","):
        before = head[:-1].rstrip(_JSON_WS)
        if before:
            return before.endswith(b"}")
    elif head:
        return False
    at = _before_ws(text, start, first)  # (whitespace longer than the look)
    if at == first:
        return True
    if text[at - 1] != ord(","):
        return False
    at = _before_ws(text, at - 1, first)
    return at > first and text[at - 1] == ord("}")


def _before_ws(text: bytes | bytearray, i: int, floor: int) -> int:
    """Where the JSON whitespace that ends at `i` starts (not before `floor`), 64 bytes at a time."""
    while i > floor:
        lo = max(floor, i - 64)
        kept = len(text[lo:i].rstrip(_JSON_WS))
        if kept:
            return lo + kept
        i = lo
    return floor


def _top_level(text: bytes | bytearray, spans: list[tuple[int, int]]) -> bool:
    """Is each span one of the events of the piece, and all before the last one JSON? The piece up
    to its last span, each span replaced by `0`, must decode as a list whose `0`s are those."""
    parts: list[bytes | bytearray] = [b"["]
    at = 1 if text[:1] == b"[" else 0  # (the parallel reader's pieces open with their bracket)
    for a, b in spans:
        parts += (text[at:a], b"0")
        at = b
    parts.append(b"]")
    try:
        top = _TOP.decode(b"".join(parts))
    except (msgspec.DecodeError, RecursionError):  # (a ValidationError too: an event that is no object)
        return False
    return top.count(0) == len(spans)
