"""Is a trace file finished? Checks shared by every source that picks files up from a folder.

Writers of Kineto traces do not write atomically in every case: `torch.profiler`'s
`export_chrome_trace(".../x.json.gz")` (used by vLLM's and SGLang's profilers and by
`tensorboard_trace_handler`) writes a plain JSON temp file and then streams it through
`gzip.open(path, "wb")`, so the `.gz` file is visible, and growing, for as long as compression
takes. libkineto itself writes `<file>.tmp` and renames it when complete.

So a file counts as finished only when

- its name is not a temporary one (`.tmp`, `.part`, `.partial`),
- for `.gz`: the gzip stream is complete: every member decompresses to its end and its CRC-32
  and length trailer match (`is_complete_gzip`);
- for `.json`: the first non-blank byte is `{` and the last is `}` (a cheap structural check;
  the file is not required to be valid JSON, because some Kineto versions write invalid JSON
  that the analyser still reads). A `{` ... `}` file can still be cut between two chunks of a
  writer (`{"traceEvents": [{...}` ends in `}`), so `is_complete_json` says whether it is one
  whole JSON object by structure (`jsonscan.JsonScan`: streamed in 1 MiB reads, never mapped,
  so a writer truncating the file under the check cannot fault the agent; a file that changes
  while it is read is not complete yet); a folder-watching source hands over a braced file that
  is not yet judged complete only once it has stayed unchanged for a while
  (`dirsource.JSON_SETTLE_S`).

Callers that poll a folder should also require the size to be unchanged between two polls
(`SettleTracker`) before calling these, so that the decompression runs about once per file.
`is_finished` (which `SettleTracker` uses) reads the file only as `confine.open_confined` opens
it: never through a link out of its folder, never a FIFO (which would block the caller).
"""

from __future__ import annotations

import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path

from .confine import RefusedFile, open_confined
from .jsonscan import CHUNK, JsonScan

__all__ = [
    "TEMP_SUFFIXES",
    "TRACE_SUFFIXES",
    "SettleTracker",
    "is_complete_gzip",
    "is_complete_json",
    "is_complete_json_file",
    "is_complete_trace_file",
    "is_finished",
]

TRACE_SUFFIXES = (".json", ".json.gz")
"""Suffixes of files `is_complete_trace_file` can judge."""

TEMP_SUFFIXES = (".tmp", ".part", ".partial")
"""Suffixes of files that are still being written, whatever their content."""

_GZIP_MAGIC = b"\x1f\x8b"
_ENDS = 4096  # bytes read at each end of a file by the cheap `{` ... `}` check
_MAX_OUT = 1 << 22  # decompress at most 4 MiB at a time: memory stays flat for any file size


def _nonblocking(path: str, flags: int) -> int:
    """`open`'s opener: a FIFO given by path does not block the caller (regular files ignore it)."""
    return os.open(path, flags | os.O_NONBLOCK)


def is_complete_gzip(path: str | os.PathLike[str]) -> bool:
    """True when `path` holds one or more complete gzip members and nothing else.

    Streams the file through zlib without keeping the output (memory stays at a few MiB),
    which also verifies each member's CRC-32 and length trailer. Trailing zero padding is
    accepted, like `gzip` does. False for a missing, empty, truncated, still-growing or
    corrupt file. Never raises for I/O or format errors.
    """
    try:
        with open(path, "rb", opener=_nonblocking) as f:
            if f.read(2) != _GZIP_MAGIC:
                return False
            f.seek(0)
            d = zlib.decompressobj(wbits=31)
            in_member = True
            pending = b""
            while True:
                chunk = pending or f.read(CHUNK)
                pending = b""
                if not chunk:
                    break
                if not in_member:
                    # Between members: only another gzip member or zero padding may follow.
                    stripped = chunk.lstrip(b"\0")
                    if not stripped:
                        continue
                    if len(stripped) < 2:
                        more = f.read(1)
                        if not more:
                            return False
                        stripped += more
                    if stripped[:2] != _GZIP_MAGIC:
                        return False
                    d = zlib.decompressobj(wbits=31)
                    in_member = True
                    chunk = stripped
                data = chunk
                while not d.eof:
                    out = d.decompress(data, _MAX_OUT)
                    data = d.unconsumed_tail
                    # Stop when the input is used up, unless the output limit was hit: then
                    # zlib may still hold output (and the trailer check) for this input.
                    if not data and len(out) < _MAX_OUT:
                        break
                if d.eof:
                    in_member = False
                    pending = d.unused_data
            return not in_member
    except (OSError, zlib.error, ValueError):
        return False


