"""Cuts proven by structure: does a piece that starts between two events also end between two?

A document written on one line (as `json.dump` writes it) has no newline to cut at; its events are
told apart by structure alone, as the fastest JSON parsers split their input: the piece readers
cut at a `}`, `,`, `{` (`skim.BETWEEN_EVENTS`), which is between two events of `traceEvents` only
when it is outside every string and at the depth of that array. A piece is skimmed (only its GPU
events decoded) when `balanced` says it is a run of whole values from a cut already proven: read
from its start, outside a string at depth 0, every bracket outside strings closes one opened in
the piece, and no string or bracket is left open at its end; its end is then between two events
too. The first cut is proven by the strict decode of the first piece (`pieces`) or of the head
(`parallel`), so each later one is, piece by piece. A piece that is not balanced was cut inside an
event (in a string, or in an array of objects): it goes to the strict decoder, which proves the
cut or finds the next one (`pieces`), or ends the parallel read (`parallel`).

What it does not check is what skimming never checks (skim.py): the JSON of the skipped events.

Two implementations with the same answer on any bytes (tests/trace/test_structure.py): the compiled one
in `_gpuscan_structure.h` (64 bytes at a time), and this module's, with bytes methods (C loops)
as `capture/jsonscan.py` does: escaped quotes dropped, every byte but `"{}[]` deleted, adjacent
`""`, `{}` and `[]` deleted a few passes (none of which changes the answer), and what is left
(nothing, in a real trace) counted a string at a time.
"""

from __future__ import annotations

from . import skim

__all__ = ["balanced", "balanced_python"]

_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"{}[]')
_CLOSERS = frozenset(b"}]")
_PASSES = 16


def balanced(text: bytes | bytearray, lo: int, hi: int, *, native: bool = True) -> bool:
    """Is `text[lo:hi]`, read from outside a string at depth 0, a run of whole values (module doc)?"""
    if native and skim.NATIVE and skim._native is not None:
        return bool(skim._native.balanced(text, lo, hi))
    return balanced_python(text, lo, hi)


def balanced_python(text: bytes | bytearray, lo: int, hi: int) -> bool:
    """The pure-Python `balanced` (the compiled one's reference)."""
    data = text[lo:hi]
    if b"\\" in data:
        # a run of backslashes pairs from its left; the one left over, if any, escapes what follows
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    rest = data.translate(None, _NOT_STRUCTURE)
    del data
    for _ in range(_PASSES):
        size = len(rest)
        rest = rest.replace(b'""', b"").replace(b"{}", b"").replace(b"[]", b"")
        if len(rest) == size:
            break
    return not rest or _counted(bytes(rest))


def _counted(rest: bytes) -> bool:
    """`balanced` of quotes and brackets alone, a string at a time."""
    parts = rest.split(b'"')
    if len(parts) % 2 == 0:  # a string left open
        return False
    depth = 0
    for outside in parts[::2]:  # (the odd ones are inside strings)
        if not outside:
            continue
        closes = outside.count(b"}") + outside.count(b"]")
        if closes <= depth:
            depth += len(outside) - 2 * closes
            continue
        for byte in outside:  # it may go below 0: in order
            if byte in _CLOSERS:
                depth -= 1
                if depth < 0:
                    return False
            else:
                depth += 1
    return depth == 0
