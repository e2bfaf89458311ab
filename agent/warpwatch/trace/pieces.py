"""The piece reader: a trace document, read and decompressed in bounded pieces, decoded piece
by piece; never the whole file, never its whole decompressed text.

Layout of a document: a head (the top-level keys before `traceEvents`, up to its `[`), the
events, and a tail (the last events, `]`, the keys after them). The reader

- reads (and gunzips, `zlib` with a bound on each output) about `piece_bytes` at a time, from a
  `streams.Stream`;
- decodes the head alone: a file that is not a trace fails there, within its first piece;
- cuts the events between two events (at `}` `,` `{`, preferring a cut with a newline in it,
  which is never inside a JSON string; in a document written on one line, at any such cut, proven
  by structure: `structure`) and decodes each piece strictly as a list of events.
  A cut is proven by the decode itself: the piece starts between two events, so it decodes as
  a list only if it also ends between two events. A piece that fails at its very end (or that
  msgspec calls truncated) was cut wrongly and is extended to the next cut, then, after
  `NEXT_CUTS` such retries, to at least twice its size (up to `MAX_PIECES` pieces); one that
  fails inside (or is not UTF-8) is invalid JSON, reported with its offset in the document;
- repairs Kineto's invalid JSON (bare `inf`/`nan`, raw control characters in strings) only
  in a piece whose decode stopped at such a token, and only in that piece (`repair`);
- keeps from each piece what the Trace needs (`schema.scan`) and drops the rest before the next;
  a `document.Collector` adds up what the pieces keep.

Memory is then the pieces in flight plus what is kept (`membudget`): a read that would keep
more kernel launches than `ReadLimits.max_launches` stops with a `too_large` TraceError.

A plain file that the caller may fork for is decoded by several processes (`parallel`); this
module is the one-process path that every other input takes, and the fallback of the parallel
one.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..errors import TraceError
from ..runtime.gcpause import gc_paused
from ..runtime.membudget import ReadLimits
from . import streams
from .document import Collector, Document, Restart, has_amd_device
from .messages import not_json
from .repair import repairable, sanitize
from .schema import DOC, DOC_FAST, HIP_MARK, PART, PART_FAST, Event, Header, Interned, scan
from .skim import BETWEEN_EVENTS, skim_scan
from .streams import Stream
from .structure import balanced

SEARCH_BYTES = 256 * 1024
"""How far past its target size a piece may run to find a cut."""
MAX_PIECES = 4
"""A piece that cannot be cut within this many piece sizes is an error."""
NEXT_CUTS = 8
"""Wrong cuts of one piece retried at the very next cut; after these, each retry at least doubles
the piece, so that a piece which never decodes costs a few decodes, not one per cut."""
EDGE_BYTES = 1024**2
"""The first piece and the tail, which are always decoded whole (strictly), are cut to about this
size (or the piece size, if smaller); the pieces between them may be skimmed."""

_ANY, _NEWLINE, _INDENTED = 0, 1, 2
_WS = re.compile(rb"\s*")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BYTE = re.compile(r"\(byte (\d+)\)")
_PATH_INDEX = re.compile(r"`\$\[(\d+)\]")


class _BadCut(Exception):
    """A piece did not end between two events (or may not have: the decoder's own words)."""


def read_document(stream: Stream, limits: ReadLimits, *, skimming: bool = True) -> Document:
    """Decode the document of `stream` piece by piece (one process): skimming the pieces after the
    first (`skim`), and again strictly when an error needs it."""
    if skimming:
        try:
            return _Reader(stream, limits, Interned(), skimming=True).run()
        except Restart:
            stream.restart()
    return _Reader(stream, limits, Interned(), skimming=False).run()


class _Reader:
    def __init__(self, stream: Stream, limits: ReadLimits, interned: Interned, *, skimming: bool) -> None:
        self.stream = stream
        self.path = stream.path
        self.limits = limits
        self.piece = limits.piece_bytes
        self.interned = interned
        self.collector = Collector(stream.path, limits)
        self.buf = bytearray()
        self.base = 0
        """Offset in the document of buf[0]."""
        self.eof = False
        self.is_list = False
        self.amd = False
        """The head names an AMD device: look for hip* runtime calls everywhere."""
        self.skimming = skimming
        self.pieces = 0
        self.indent: bytes | None = None
        self.structural = False
        """Events not each on a line of their own (a document on one line): pieces are cut at any
        `}, {` and skimmed only when `structure.balanced` proves the cut."""

    def fill(self, size: int) -> None:
        cancel = self.limits.cancel
        if cancel is not None and cancel():
            raise TraceError(self.path, "read abandoned: the agent is stopping", kind="io_error")
        while len(self.buf) < size and not self.eof:
            data = self.stream.read(min(streams.READ_BYTES, size - len(self.buf)))
            if data:
                self.buf += data
            else:
                self.eof = True

    def drop(self, n: int) -> None:
        del self.buf[:n]
        self.base += n

    def run(self) -> Document:
        with gc_paused():
            self.fill(self.piece + SEARCH_BYTES)
            if self.eof:  # small: one piece, decoded whole
                return self.whole()
            self.head()
            while True:
                self.fill(self.piece + SEARCH_BYTES)
                if self.eof and len(self.buf) <= min(EDGE_BYTES, self.piece):
                    break
                if not self.next_piece():
                    break
            self.tail()
            return self.collector.doc

    # -- a small document, in one piece

    def whole(self) -> Document:
        data = bytes(self.buf)
        self.buf = bytearray()
        if not data or data.isspace():
            raise TraceError(self.path, "empty file")
        top = self.decode(data, DOC, 0)
        if isinstance(top, list):
            events: list[Any] = top
            header = Header()
        else:
            header, events = top, top.traceEvents
            top.traceEvents = []
        self.collector.header(header)
        self.scan_events(data, events)
        doc = self.collector.doc
        if not doc.has_events and doc.header.deviceProperties is None and doc.header.schemaVersion is None:
            raise TraceError(self.path, "not a Kineto trace (no traceEvents, deviceProperties or schemaVersion)")
        return doc

    def scan_events(self, text: bytes | bytearray | memoryview, events: list[Any]) -> None:
        hip = self.amd or HIP_MARK in text
        self.collector.add(scan(events, _is_fast(events), self.interned, hip=hip))

    # -- head, pieces, tail

    def head(self) -> None:
        buf = self.buf
        start = _WS.match(buf).end()  # type: ignore[union-attr]
        first = buf[start : start + 1]
        if first == b"[":
            self.is_list = True
            self.drop(start + 1)
        elif first == b"{":
            self.is_list = False
            key = _EVENTS_KEY.search(buf, start, self.piece + SEARCH_BYTES)
            if key is None:
                self.decode(bytes(buf), DOC, 0)  # invalid JSON is reported as such
                raise TraceError(
                    self.path, f"not a Kineto trace (no traceEvents in its first {self.piece // 1024**2 or 1} MiB)"
                )
            top = self.decode(bytes(buf[: key.end()]) + b"]}", DOC, 0, head=True)
            if not isinstance(top, list):
                self.collector.header(top)
                self.amd = has_amd_device(top.deviceProperties)
            self.drop(key.end())
        else:
            raise TraceError(self.path, not_json(bytes(buf[start : start + 16])))
        lead = bytes(self.buf[: _WS.match(self.buf).end()])  # type: ignore[union-attr]
        # Events that each start on a line of their own, indented alike: a cut with exactly that
        # newline and indentation is between two events (see `find_cut`), so pieces may be skimmed.
        self.indent = lead.rsplit(b"\n", 1)[1] if b"\n" in lead else None
        self.structural = self.skimming and self.indent is None
        self.drop(len(lead))

    def next_piece(self) -> bool:
        """Decode the next piece of events, extending it past a wrong cut; False: what is
        left (the document is all read) is the tail."""
        edge = min(EDGE_BYTES, self.piece)
        target = edge if self.pieces == 0 else self.piece
        at = max(0, target - SEARCH_BYTES)
        if self.eof and len(self.buf) - edge < target:  # leave a tail of about `edge`: one piece up to
            at = max(0, len(self.buf) - edge)  # there (from SEARCH_BYTES before it, one event at a time)
        form = _ANY if self.structural else _INDENTED if self.skimming else _NEWLINE
        wrong: str | None = None  # how the last wrong cut failed to decode (for the error)
        tries = 0
        while True:
            cut = self.find_cut(at, form)
            if cut is None:
                if self.eof:
                    return False
                if form > _ANY:  # a document written on one line: any cut will do (each is checked)
                    form -= 1
                    continue
                raise TraceError(self.path, self.no_cut(wrong))
            end, nxt = cut
            try:
                self.decode_piece(end, skimmable=form == _INDENTED or self.structural)
            except _BadCut as exc:
                wrong = str(exc)
                tries += 1
                at = nxt if tries < NEXT_CUTS else max(nxt, 2 * end)
                continue
            self.drop(nxt)
            return True

    def find_cut(self, at: int, form: int) -> tuple[int, int] | None:
        """(end of a piece, start of the next) at the first cut of `form` from `at` on, reading on
        as needed. _INDENTED: a newline then the first event's indentation before the `{` (a nested
        object never starts a line there in a pretty-printed document); _NEWLINE: a newline in the
        cut (never inside a JSON string); _ANY: any `}`, `,`, `{` (each proven by its decode)."""
        limit = MAX_PIECES * self.piece
        indented = b"\n" + (self.indent or b"") + b"{"
        while True:
            for m in BETWEEN_EVENTS.finditer(self.buf, at):
                text = m.group()
                if form == _ANY or (b"\n" in text and (form == _NEWLINE or text.endswith(indented))):
                    if m.end() >= len(self.buf):
                        break
                    return m.start() + 1, m.end() - 1
            if self.eof or len(self.buf) >= limit:
                return None
            at = max(at, len(self.buf) - 64)
            self.fill(len(self.buf) + self.piece)

    def no_cut(self, wrong: str | None = None) -> str:
        if self.eof:
            return "invalid JSON (the events cannot be told apart: no `}, {` between two of them)"
        if wrong is not None:  # every cut tried was inside an event, or the events there are not JSON
            return (
                f"invalid JSON (the events from byte {self.base:,} do not decode as whole events within "
                f"{MAX_PIECES * self.piece / 1024**2:.0f} MiB: {wrong})"
            )
        return (
            f"no boundary between two trace events within {MAX_PIECES * self.piece / 1024**2:.0f} MiB "
            f"after byte {self.base:,}: not a trace this reader can cut"
        )

    def decode_piece(self, end: int, *, skimmable: bool = False) -> None:
        self.pieces += 1
        if skimmable and self.pieces > 1 and self.skim(end):
            return
        text = memoryview(self.buf)[:end]
        data = b"[" + text + b"]"
        del text
        events = self.decode(data, PART_FAST, 1, piece=True)
        self.scan_events(data, events)

    def skim(self, end: int) -> bool:
        """Decode only the GPU events of the piece; False: decode it whole."""
        if self.structural and not balanced(self.buf, 0, end):  # maybe a wrong cut: the strict decode says
            return False
        scanned = skim_scan(self.buf, end, self.interned, amd=self.amd)
        if scanned is None:
            return False
        self.collector.add(scanned)
        return True

    def tail(self) -> None:
        text = bytes(self.buf)
        self.buf = bytearray()
        prefix = b"[" if self.is_list else b'{"traceEvents":['
        top = self.decode(prefix + text, DOC, len(prefix))
        if isinstance(top, list):
            events: list[Any] = top
        else:
            events = top.traceEvents
            top.traceEvents = []
            self.collector.header(top)
        self.scan_events(text, events)

    # -- one strict decode, with its repair and its error message

    def decode(self, data: bytes, decoder: Any, shift: int, *, piece: bool = False, head: bool = False) -> Any:
        """Decode `data` (whose byte `shift` is byte `self.base` of the document).

        Strict types first, then permissive ones; invalid JSON is repaired only when the
        decoder stopped at a token Kineto is known to write (bare inf/nan, a raw control
        character), and only in `data`. Raises TraceError, or _BadCut when `piece` and the
        decoder stopped at the very end of `data`.
        """
        try:
            return _typed(decoder, data)
        except msgspec.ValidationError as exc:  # (a DecodeError too: caught first)
            raise TraceError(self.path, self.structure(exc, piece)) from None
        except msgspec.DecodeError as exc:
            # Its words, not the exception: kept in a local, its traceback (which holds this frame,
            # and `data`) would be a cycle, which the paused GC never frees: a piece retried at
            # every cut once leaked a copy of itself per retry (issue 20: 24 GB).
            first = str(exc)
        except RecursionError:  # msgspec decodes nested arrays and objects recursively
            raise TraceError(self.path, "invalid JSON (arrays or objects nested too deeply)") from None
        at = _error_byte(first)
        if at is not None and repairable(data, at):
            try:
                return _typed(decoder, sanitize(data))
            except msgspec.ValidationError as exc:
                raise TraceError(self.path, self.structure(exc, piece)) from None
            except msgspec.DecodeError:
                pass
            except RecursionError:
                raise TraceError(self.path, "invalid JSON (arrays or objects nested too deeply)") from None
        # A wrong cut ends the piece inside an event: the decoder stops at its very end, or says
        # "truncated". Any other error without a byte (invalid UTF-8) is the piece's own.
        if piece and ((at is None and "truncated" in first.lower()) or (at is not None and at >= len(data) - 1)):
            raise _BadCut(first)
        raise TraceError(self.path, self.describe(data, first, at, shift, head))

    def structure(self, exc: msgspec.ValidationError, piece: bool) -> str:
        text = str(exc)
        if piece and not self.collector.exact and _PATH_INDEX.search(text):
            raise Restart
        if piece:
            base = self.collector.doc.events
            text = _PATH_INDEX.sub(lambda m: f"`$.traceEvents[{base + int(m.group(1))}]", text)
        return f"unexpected structure: {text}"

    def describe(self, data: bytes, text: str, at: int | None, shift: int, head: bool) -> str:
        if at is None and "utf-8" in text.lower():  # msgspec does not say where
            at = _invalid_utf8(data)
            if at is not None:
                text = f"{text} (byte {at})"
        if at is not None:
            text = _BYTE.sub(f"(byte {self.base + at - shift:,})", text)
        if "truncated" in text.lower() and not head:
            return f"truncated JSON (the document ends early: {text})"
        lead = data[shift:].lstrip()[:1] if self.base == 0 else b"{"
        if lead not in (b"{", b"["):
            return not_json(data[shift:].lstrip()[:16])
        return f"invalid JSON ({text})"


def _is_fast(events: list[Any]) -> bool:
    return not events or type(events[0]) is not Event


def _typed(decoder: Any, data: bytes) -> Any:
    """Strict types, then the permissive ones."""
    if decoder is PART_FAST:
        try:
            return PART_FAST.decode(data)
        except msgspec.ValidationError:
            return PART.decode(data)
    if decoder is DOC:
        try:
            return DOC_FAST.decode(data)
        except msgspec.ValidationError:
            return DOC.decode(data)
    return decoder.decode(data)


def _error_byte(text: str) -> int | None:
    m = _BYTE.search(text)
    return int(m.group(1)) if m else None


def _invalid_utf8(data: bytes) -> int | None:
    """Where the first byte that is not UTF-8 is in `data` (only on the error path)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return None
