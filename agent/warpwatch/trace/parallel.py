"""Several processes decode one plain trace file, each reading its own pieces (`os.pread`).

Used when the caller runs no other thread (`os.fork` in a threaded process can deadlock the
child) and the machine has cores to spare; the GIL does not let threads decode in parallel.
The parent finds the cuts first (a small read around each target), then every process takes
the next piece from a pipe when it is free (`forkscan`: the processes and their pipes). Any
piece that does not decode as whole events, or any other surprise, returns None: the caller
then reads the document piece by piece in one process (`pieces`), which handles every case and
reports every error.

Cuts: where events start lines of their own, at a newline and the first event's indentation
(skimmable, `pieces`); in a document written on one line, at any `}, {`, each middle piece then
skimmed only when `structure.balanced` proves it ends between two events, given that it starts
between two (which the head's decode proves of the first cut, and each piece of the next); a
piece that is not balanced is decoded strictly, and a wrong cut fails that decode.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from ..errors import TraceError
from ..runtime.gcpause import gc_paused
from ..runtime.membudget import ReadLimits, may_fork
from .document import Collector, Document, Restart, has_amd_device
from .forkscan import scan_pieces
from .messages import over_budget, too_large
from .schema import DOC, HIP_MARK, PART, PART_FAST, Event, Interned, Scanned, scan
from .skim import BETWEEN_EVENTS, skim_scan
from .structure import balanced

PARALLEL_MIN_BYTES = 32 * 1024**2
"""Documents at least this large are decoded by several processes when `workers` allows."""
MAX_WORKERS = 8
EDGE_BYTES = 64 * 1024
_SEARCH_BYTES = 1024**2
_SPLIT_MARK = "__warpwatch_split__"


class _Irregular(Exception):
    """A piece did not decode as whole events: read the document in one process."""


class Source(Protocol):
    size: int

    def window(self, lo: int, hi: int) -> bytes | memoryview: ...

    def fill(self, buf: bytearray, at: int, lo: int, hi: int) -> None: ...


class BytesSource:
    def __init__(self, data: bytes) -> None:
        self.view = memoryview(data)
        self.size = len(data)

    def window(self, lo: int, hi: int) -> memoryview:
        return self.view[lo:hi]

    def fill(self, buf: bytearray, at: int, lo: int, hi: int) -> None:
        buf[at : at + hi - lo] = self.view[lo:hi]


class FileSource:
    """A plain file, each process reading its own pieces."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size

    def window(self, lo: int, hi: int) -> bytes:
        return os.pread(self.fd, hi - lo, lo)

    def fill(self, buf: bytearray, at: int, lo: int, hi: int) -> None:
        view = memoryview(buf)
        while lo < hi:
            n = os.preadv(self.fd, [view[at : at + hi - lo]], lo)
            if n <= 0:
                raise _Irregular("file shrank while being read")
            at += n
            lo += n


def read_file(fd: int, path: str, limits: ReadLimits) -> Document | None:
    """The document of the plain file `fd` decoded by several processes, or None (see module doc)."""
    size = os.fstat(fd).st_size
    if os.pread(fd, 2, 0) == b"\x1f\x8b":
        return None
    if size > limits.max_bytes:
        raise TraceError(path, too_large(limits.max_bytes), kind="too_large")
    return _read(FileSource(fd, size), path, limits)


def read_bytes(data: bytes, path: str, limits: ReadLimits) -> Document | None:
    return _read(BytesSource(data), path, limits)


def _read(source: Source, path: str, limits: ReadLimits) -> Document | None:
    workers = _workers(limits.workers, source.size)
    if workers <= 1 or not _looks_like_a_trace(source):
        return None
    indent = _indent(source)
    structural = indent is None  # events not each on a line of their own (one line, as json.dump writes)
    ranges = _cuts(source, limits.piece_bytes, indent, structural=structural)
    if ranges is None:
        return None
    (head_lo, head_hi), *middle, (tail_lo, tail_hi) = ranges
    interned = Interned()
    collector = Collector(path, limits)
    with gc_paused():
        try:
            head, head_events = _decode_edge(source, head_lo, head_hi, at_start=True)
            tail, tail_events = _decode_edge(source, tail_lo, tail_hi, at_start=False)
            amd = any(has_amd_device(getattr(top, "deviceProperties", None)) for top in (head, tail))
            first = scan(head_events, False, interned, hip=amd or HIP_MARK in bytes(source.window(head_lo, head_hi)))
            last = scan(tail_events, False, interned, hip=amd or HIP_MARK in bytes(source.window(tail_lo, tail_hi)))
            hip = amd
            scanned = _scan_parallel(
                source,
                path,
                middle,
                workers,
                limits,
                len(first.launches),
                interned,
                hip,
                skimming=indent is not None or structural,
                structural=structural,
            )
            if scanned is None:
                return None
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, _Irregular):
            return None
        for top in (head, tail):
            if not isinstance(top, list):
                collector.header(top)
        try:
            for piece in (first, *scanned, last):
                collector.add(piece)
        except Restart:
            return None
    return collector.doc


def _indent(source: Source) -> bytes | None:
    """The whitespace before the first event on its line, when events start lines (`pieces`)."""
    start = bytes(source.window(0, 4 * 1024**2))
    key = re.search(rb'"traceEvents"\s*:\s*\[(\s*)\{', start) or re.match(rb"\s*\[(\s*)\{", start)
    if key is None or b"\n" not in key.group(1):
        return None
    return key.group(1).rsplit(b"\n", 1)[1]


def _looks_like_a_trace(source: Source) -> bool:
    start = bytes(source.window(0, 4 * 1024**2))
    lead = start.lstrip()[:1]
    return lead == b"[" or (lead == b"{" and b'"traceEvents"' in start)


