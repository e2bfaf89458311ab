"""`replay:PATH`: recorded traces played back in a loop, one file per window.

For demos, load tests and end-to-end tests without a GPU. PATH is one trace file or a folder;
a folder's trace files (`*.json`, `*.json.gz`, see `dirsource.is_trace_name`) are replayed in
sorted name order, then again from the start, forever. Each `capture()` returns the next file
as a fresh window without waiting (the scheduler's period paces the replay) and never deletes
anything. `requested` is None: the window comes from the trace itself.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ..errors import CaptureError
from . import CapturedWindow
from .dirsource import is_trace_name


class ReplaySource:
    """A `Source` that replays recorded trace files in a loop (module doc)."""

    def __init__(self, path: str | os.PathLike[str], *, name: str | None = None) -> None:
        self.path = Path(path)
        self.name = name or f"replay:{self.path}"
        self._files: list[Path] = []
        self._next = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        if self.path.is_file():
            self._files = [self.path]
        elif self.path.is_dir():
            self._files = sorted(p for p in self.path.iterdir() if p.is_file() and is_trace_name(p.name))
            if not self._files:
                raise CaptureError(f"{self.name}: no trace files (*.json, *.json.gz) in folder {self.path}")
        else:
            raise CaptureError(f"{self.name}: {self.path} does not exist")

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(self._files)

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        with self._lock:
            if not self._files:
                return []
            path = self._files[self._next % len(self._files)]
            self._next = (self._next + 1) % len(self._files)
        return [CapturedWindow(source=self.name, path=path, labels={"process": f"replay:{path.name}"})]

    def close(self) -> None:
        pass
