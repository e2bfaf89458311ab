"""The piece reader: a trace document, read and decompressed in bounded pieces, decoded piece
by piece; never the whole file, never its whole decompressed text.

Layout of a document: a head (the top-level keys before `traceEvents`, up to its `[`), the
events, and a tail (the last events, `]`, the keys after them). The reader

- reads (and gunzips, `zlib` with a bound on each output) about `piece_bytes` at a time;
- decodes the head alone: a file that is not a trace fails there, within its first piece;
- cuts the events between two events (at `}` `,` `{`, preferring a cut with a newline in it,
  which is never inside a JSON string) and decodes each piece strictly as a list of events.
  A cut is proven by the decode itself: the piece starts between two events, so it decodes as
  a list only if it also ends between two events. A piece that fails at its very end was cut
  wrongly and is extended to the next cut (up to `MAX_PIECES` pieces); one that fails inside
  is invalid JSON, reported with its offset in the document;
- repairs Kineto's invalid JSON (bare `inf`/`nan`, raw control characters in strings) only
  in a piece whose decode stopped at such a token, and only in that piece;
- keeps from each piece what the Trace needs (`schema.scan`) and drops the rest before the next.

Memory is then the pieces in flight plus what is kept (`membudget`): a read that would keep
more kernel launches than `ReadLimits.max_launches` stops with a `too_large` TraceError.

A plain file that the caller may fork for is decoded by several processes (`parallel`); this
module is the one-process path that every other input takes, and the fallback of the parallel
one.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..errors import TraceError
from ..gcpause import gc_paused
from ..membudget import ReadLimits
from ..model import KernelLaunch
from .schema import (
    DOC,
    DOC_FAST,
    HEADER_FIELDS,
    HIP_MARK,
    PART,
    PART_FAST,
    Event,
    FastHeader,
    Header,
    Interned,
    Scanned,
    scan,
)
from .skim import skim_scan

READ_BYTES = 1024**2
"""Bytes read (or decompressed) per system call."""
SEARCH_BYTES = 256 * 1024
"""How far past its target size a piece may run to find a cut."""
MAX_PIECES = 4
"""A piece that cannot be cut within this many piece sizes is an error."""

_ANY, _NEWLINE, _INDENTED = 0, 1, 2
_WS = re.compile(rb"\s*")
_BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*\{")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BYTE = re.compile(r"\(byte (\d+)\)")
_PATH_INDEX = re.compile(r"`\$\[(\d+)\]")
_NON_FINITE = re.compile(rb"-?(?:Infinity|inf|NaN|nan)")


# --- Decompressed text, a bounded read at a time


class Stream:
    """The document's text: `read(n)` gives at most n bytes (b"" at the end); never more than
    `max_bytes` in all (then a `too_large` TraceError)."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.total = 0

    def restart(self) -> None:
        """Back to the start of the document (for a second, strict, reading)."""
        self.total = 0
        self._restart()

    def _restart(self) -> None:
        raise NotImplementedError

    def read(self, n: int) -> bytes:
        data = self._read(n)
        self.total += len(data)
        if self.total > self.max_bytes:
            raise TraceError(self.path, too_large(self.max_bytes), kind="too_large")
        return data

    def _read(self, n: int) -> bytes:
        raise NotImplementedError


class BytesStream(Stream):
    def __init__(self, data: bytes, path: str, max_bytes: int) -> None:
        super().__init__(path, max_bytes)
        self.view = memoryview(data)
        self.at = 0

    def _restart(self) -> None:
        self.at = 0

    def _read(self, n: int) -> bytes:
        chunk = bytes(self.view[self.at : self.at + n])
        self.at += len(chunk)
        return chunk