def _first_last_nonblank(path: str | os.PathLike[str], size: int) -> tuple[bytes, bytes]:
    with open(path, "rb", opener=_nonblocking) as f:
        head = f.read(min(size, _ENDS)).lstrip()
        f.seek(max(0, size - _ENDS))
        tail = f.read(_ENDS).rstrip()  # bounded: the file may have grown since `size`
    return head[:1], tail[-1:]


def is_complete_trace_file(path: str | os.PathLike[str], *, read_from: str | os.PathLike[str] | None = None) -> bool:
    """True when a `.json` or `.json.gz` trace file looks completely written (see module doc).

    False for other suffixes, temporary names, missing files and unreadable files. The name of
    `path` decides the format; the bytes come from `read_from` when given (e.g. the
    `/proc/self/fd/N` of a file opened by `confine.open_confined`), else from `path`.
    """
    name = os.fspath(path)
    data = path if read_from is None else read_from
    lower = name.lower()
    if lower.endswith(TEMP_SUFFIXES):
        return False
    if lower.endswith(".gz"):
        return is_complete_gzip(data)
    if not lower.endswith(".json"):
        return False
    try:
        size = os.stat(data).st_size
        if size < 2:
            return False
        first, last = _first_last_nonblank(data, size)
    except OSError:
        return False
    return first == b"{" and last == b"}"


def is_complete_json(path: str | os.PathLike[str]) -> bool:
    """True when `path` holds one whole JSON object by structure (`jsonscan`; trailing blanks
    allowed), read in `jsonscan.CHUNK` pieces: memory stays at a few MiB for any size.

    False for a missing, empty, unreadable or cut file, and for one that shrank, grew or was
    rewritten while it was read (its size or modification time changed): not complete yet, try
    again later. Never raises for I/O or content, and never maps the file (a writer truncating a
    mapped file would kill the reader with SIGBUS)."""
    try:
        with open(path, "rb", buffering=0, opener=_nonblocking) as f:
            before = os.fstat(f.fileno())
            if not stat.S_ISREG(before.st_mode) or before.st_size == 0:
                return False
            scan = JsonScan()
            left = before.st_size
            while left > 0 and not scan.gave_up:
                chunk = f.read(min(CHUNK, left))
                if not chunk:
                    return False  # shorter than it was: truncated under the check
                left -= len(chunk)
                scan.feed(chunk)
            after = os.fstat(f.fileno())
    except (OSError, ValueError):
        return False
    return scan.complete() and (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def is_complete_json_file(path: Path, folder: Path | None = None) -> bool:
    """`is_complete_json` on `path`, read as `confine.open_confined` opens it."""
    try:
        with open_confined(path, folder) as opened:
            return is_complete_json(opened.reader_path)
    except RefusedFile:
        return False


def is_finished(path: Path, folder: Path | None = None) -> bool:
    """`is_complete_trace_file` on `path`, read as `confine.open_confined` opens it (module doc);
    False for anything `confine` refuses."""
    try:
        with open_confined(path, folder) as opened:
            return is_complete_trace_file(path, read_from=opened.reader_path)
    except RefusedFile:
        return False


@dataclass
class _Seen:
    size: int
    mtime_ns: int
    stable: bool = False
    complete: bool | None = None


class SettleTracker:
    """Follows files across polls; a file is *settled* once its size and mtime were the same on
    two consecutive `observe` calls and `is_complete_trace_file` then said yes.

    The completeness check runs only on a stable file and only once per (size, mtime).
    """

    def __init__(self) -> None:
        self._seen: dict[Path, _Seen] = {}

    def observe(self, path: Path) -> bool:
        """Record the file's current state; return True if it is settled now."""
        try:
            st = path.stat()
        except OSError:
            self._seen.pop(path, None)
            return False
        prev = self._seen.get(path)
        if prev is None or prev.size != st.st_size or prev.mtime_ns != st.st_mtime_ns:
            self._seen[path] = _Seen(size=st.st_size, mtime_ns=st.st_mtime_ns)
            return False
        prev.stable = True
        if prev.complete is None:
            prev.complete = st.st_size > 0 and is_finished(path)
        return prev.complete

    def size(self, path: Path) -> int | None:
        """The size seen at the last `observe`, or None if the file was never seen."""
        seen = self._seen.get(path)
        return None if seen is None else seen.size
