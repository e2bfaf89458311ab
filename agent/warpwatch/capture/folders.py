"""A source's trace folder: the checks at start, and one confined look at the trace files in it.

`check_start_folder` refuses a path that is not a folder or cannot be read, and tells the caller
whether it exists yet (a folder the workload creates later is waited for). `list_traces` lists the
trace files directly in the folder, each checked by `confine` as it is listed: what `confine`
refuses (a link out of the folder, a FIFO, a device, another user's file, a directory with a trace
name) is never opened, and is reported apart so that a caller may hand it over to fail with the
reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import CaptureError
from .confine import RefusedFile, check

__all__ = ["Listing", "check_start_folder", "list_traces"]


def check_start_folder(source: str, folder: Path, what: str = "folder") -> bool:
    """True when `folder` exists and can be listed, False when it does not exist (yet); raise
    CaptureError naming `source` when it is not a folder or not readable."""
    if folder.exists() and not folder.is_dir():
        raise CaptureError(f"{source}: {what} {folder} is not a folder")
    if not folder.exists():
        return False
    if not os.access(folder, os.R_OK | os.X_OK):
        raise CaptureError(f"{source}: {what} {folder} is not readable")
    return True


@dataclass(frozen=True, slots=True)
class Listing:
    """One look at a folder: its trace files with their status (`lstat` for refused ones), and
    which of them `confine` refuses."""

    files: dict[Path, os.stat_result]
    refused: frozenset[Path]

    def allowed(self) -> dict[str, Path]:
        """The files `confine` allows, by name."""
        return {path.name: path for path in self.files if path not in self.refused}


def list_traces(folder: Path, is_trace_name: Callable[[str], bool]) -> Listing:
    """The files directly in `folder` whose names pass `is_trace_name`, checked by `confine`.
    Raises OSError when the folder cannot be listed (FileNotFoundError when it does not exist)."""
    with os.scandir(folder) as it:
        entries = [e for e in it if is_trace_name(e.name)]
    files: dict[Path, os.stat_result] = {}
    refused: set[Path] = set()
    for entry in entries:
        path = Path(entry.path)
        try:
            if entry.is_dir(follow_symlinks=False):  # refused by name: confine refuses directories
                refused.add(path)
                files[path] = entry.stat(follow_symlinks=False)
                continue
            files[path] = check(path, folder).st
        except RefusedFile:
            refused.add(path)  # listed with its own status: a caller may hand it over to be refused again
            try:
                files[path] = entry.stat(follow_symlinks=False)
            except OSError:
                continue
        except OSError:
            continue
    return Listing(files, frozenset(refused))