class FileStream(Stream):
    """A plain file, or a gzip one (gzip magic), read `READ_BYTES` at a time."""

    def __init__(self, fd: int, path: str, max_bytes: int) -> None:
        super().__init__(path, max_bytes)
        self.fd = fd
        self.gzip = os.pread(fd, 2, 0) == b"\x1f\x8b"
        self.inflate = zlib.decompressobj(31) if self.gzip else None
        self.pending = b""
        self.file_eof = False

    def _restart(self) -> None:
        os.lseek(self.fd, 0, os.SEEK_SET)
        self.inflate = zlib.decompressobj(31) if self.gzip else None
        self.pending = b""
        self.file_eof = False

    def _read(self, n: int) -> bytes:
        if self.inflate is None:
            return os.read(self.fd, n)
        while True:
            d = self.inflate
            if d.eof:  # end of a gzip member: another may follow (a concatenated .gz)
                rest = d.unused_data + self.pending
                self.pending = b""
                while len(rest) < 2 and not self.file_eof:
                    more = os.read(self.fd, READ_BYTES)
                    self.file_eof = not more
                    rest += more
                if not rest.strip(b"\0"):
                    if self.file_eof:
                        return b""
                    rest = b""
                    continue
                if rest[:2] != b"\x1f\x8b":
                    raise TraceError(self.path, "corrupt gzip data (trailing garbage after the compressed data)")
                self.inflate = d = zlib.decompressobj(31)
                self.pending = rest
            source = d.unconsumed_tail or self.pending
            self.pending = b""
            if not source:
                source = os.read(self.fd, READ_BYTES)
                if not source:
                    self.file_eof = True
                    raise TraceError(
                        self.path, "truncated gzip stream (the file ends before the compressed data does)"
                    )
            try:
                out = d.decompress(source, n)
            except zlib.error as exc:
                raise TraceError(self.path, f"corrupt gzip data ({exc})") from None
            if out:
                return out


# --- The document, piece by piece


@dataclass
class Document:
    """A decoded trace before device properties are resolved."""

    header: Header
    has_events: bool
    launches: list[KernelLaunch] = field(default_factory=list)
    span: tuple[float, float] | None = None
    gpu_lo: float = math.inf
    gpu_hi: float = -math.inf
    hip_calls: dict[int, tuple[str, Any, Any]] = field(default_factory=dict)
    """correlation -> (name, grid, block) of the hip* runtime events."""
    correlations: list[int] = field(default_factory=list)
    events: int = 0
    span_seen: bool = False


class Collector:
    """Adds up the pieces' contributions, in document order, under the launch cap."""

    def __init__(self, path: str, limits: ReadLimits) -> None:
        self.path = path
        self.limits = limits
        self.doc = Document(Header(), False)
        self.exact = True
        """Every event counted so far (no skimmed piece)."""

    def add(self, s: Scanned) -> None:
        """Add the next piece. A skimmed piece (`events` -1: only its GPU events were decoded)
        leaves the events uncounted, so an error message can no longer give an event's index:
        Restart."""
        doc = self.doc
        skimmed = s.events < 0
        if (s.bad is not None or (not doc.span_seen and s.span_bad is not None)) and (skimmed or not self.exact):
            raise Restart
        self.exact = self.exact and not skimmed
        if s.bad is not None:
            index, message = s.bad
            raise TraceError(self.path, message.format(index=doc.events + index))
        if not doc.span_seen and s.span_bad is not None:
            index, message = s.span_bad
            raise TraceError(self.path, message.format(index=doc.events + index))
        if not doc.span_seen and s.span is not None:
            doc.span = s.span
            doc.span_seen = True
        doc.events += max(0, s.events)
        doc.has_events = doc.has_events or s.events > 0
        doc.launches += s.launches
        if s.hip_calls:
            doc.hip_calls.update((c, (name, grid, block)) for c, name, grid, block in s.hip_calls)
        doc.correlations += s.correlations
        doc.gpu_lo = min(doc.gpu_lo, s.gpu_lo)
        doc.gpu_hi = max(doc.gpu_hi, s.gpu_hi)
        cap = self.limits.max_launches
        if cap is not None and len(doc.launches) > cap:
            raise TraceError(self.path, over_budget(cap, self.limits.budget), kind="too_large")

    def header(self, top: Header | FastHeader) -> None:
        for key in HEADER_FIELDS:
            if getattr(top, key) is not None:
                setattr(self.doc.header, key, getattr(top, key))


class _BadCut(Exception):
    """A piece did not end between two events."""