def _cuts(
    source: Source, piece: int, indent: bytes | None = None, *, structural: bool = False
) -> list[tuple[int, int]] | None:
    """Byte ranges (start, end) that tile the document: the head (up to the first cut between
    two events), pieces of about `piece` bytes, and the tail (the last 64 KiB or so). With
    `indent`, cuts start a line with that indentation (which makes pieces skimmable); when
    `structural`, any `}, {` is a cut (each proven by its piece, module doc)."""
    size = source.size
    key = re.search(rb'"traceEvents"', source.window(0, min(size, 4 * 1024**2)))
    first = (key.start() if key else 0) + EDGE_BYTES
    targets = [first, *range(first + piece, size - EDGE_BYTES - piece // 4, piece), size - EDGE_BYTES]
    bounds = [0]
    for target in targets:
        if target <= bounds[-1] or target >= size:  # (a document smaller than its edges: no cut there)
            continue
        cut = _find_cut(source, target, indent, structural)
        if cut is not None and cut[1] < size:
            bounds.extend(cut)
    bounds.append(size)
    if len(bounds) < 6:  # fewer than two cuts: not worth it, or not a Kineto layout
        return None
    return list(zip(bounds[::2], bounds[1::2], strict=True))


def _find_cut(source: Source, target: int, indent: bytes | None, structural: bool = False) -> tuple[int, int] | None:
    """The first cut with a newline in it (never inside a JSON string) after `target`; with
    `indent`, one whose next event starts a line with that indentation; when `structural`, the
    first cut."""
    window = source.window(target, min(source.size, target + _SEARCH_BYTES))
    indented = None if indent is None else b"\n" + indent + b"{"
    for m in BETWEEN_EVENTS.finditer(window):
        text = m.group()
        if structural or (b"\n" in text and (indented is None or text.endswith(indented))):
            return target + m.start() + 1, target + m.end() - 1
    return None


def _decode_edge(source: Source, lo: int, hi: int, *, at_start: bool) -> tuple[Any, list[Event]]:
    """The head (document start up to the first cut) or the tail (last cut to the end).

    A marker event closes the head's `traceEvents` (or opens the tail's): finding it where it
    was put proves the cut is between two events of `traceEvents`, not in another array.
    """
    text = source.window(lo, hi)
    is_list = bytes(source.window(0, 64)).lstrip()[:1] == b"["
    mark = b'{"ph":"X","cat":"' + _SPLIT_MARK.encode() + b'"}'
    if at_start:
        top = DOC.decode(b"".join([text, b",", mark, b"]" if is_list else b"]}"]))
    else:
        top = DOC.decode(b"".join([b"[" if is_list else b'{"traceEvents":[', mark, b",", text]))
    events = top if isinstance(top, list) else top.traceEvents
    if not events or (events[-1] if at_start else events[0]).cat != _SPLIT_MARK:
        raise _Irregular("the cut is not between two trace events")
    if not isinstance(top, list):
        top.traceEvents = []
    return top, (events[:-1] if at_start else events[1:])


def _scan_range(
    source: Source,
    lo: int,
    hi: int,
    buf: bytearray,
    interned: Interned,
    hip: bool,
    skimming: bool = False,
    structural: bool = False,
) -> Scanned:
    """Decode one piece (a run of whole events) and keep what the Trace needs from it; only its
    GPU events when `skimming` (`skim`; the whole piece when they cannot be told apart), and when
    `structural` only if the piece is balanced (module doc)."""
    n = hi - lo
    if len(buf) < n + 2:
        buf.extend(bytes(n + 2 - len(buf)))
    buf[0] = ord("[")
    source.fill(buf, 1, lo, hi)
    buf[n + 1] = ord("]")
    if skimming and (not structural or balanced(buf, 1, n + 1)):
        scanned = skim_scan(buf, n + 1, interned, amd=hip)
        if scanned is not None:
            return scanned
    hip = hip or buf.find(HIP_MARK, 1, n + 1) >= 0
    text = memoryview(buf)[: n + 2]
    try:
        return scan(PART_FAST.decode(text), True, interned, hip=hip)
    except msgspec.ValidationError:
        return scan(PART.decode(text), False, interned, hip=hip)


class _Cap:
    """Stops the read as soon as the launches received exceed the cap."""

    def __init__(self, limits: ReadLimits, path: str, already: int) -> None:
        self.cap = limits.max_launches
        self.budget = limits.budget
        self.path = path
        self.count = already

    def add(self, s: Scanned) -> None:
        self.count += len(s.launches)
        if self.cap is not None and self.count > self.cap:
            raise TraceError(self.path, over_budget(self.cap, self.budget), kind="too_large")


def _scan_parallel(
    source: Source,
    path: str,
    ranges: Sequence[tuple[int, int]],
    workers: int,
    limits: ReadLimits,
    already: int,
    interned: Interned,
    hip: bool,
    *,
    skimming: bool,
    structural: bool = False,
) -> list[Scanned] | None:
    """Scan the pieces in `workers` processes (`forkscan`); results in document order, None on
    any failure; the launch cap is checked as each result comes."""
    cap = _Cap(limits, path, already)

    def piece(i: int, buf: bytearray, interned: Interned) -> Scanned:
        return _scan_range(source, *ranges[i], buf, interned, hip, skimming, structural)

    return scan_pieces(len(ranges), workers, piece, interned, cap.add)


def _workers(requested: int | None, size: int) -> int:
    """How many processes decode a document of `size` bytes."""
    if requested is not None:
        n = requested
    else:
        try:
            n = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            n = os.cpu_count() or 1
        n = min(n, MAX_WORKERS)
    if n <= 1 or size < PARALLEL_MIN_BYTES or not may_fork():
        return 1
    return n
