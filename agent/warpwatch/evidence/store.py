"""The evidence folder: kept traces, gzip-compressed, each with a small JSON beside it.

Layout of `--evidence-dir`: `ID.trace.json.gz` (the trace as the engine wrote it; gzip-compressed
here unless the engine wrote gzip itself, whose bytes are copied unchanged) and `ID.meta.json`
(`KeptWindow.meta`). IDs sort in the order the windows were handed over: `YYYYmmddTHHMMSSZ-NNNNNN`;
an id is reserved (`reserve`, then `pending`) before its trace is written, so that it can be named
(an exemplar) while the copy runs.

Bounds: at most `max_files` kept windows and `max_bytes` bytes (traces, their JSON and the trace
being written), at every moment. Nothing kept is deleted for a window before its size is known: a
trace the engine compressed has its size on disk; one compressed here is written while it fits in
the room left, and once it does not, compressed on without writing to learn its size, then written
again (gzip at a fixed level and mtime is the same bytes twice). A trace whose size with its JSON
exceeds `max_bytes` is refused (`too_large`) and pushes nothing out; one that fits pushes out the
oldest windows, exactly as many as it needs. A failed keep (`io_error`: full disk, unwritable
folder; `too_large`; `shutdown`) leaves no file behind.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

TRACE_SUFFIX = ".trace.json.gz"
META_SUFFIX = ".meta.json"
ID_PATTERN = re.compile(r"\d{8}T\d{6}Z-\d{6}")
"""What an evidence id looks like; anything else is no id (a request for it is refused)."""
COPY_CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
GZIP_LEVEL = 1

FailReason = Literal["io_error", "too_large", "queue_full", "shutdown"]
FAIL_REASONS: tuple[FailReason, ...] = ("io_error", "too_large", "queue_full", "shutdown")
"""`reason` label values of `warpwatch_evidence_failed_total`."""

Opener = Callable[[Path], IO[bytes]]
"""Opens the file a trace is written to (a test slows or fails it)."""


class EvidenceError(Exception):
    """A keep failed; `reason` is one of `FAIL_REASONS`."""

    def __init__(self, reason: FailReason, detail: str) -> None:
        super().__init__(detail)
        self.reason: FailReason = reason


@dataclass(frozen=True, slots=True)
class KeptWindow:
    """One kept window: its id, its size on disk (trace and JSON) and the JSON's content."""

    id: str
    bytes: int
    meta: dict[str, Any]


def is_id(text: str) -> bool:
    return ID_PATTERN.fullmatch(text) is not None


def _open_for_writing(path: Path) -> IO[bytes]:
    return path.open("wb")


