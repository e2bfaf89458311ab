"""Skimming: the GPU events of a piece, found in its bytes, decoded without the rest.

Most of a trace is CPU-side (operators, runtime calls, flows, Python frames): the analysis needs
only kernels, memcpy/memset (the GPU extent), the `Trace` span and, on AMD, hip* runtime calls.
`skim_scan` finds those events by their category (a `"cat"` key whose value is `kernel`...) and
reads only them; the other events of the piece are not decoded at all, which is most of the cost
of a large trace. Two implementations, with the same results (tests/test_gpuscan.py):

- the compiled scanner, `_gpuscan.c` (built by setup.py where a C compiler is found): finds the
  events, parses them and builds the launches in one pass; it answers None for anything it is
  not sure of (and for a piece that may hold hip* runtime calls), and then
- `skim` cuts each GPU event from its `{` to the next cut between two events, and msgspec
  decodes them strictly.

What it gives up: invalid JSON inside a skipped event is not noticed (the head and the first piece
of every document, and its tail, are always decoded whole, so a file that is not a trace still
fails there). Anything unexpected -- a slice that does not decode, a category written with
escapes, a bad event whose index an error message needs -- sends the piece, or the document, back
to the strict decoder, so results and error messages do not change.
"""

from __future__ import annotations

import re

import msgspec

from .. import native
from ..model import KernelLaunch
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
            if start < 0:
                return None
            cut = BETWEEN_EVENTS.search(text, m.end(), end)
            last = cut.start() + 1 if cut else end
            spans.append((start, last))
    if hip:  # two searches: back to document order, each event once
        spans.sort()
        spans = [s for i, s in enumerate(spans) if i == 0 or s[0] >= spans[i - 1][1]]
    return b"[" + b",".join([text[a:b] for a, b in spans]) + b"]"
