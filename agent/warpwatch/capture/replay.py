"""`replay:PATH`: recorded traces played back in a loop, one file per window.

For demos, load tests and end-to-end tests without a GPU. PATH is one trace file or a folder;
a folder's trace files (`*.json`, `*.json.gz`, see `dirsource.is_trace_name`) are replayed in
sorted name order, then again from the start, forever. Each `capture()` returns the next file
as a fresh window without waiting (the scheduler's period paces the replay) and never deletes
anything. `requested` is None: the window comes from the trace itself. Files named like
`tensorboard_trace_handler`'s `{worker}.{time_ns}.pt.trace.json[.gz]` are windows of one process
(`worker`), as in a `dir:` source; any other file is a process of its own.

Files are confined to their folder like a `dir:` source's (`warpwatch.capture.confine`): a
single file that is refused (a link out of its folder, a FIFO, another user's file) stops the
start with the reason; in a folder, each refused file is left out of the loop and handed over
once, with the first window, so that its refusal is logged and counted. Sub-folders are
ignored. The service opens every file through `confine` again, so a file swapped later is
refused too.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from ..errors import CaptureError
from . import CapturedWindow, Source
from .confine import RefusedFile, check
from .dirsource import is_trace_name, labels_for


class ReplaySource(Source):
    """A `Source` that replays recorded trace files in a loop (module doc)."""

    windows_timed_by = "producer"  # the recorded traces keep the windows they were timed with

    def __init__(self, path: str | os.PathLike[str], *, name: str | None = None) -> None:
        self.path = Path(path)
        self.name = name or f"replay:{self.path}"
        self._files: list[Path] = []
        self._refused: list[Path] = []
        self._next = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        if self.path.is_dir():
            self._files, self._refused = [], []
            for p in sorted(self.path.iterdir()):
                if not is_trace_name(p.name) or _is_dir(p):
                    continue
                try:
                    check(p, self.path)
                except RefusedFile:
                    self._refused.append(p)
                else:
                    self._files.append(p)
            if not self._files:
                refused = f" ({len(self._refused)} refused: {self._refused[0].name}...)" if self._refused else ""
                raise CaptureError(f"{self.name}: no trace files (*.json, *.json.gz) in folder {self.path}{refused}")
        elif os.path.lexists(self.path):
            try:
                check(self.path)
            except RefusedFile as exc:
                raise CaptureError(f"{self.name}: {exc}") from None
            self._files = [self.path]
        else:
            raise CaptureError(f"{self.name}: {self.path} does not exist")

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(self._files)

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        with self._lock:
            refused, self._refused = self._refused, []
            if not self._files:
                return []
            path = self._files[self._next % len(self._files)]
            self._next = (self._next + 1) % len(self._files)
        return [
            CapturedWindow(source=self.name, path=p, labels=labels_for(p.name) or {"process": f"replay:{p.name}"})
            for p in (*refused, path)
        ]

    def close(self) -> None:
        pass


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
