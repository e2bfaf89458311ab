"""Skimming: the GPU events of a piece, found in its bytes, decoded without the rest.

Most of a trace is CPU-side (operators, runtime calls, flows, Python frames): the analysis needs
only kernels, memcpy/memset (the GPU extent), the `Trace` span and, on AMD, hip* runtime calls.
`skim` finds those events by their category (`"cat": "kernel"`...) and cuts each from its `{`
to the next cut between two events, so only they are decoded (strictly); the other events of the
piece are not decoded at all, which halves the cost of a large trace.

What it gives up: invalid JSON inside a skipped event is not noticed (the head and the first piece
of every document, and its tail, are always decoded whole, so a file that is not a trace still
fails there). Anything unexpected -- a slice that does not decode, a category written with
escapes, a bad event whose index an error message needs -- sends the piece, or the document, back
to the strict decoder, so results and error messages do not change.
"""

from __future__ import annotations

import re

_GPU_EVENT = re.compile(rb'"cat":\s?"(?:kernel|Kernel|gpu_memcpy|gpu_memset|Memcpy|Memset|Trace)"')
_HIP_CALL = re.compile(rb'"name":\s?"hip')
_BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*\{")


def skim(text: bytes | bytearray, end: int, *, hip: bool = False) -> bytes | None:
    """The GPU events among the whole events `text[:end]`, as one JSON list in document order;
    None when an event's start cannot be found (then decode the piece whole)."""
    spans: list[tuple[int, int]] = []
    for pattern in (_GPU_EVENT, _HIP_CALL) if hip else (_GPU_EVENT,):
        last = 0
        for m in pattern.finditer(text, 0, end):
            at = m.start()
            if at < last:
                continue
            start = text.rfind(b"{", last, at)
            if start < 0:
                return None
            cut = _BETWEEN_EVENTS.search(text, m.end(), end)
            last = cut.start() + 1 if cut else end
            spans.append((start, last))
    if hip:  # two searches: back to document order, each event once
        spans.sort()
        spans = [s for i, s in enumerate(spans) if i == 0 or s[0] >= spans[i - 1][1]]
    return b"[" + b",".join([text[a:b] for a, b in spans]) + b"]"
