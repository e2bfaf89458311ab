"""The trace files Kineto clients write for the daemon source: finding one, and deleting those
of windows nobody will read.

Kineto names the file it writes after the configured ``ACTIVITIES_LOG_FILE`` with the pid
inserted before ``.json`` (``warpwatch_<id>.json`` becomes ``warpwatch_<id>_<pid>.json``),
and writes ``<name>.tmp`` first, renaming it when complete (verified with torch 2.13).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

ABANDONED_KEEP_S = 600.0
"""How long the files of an abandoned window are looked for: Kineto may write one late."""


class TraceFiles:
    """The files clients write into `trace_dir`, one stem per client and window."""

    def __init__(self, trace_dir: Path, delete_processed: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.trace_dir = trace_dir
        self._clock = clock
        self.delete_processed = delete_processed
        self._lock = threading.Lock()
        self._abandoned: dict[str, float] = {}  # stem -> retry until (on `clock`)

    def find(self, stem: str, pid: int) -> Path | None:
        """The window's file: any entry but a directory (links and FIFOs too, never followed or
        opened here), so that the reader's `confine` refuses what is not a plain file, by name."""
        expected = self.trace_dir / f"{stem}_{pid}.json"
        if _is_entry(expected):
            return expected
        # The pid Kineto uses could differ from the one it reported (another pid namespace).
        for candidate in sorted(self.trace_dir.glob(f"{stem}_*.json")):
            if _is_entry(candidate):
                return candidate
        return None

    def on_done(self, stem: str) -> Callable[[bool], None]:
        def done(processed: bool) -> None:
            # Nothing else will ever read these files: delete them whether or not analysed.
            if self.delete_processed:
                _delete_stems(self.trace_dir, {stem})

        return done

    def abandon(self, stem: str) -> None:
        """A late file from a slow or refused trace must not stay behind: delete it when it comes."""
        with self._lock:
            self._abandoned[stem] = self._clock() + ABANDONED_KEEP_S

    def sweep(self, everything: bool = False) -> None:
        """Delete files of abandoned windows; keep retrying for a while, as Kineto may be late."""
        now = self._clock()
        with self._lock:
            stems = set(self._abandoned)
            self._abandoned = {} if everything else {s: t for s, t in self._abandoned.items() if now < t}
        if stems:
            _delete_stems(self.trace_dir, stems)


def _is_entry(path: Path) -> bool:
    try:
        return not stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _delete_stems(trace_dir: Path, stems: set[str]) -> None:
    """Delete every `<stem>_*` entry of `stems`, listing the folder once however many stems there
    are (ten minutes of abandoned windows can be thousands)."""
    try:
        with os.scandir(trace_dir) as entries:
            names = [e.name for e in entries]
    except OSError:
        return
    for name in names:
        if any(name[:i] in stems for i, char in enumerate(name) if char == "_"):
            with contextlib.suppress(OSError):
                (trace_dir / name).unlink()
