"""The evidence folder: kept traces, gzip-compressed, each with a small JSON beside it.

Layout of `--evidence-dir`: `ID.trace.json.gz` (the trace as the engine wrote it; gzip-compressed
here unless the engine wrote gzip itself, whose bytes are copied unchanged) and `ID.meta.json`
(`KeptWindow.meta`). IDs sort in the order the windows were kept: `YYYYmmddTHHMMSSZ-NNNNNN`.

Bounds: at most `max_files` kept windows and `max_bytes` bytes (traces and JSON together), at every
moment: a trace being written makes room as it grows, by deleting the oldest kept windows; a trace
that does not fit in the bound on its own is not kept (`too_large`). A failed keep (`io_error`:
full disk, unwritable folder; `too_large`) leaves no file behind; the oldest windows it pushed out
while it grew stay deleted (a trace the engine compressed, larger than the bound, is refused before
it pushes anything out).
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

TRACE_SUFFIX = ".trace.json.gz"
META_SUFFIX = ".meta.json"
ID_PATTERN = re.compile(r"\d{8}T\d{6}Z-\d{6}")
"""What an evidence id looks like; anything else is no id (a request for it is refused)."""
COPY_CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"

FailReason = Literal["io_error", "too_large"]
FAIL_REASONS: tuple[FailReason, ...] = ("io_error", "too_large")
"""`reason` label values of `warpwatch_evidence_failed_total`."""


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


@dataclass(frozen=True, slots=True)
class EvidenceView:
    """What the evidence metrics show, read at each scrape: windows kept and failed by reason, and the
    folder's size now."""

    kept: Mapping[str, int]
    failed: Mapping[str, int]
    bytes: int
    files: int


def is_id(text: str) -> bool:
    return ID_PATTERN.fullmatch(text) is not None


class EvidenceStore:
    """The folder (module doc). Thread-safe: one round keeps while HTTP requests list and read."""

    def __init__(self, folder: Path, max_bytes: int, max_files: int, clock: Callable[[], float] = time.time) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.clock = clock
        self._lock = threading.Lock()
        self._kept: dict[str, KeptWindow] = {}
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
            self._make_room(0, 0)

    # ---------------------------------------------------------------- reading

    def windows(self) -> list[KeptWindow]:
        """The kept windows, oldest first."""
        with self._lock:
            return list(self._kept.values())

    def total_bytes(self) -> int:
        with self._lock:
            return sum(k.bytes for k in self._kept.values())

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

    def keep(self, source: Path, meta: dict[str, Any]) -> KeptWindow:
        """Copy `source` in (compressed unless it is gzip already) with `meta` beside it; raise
        EvidenceError when it cannot be kept within the bounds or the folder refuses it."""
        with self._lock:
            self._seq += 1
            kid = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock())) + f"-{self._seq % 1_000_000:06d}"
            partial = self.folder / f".{kid}.partial"
            try:
                self.folder.mkdir(parents=True, exist_ok=True)  # an emptyDir may be new since start
                _refuse_known_too_large(source, self.max_bytes)
                self._make_room(0, 1)
                size = self._copy(source, partial)
                meta = {**meta, "id": kid, "trace_bytes": size}
                body = (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode()
                self._make_room(size + len(body), 0)
                os.replace(partial, self.folder / (kid + TRACE_SUFFIX))
                _write_atomically(self.folder / (kid + META_SUFFIX), body)
            except OSError as exc:
                _discard(partial, self.folder / (kid + TRACE_SUFFIX))
                raise EvidenceError("io_error", f"{self.folder}: {exc.strerror or exc}") from None
            except EvidenceError:
                _discard(partial)
                raise
            kept = KeptWindow(kid, size + len(body), meta)
            self._kept[kid] = kept
            return kept

    def _copy(self, source: Path, partial: Path) -> int:
        """`source` into `partial`, gzip-compressed unless it is gzip already, making room as it grows."""
        with source.open("rb") as src, partial.open("wb") as raw:
            out = _Bounded(raw, self._room_for)
            head = src.read(len(GZIP_MAGIC))
            if head == GZIP_MAGIC:
                out.write(head)
                shutil.copyfileobj(src, out, COPY_CHUNK)
            else:
                with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1, mtime=0) as gz:
                    gz.write(head)
                    shutil.copyfileobj(src, gz, COPY_CHUNK)
            raw.flush()
            os.fsync(raw.fileno())
            return out.written

    def _room_for(self, written: int) -> None:
        """Called as a trace grows to `written` bytes: evict until it fits, or refuse it."""
        self._make_room(written, 0)

    def _make_room(self, incoming: int, files: int) -> None:
        """Delete the oldest kept windows until `incoming` more bytes and `files` more windows fit."""
        used = sum(k.bytes for k in self._kept.values())
        while self._kept and (used + incoming > self.max_bytes or len(self._kept) + files > self.max_files):
            oldest = next(iter(self._kept.values()))
            (self.folder / (oldest.id + TRACE_SUFFIX)).unlink(missing_ok=True)
            (self.folder / (oldest.id + META_SUFFIX)).unlink(missing_ok=True)
            del self._kept[oldest.id]
            used -= oldest.bytes
        if incoming > self.max_bytes or files > self.max_files:
            raise EvidenceError(
                "too_large", f"a window of more than {self.max_bytes} bytes compressed does not fit in --evidence-bytes"
            )


def _refuse_known_too_large(source: Path, max_bytes: int) -> None:
    """A trace the engine compressed is kept as it is: one larger than the whole bound is refused
    before it pushes anything out."""
    with source.open("rb") as f:
        gz = f.read(len(GZIP_MAGIC)) == GZIP_MAGIC
    if gz and source.stat().st_size > max_bytes:
        raise EvidenceError(
            "too_large", f"a trace of {source.stat().st_size} bytes does not fit in --evidence-bytes ({max_bytes})"
        )


class _Bounded:
    """A binary writer that tells `grow(total)` before each write how large the file is about to be."""

    def __init__(self, raw: IO[bytes], grow: Callable[[int], None]) -> None:
        self.raw = raw
        self.grow = grow
        self.written = 0

    def write(self, data: bytes) -> int:
        n = len(data)
        if n:
            self.grow(self.written + n)
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