class EvidenceStore:
    """The folder (module doc). Thread-safe: one keep at a time (a worker) while HTTP requests list
    and read; a keep holds the state lock only to count and evict, never while it copies."""

    def __init__(
        self,
        folder: Path,
        max_bytes: int,
        max_files: int,
        clock: Callable[[], float] = time.time,
        opener: Opener = _open_for_writing,
    ) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.clock = clock
        self.opener = opener
        self._lock = threading.Lock()  # _kept, _pending, _seq
        self._keeping = threading.Lock()  # one keep at a time: the room it counts on stays its own
        self._kept: dict[str, KeptWindow] = {}
        self._pending: set[str] = set()
        self._seq = 0

    def open(self) -> None:
        """Create the folder, take in the windows kept there before, and hold the bounds over them."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for stray in self.folder.glob(".*.partial"):
            stray.unlink(missing_ok=True)
        for meta_path in sorted(self.folder.glob("*" + META_SUFFIX)):
            kid = meta_path.name.removesuffix(META_SUFFIX)
            trace = self.trace_path(kid)
            if not is_id(kid) or trace is None:
                continue
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
                size = trace.stat().st_size + meta_path.stat().st_size
            except (OSError, ValueError):
                continue
            self._kept[kid] = KeptWindow(kid, size, meta if isinstance(meta, dict) else {})
            self._seq = max(self._seq, int(kid.rsplit("-", 1)[1]))
        with self._lock:
            self._evict_for(0, 0)

    # ---------------------------------------------------------------- reading

    def windows(self) -> list[KeptWindow]:
        """The kept windows, oldest first."""
        with self._lock:
            return list(self._kept.values())

    def total_bytes(self) -> int:
        with self._lock:
            return sum(k.bytes for k in self._kept.values())

    def pending(self, kid: str) -> bool:
        """Whether `kid` is reserved and its trace not yet kept (or failed)."""
        with self._lock:
            return kid in self._pending

    def trace_path(self, kid: str) -> Path | None:
        """The trace file of a kept id; None for anything that is not an id (no path is built from it)."""
        if not is_id(kid):
            return None
        path = self.folder / (kid + TRACE_SUFFIX)
        return path if path.is_file() else None

    def read_trace(self, kid: str) -> bytes | None:
        """A kept trace's bytes (gzip), or None when `kid` is no kept window."""
        with self._lock:
            if kid not in self._kept:
                return None
        try:
            return (self.folder / (kid + TRACE_SUFFIX)).read_bytes()
        except OSError:  # evicted since
            return None

    # ---------------------------------------------------------------- keeping

    def reserve(self) -> str:
        """A new id, pending until `keep` with it returns or raises, or `release`."""
        with self._lock:
            self._seq += 1
            kid = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock())) + f"-{self._seq % 1_000_000:06d}"
            self._pending.add(kid)
            return kid

    def release(self, kid: str) -> None:
        """A reserved id that will not be kept."""
        with self._lock:
            self._pending.discard(kid)

    def keep(
        self,
        source: Path,
        meta: dict[str, Any],
        kid: str | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> KeptWindow:
        """Copy `source` in (compressed unless it is gzip already) with `meta` beside it, as `kid`
        (reserved; a new id when None); raise EvidenceError when it cannot be kept within the bounds,
        the folder refuses it, or `cancelled()` turns true while it is written."""
        with self._keeping:
            kid = kid if kid is not None else self.reserve()
            partial = self.folder / f".{kid}.partial"
            try:
                self.folder.mkdir(parents=True, exist_ok=True)  # an emptyDir may be new since start
                kept = self._write(source, partial, kid, meta, cancelled)
            except OSError as exc:
                _discard(partial, self.folder / (kid + TRACE_SUFFIX))
                raise EvidenceError("io_error", f"{self.folder}: {exc.strerror or exc}") from None
            except EvidenceError:
                _discard(partial)
                raise
            finally:
                self.release(kid)
            return kept

    def _write(
        self, source: Path, partial: Path, kid: str, meta: dict[str, Any], cancelled: Callable[[], bool]
    ) -> KeptWindow:
        """The trace into `partial` (sized first where it is not known), room made, then both files."""

        def body_for(size: int) -> bytes:
            return (json.dumps({**meta, "id": kid, "trace_bytes": size}, indent=1, sort_keys=True) + "\n").encode()

        with source.open("rb") as src:
            engine_gzip = src.read(len(GZIP_MAGIC)) == GZIP_MAGIC
            if engine_gzip:
                size = os.fstat(src.fileno()).st_size
                self._make_room(size + len(body_for(size)))
                written = self._copy(src, partial, size, compress=False, cancelled=cancelled)
            else:
                written, complete = self._first_pass(src, partial, cancelled)
                if not complete:  # it did not fit in the room left: now its size is known
                    self._make_room(written + len(body_for(written)))
                    written = self._copy(src, partial, written, compress=True, cancelled=cancelled)
        body = body_for(written)
        self._make_room(written + len(body))  # a no-op where room was made for it above
        os.replace(partial, self.folder / (kid + TRACE_SUFFIX))
        _write_atomically(self.folder / (kid + META_SUFFIX), body)
        kept = KeptWindow(kid, written + len(body), json.loads(body))
        with self._lock:
            self._kept[kid] = kept
        return kept

    def _first_pass(self, src: IO[bytes], partial: Path, cancelled: Callable[[], bool]) -> tuple[int, bool]:
        """Compress `src` into `partial` within the room the kept windows leave; past it, only count.
        Returns (compressed size, whether all of it is in `partial`)."""
        with self._lock:
            room = self.max_bytes - sum(k.bytes for k in self._kept.values())
        src.seek(0)
        with self.opener(partial) as raw:
            out = _Sink(raw, room, cancelled, spill=True)
            _compress(src, out)
            raw.flush()
            os.fsync(raw.fileno())
        return out.written, not out.spilled

    def _copy(self, src: IO[bytes], partial: Path, size: int, *, compress: bool, cancelled: Callable[[], bool]) -> int:
        """`src` from its start into `partial`, at most the `size` bytes room was made for."""
        src.seek(0)
        with self.opener(partial) as raw:
            out = _Sink(raw, size, cancelled, spill=False)
            if compress:
                _compress(src, out)
            else:
                shutil.copyfileobj(src, out, COPY_CHUNK)
            raw.flush()
            os.fsync(raw.fileno())
        return out.written

    def _make_room(self, incoming: int) -> None:
        with self._lock:
            self._evict_for(incoming, 1)

    def _evict_for(self, incoming: int, files: int) -> None:
        """Refuse a window of `incoming` bytes that cannot fit at all; else delete the oldest kept
        windows until it and `files` more windows fit (none when it fits already)."""
        if incoming > self.max_bytes or files > self.max_files:
            raise EvidenceError(
                "too_large",
                f"a window of {incoming} bytes compressed does not fit in --evidence-bytes ({self.max_bytes})",
            )
        used = sum(k.bytes for k in self._kept.values())
        while self._kept and (used + incoming > self.max_bytes or len(self._kept) + files > self.max_files):
            oldest = next(iter(self._kept.values()))
            (self.folder / (oldest.id + TRACE_SUFFIX)).unlink(missing_ok=True)
            (self.folder / (oldest.id + META_SUFFIX)).unlink(missing_ok=True)
            del self._kept[oldest.id]
            used -= oldest.bytes


def _compress(src: IO[bytes], out: _Sink) -> None:
    """gzip at a fixed level with mtime 0 and no name: the same input gives the same bytes."""
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) as gz:
        shutil.copyfileobj(src, gz, COPY_CHUNK)


class _Sink:
    """A binary writer onto `raw` that holds at most `limit` bytes. Past it, a spilling sink stops
    writing and only counts (`spilled`); any other raises `too_large` (the source grew since it was
    sized). Raises `shutdown` once `cancelled()`."""

    def __init__(self, raw: IO[bytes], limit: int, cancelled: Callable[[], bool], *, spill: bool) -> None:
        self.raw = raw
        self.limit = limit
        self.cancelled = cancelled
        self.spill = spill
        self.spilled = False
        self.written = 0

    def write(self, data: bytes) -> int:
        n = len(data)
        if self.cancelled():
            raise EvidenceError("shutdown", "the agent stopped while the trace was being kept")
        if not self.spilled and self.written + n > self.limit:
            if not self.spill:
                raise EvidenceError("too_large", f"the trace grew past the {self.limit} bytes it was sized at")
            self.spilled = True
        if not self.spilled:
            self.raw.write(data)
        self.written += n
        return n

    def flush(self) -> None:
        self.raw.flush()


def _discard(*paths: Path) -> None:
    """Remove what a failed keep wrote, where the folder still allows it."""
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def _write_atomically(path: Path, body: bytes) -> None:
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_bytes(body)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