class Restart(Exception):
    """An error message needs the index of an event in a skimmed document: read it again, strictly."""


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

    def fill(self, size: int) -> None:
        cancel = self.limits.cancel
        if cancel is not None and cancel():
            raise TraceError(self.path, "read abandoned: the agent is stopping", kind="io_error")
        while len(self.buf) < size and not self.eof:
            data = self.stream.read(min(READ_BYTES, size - len(self.buf)))
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
                if self.eof and len(self.buf) <= self.piece + SEARCH_BYTES:
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
        self.skimming = self.skimming and self.indent is not None
        self.drop(len(lead))

    def next_piece(self) -> bool:
        """Decode the next piece of events, extending it past a wrong cut; False: what is
        left (the document is all read) is the tail."""
        at = self.piece - SEARCH_BYTES
        form = _INDENTED if self.skimming else _NEWLINE
        while True:
            cut = self.find_cut(at, form)
            if cut is None:
                if self.eof:
                    return False
                if form > _ANY:  # a document written on one line: any cut will do (each is checked)
                    form -= 1
                    continue
                raise TraceError(self.path, self.no_cut())
            end, nxt = cut
            try:
                self.decode_piece(end, skimmable=form == _INDENTED)
            except _BadCut:
                at = nxt
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
            for m in _BETWEEN_EVENTS.finditer(self.buf, at):
                text = m.group()
                if form == _ANY or (b"\n" in text and (form == _NEWLINE or text.endswith(indented))):
                    if m.end() >= len(self.buf):
                        break
                    return m.start() + 1, m.end() - 1
            if self.eof or len(self.buf) >= limit:
                return None
            at = max(at, len(self.buf) - 64)
            self.fill(len(self.buf) + self.piece)

    def no_cut(self) -> str:
        if self.eof:
            return "invalid JSON (the events cannot be told apart: no `}, {` between two of them)"
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
            first = exc
        except RecursionError:  # msgspec decodes nested arrays and objects recursively
            raise TraceError(self.path, "invalid JSON (arrays or objects nested too deeply)") from None
        at = _error_byte(first)
        if at is not None and _repairable(data, at):
            try:
                return _typed(decoder, sanitize(data))
            except msgspec.ValidationError as exc:
                raise TraceError(self.path, self.structure(exc, piece)) from None
            except msgspec.DecodeError:
                pass
            except RecursionError:
                raise TraceError(self.path, "invalid JSON (arrays or objects nested too deeply)") from None
        if piece and (at is None or at >= len(data) - 1):
            raise _BadCut
        raise TraceError(self.path, self.describe(data, first, at, shift, head))

    def structure(self, exc: msgspec.ValidationError, piece: bool) -> str:
        text = str(exc)
        if piece and not self.collector.exact and _PATH_INDEX.search(text):
            raise Restart
        if piece:
            base = self.collector.doc.events
            text = _PATH_INDEX.sub(lambda m: f"`$.traceEvents[{base + int(m.group(1))}]", text)
        return f"unexpected structure: {text}"

    def describe(self, data: bytes, exc: Exception, at: int | None, shift: int, head: bool) -> str:
        text = str(exc)
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


def has_amd_device(props: object) -> bool:
    """An AMD device in `deviceProperties`: its trace's runtime events say the grid's unit."""
    entries = props if isinstance(props, list) else [props]
    return any(isinstance(e, dict) and (e.get("warpSize") == 64 or "AMD" in str(e.get("name"))) for e in entries)


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


def _error_byte(exc: Exception) -> int | None:
    m = _BYTE.search(str(exc))
    return int(m.group(1)) if m else None


def _repairable(data: bytes, at: int) -> bool:
    """Did the decoder stop at a token Kineto writes invalidly?"""
    return at < len(data) and (data[at] < 0x20 or _NON_FINITE.match(data, at) is not None)


# A JSON string, or a bare non-finite token outside strings. Strings are matched first so
# that `"inf"` inside a string is left alone.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|-?(?:Infinity|inf|NaN|nan)\b', re.DOTALL)
_CONTROL = re.compile(rb"[\x00-\x1f]")


def sanitize(data: bytes) -> bytes:
    """Make Kineto's known invalid JSON valid: quote bare inf/nan, escape raw control characters.

    Applied to one piece (at most `MAX_PIECES` x `piece_bytes`), never to a whole document."""

    def fix(m: re.Match[bytes]) -> bytes:
        tok = m.group(0)
        if tok[:1] == b'"':
            return _CONTROL.sub(lambda c: b"\\u%04x" % c.group(0)[0], tok)
        low = tok.lower()
        if b"nan" in low:
            return b'"nan"'
        return b'"-inf"' if tok.startswith(b"-") else b'"inf"'

    return _TOKENS.sub(fix, data)


def too_large(max_bytes: int) -> str:
    return f"larger than the {max_bytes:,}-byte limit once decompressed (raise max_trace_bytes to read it)"


def over_budget(cap: int, budget: str) -> str:
    return f"keeps more than {cap:,} kernel launches, more than the memory budget allows ({budget})"


def not_json(head: bytes) -> str:
    return f"not JSON (starts with {head!r})"

