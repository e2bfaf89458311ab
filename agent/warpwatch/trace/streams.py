"""The document's text, a bounded read at a time: `read(n)` gives at most n bytes of the
decompressed document, never more than `max_bytes` in all (then a `too_large` TraceError).

A `FileStream` reads `READ_BYTES` per system call; a gzip file (gzip magic) is gunzipped with
`zlib`, with a bound on each output, so no call holds more than it was asked for, and a file of
several gzip members (a concatenated .gz) reads as their concatenation. `BytesStream` serves
bytes already in memory. `restart` goes back to the start, for a second, strict, reading
(`pieces.read_document`).
"""

from __future__ import annotations

import abc
import os
import zlib

from ..errors import TraceError
from .messages import too_large

READ_BYTES = 1024**2
"""Bytes read (or decompressed) per system call."""


class Stream(abc.ABC):
    """The document's text: `read(n)` gives at most n bytes (b"" at the end); never more than
    `max_bytes` in all (then a `too_large` TraceError). A stream states how it restarts and reads."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.total = 0

    def restart(self) -> None:
        """Back to the start of the document (for a second, strict, reading)."""
        self.total = 0
        self._restart()

    @abc.abstractmethod
    def _restart(self) -> None:
        """Back to the document's first byte."""

    def read(self, n: int) -> bytes:
        data = self._read(n)
        self.total += len(data)
        if self.total > self.max_bytes:
            raise TraceError(self.path, too_large(self.max_bytes), kind="too_large")
        return data

    @abc.abstractmethod
    def _read(self, n: int) -> bytes:
        """At most n bytes of the document, b"" at its end."""


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
                    raise TraceError(self.path, "truncated gzip stream (the file ends before the compressed data does)")
            try:
                out = d.decompress(source, n)
            except zlib.error as exc:
                raise TraceError(self.path, f"corrupt gzip data ({exc})") from None
            if out:
                return out
