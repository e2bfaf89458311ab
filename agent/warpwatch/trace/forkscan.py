"""The pieces of one document scanned in several processes (`scan_pieces`), for `parallel`.

The piece numbers wait in a pipe that every process reads from, so each takes the next piece
when it is free: the parent, which also rebuilds the other processes' results, simply scans
fewer. A child writes each result (msgpack) to its own scratch file, so writing never waits for
the parent, and sends a 20-byte note on a pipe saying where it is, as soon as it is ready. Any
failure in a child (it sends nothing more) leaves its pieces without a result: the caller gets
None and reads the document another way.
"""

from __future__ import annotations

import os
import select
import signal
import struct
import tempfile
from collections.abc import Callable
from contextlib import suppress

import msgspec

from .schema import Interned, Scanned

ScanPiece = Callable[[int, bytearray, Interned], Scanned]
"""Scans piece number i, with a buffer to reuse and the process's interned strings."""

_PIECE = struct.Struct("<I")
_NOTE = struct.Struct("<IQQ")  # piece number, offset and size of its result in the child's scratch file
_SEND = msgspec.msgpack.Encoder()
_RECEIVE: msgspec.msgpack.Decoder[Scanned] = msgspec.msgpack.Decoder(Scanned)


def scan_pieces(
    count: int, workers: int, scan: ScanPiece, interned: Interned, received: Callable[[Scanned], None]
) -> list[Scanned] | None:
    """Pieces 0..count-1 scanned by the parent and `workers - 1` children; results in piece
    order, None unless every piece has one. `received` sees each result as it comes (it may
    raise to stop the read: the children are then killed)."""
    if count * _PIECE.size > 32 * 1024:  # (the pipe holds 64 KiB)
        return None
    results: list[Scanned | None] = [None] * count
    todo_r, todo_w = os.pipe()
    os.write(todo_w, b"".join(_PIECE.pack(i) for i in range(count)))
    os.close(todo_w)
    children: list[_Child] = []
    try:
        for _ in range(min(workers, count) - 1):
            children.append(_fork_scanner(scan, todo_r))
        buf = bytearray()
        while (i := _next_piece(todo_r)) is not None:
            results[i] = r = scan(i, buf, interned)
            received(r)
            for child in children:
                child.receive(results, received, wait=False)
        del buf
        for child in children:
            child.receive(results, received, wait=True)
    finally:
        os.close(todo_r)
        for child in children:
            child.close()
    complete = [r for r in results if r is not None]
    return complete if len(complete) == len(results) else None


def _next_piece(todo: int) -> int | None:
    data = os.read(todo, _PIECE.size)  # pipe reads this small are atomic: no piece is taken twice
    return _PIECE.unpack(data)[0] if data else None


class _Child:
    """A scanning child process: its notes pipe and its scratch file."""

    def __init__(self, pid: int, notes: int, store: int) -> None:
        self.pid = pid
        self.notes = notes
        self.store = store
        self.pending = b""
        self.done = False

    def receive(self, results: list[Scanned | None], received: Callable[[Scanned], None], *, wait: bool) -> None:
        """Decode the pieces finished so far, or (`wait`) every piece until the child is done."""
        while not self.done and (wait or select.select([self.notes], [], [], 0)[0]):
            data = os.read(self.notes, 64 * 1024)
            if not data:
                self.done = True
                return
            data = self.pending + data
            whole = len(data) - len(data) % _NOTE.size
            for piece, offset, size in _NOTE.iter_unpack(data[:whole]):
                results[piece] = r = _RECEIVE.decode(os.pread(self.store, size, offset))
                received(r)
            self.pending = data[whole:]

    def close(self) -> None:
        with suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)  # a child still running here is no longer needed
        os.waitpid(self.pid, 0)
        os.close(self.notes)
        os.close(self.store)


def _fork_scanner(scan: ScanPiece, todo: int) -> _Child:
    """A child process that scans the pieces it takes from `todo` and stores each result."""
    notes_r, notes_w = os.pipe()
    store = _scratch_file()
    pid = os.fork()
    if pid == 0:  # the child: never returns; sends nothing more after a failure
        code = 1
        try:
            os.close(notes_r)
            buf = bytearray()
            offset = 0
            interned = Interned()
            while (i := _next_piece(todo)) is not None:
                payload = _SEND.encode(scan(i, buf, interned))
                _write_all(store, payload)
                os.write(notes_w, _NOTE.pack(i, offset, len(payload)))  # atomic: shorter than PIPE_BUF
                offset += len(payload)
            code = 0
        finally:
            os._exit(code)
    os.close(notes_w)
    return _Child(pid, notes_r, store)


def _scratch_file() -> int:
    """An anonymous file (in memory where the OS allows) for a child's results."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("warpwatch-trace", getattr(os, "MFD_CLOEXEC", 0))
    with tempfile.TemporaryFile() as tmp:
        return os.dup(tmp.fileno())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
