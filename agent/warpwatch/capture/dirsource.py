"""`dir:PATH`: finished trace files that something else drops into a folder.

The workload decides when traces are written (`tensorboard_trace_handler`, a training loop's
own schedule, a cron job); the agent analyses each finished file exactly once. One
`capture()` call looks at the folder, waits `window_s` (interruptibly), looks again, and returns
a window for every file that is

- a trace by name: `*.json`, `*.json.gz` (which covers `*.pt.trace.json[.gz]`), not hidden,
  not temporary (`*.tmp`, `*.part`, `*.partial`), directly in the folder (not in sub-folders);
- allowed by `warpwatch.capture.confine` (a regular file, or a link to one inside the folder,
  owned by the agent's uid, root or the folder's owner). Anything else with a trace name (a
  link out of the folder, a FIFO, a device, another user's file, a directory named `x.json`)
  is handed over at once, without ever being opened, so that its window fails with the reason
  and is counted;
- finished: same size and modification time in both looks and complete by
  `warpwatch.capture.files.is_complete_trace_file` (a whole gzip stream, checked to its CRC; a
  JSON text from `{` to `}`). A plain `.json` must moreover be one whole JSON object by
  structure (`files.is_complete_json`: its last `}` proves nothing while a writer may still
  append, as a trace written in chunks ends in `}` between two of them; the check streams the
  file and cannot be faulted by a writer truncating it), or have stayed unchanged for
  `json_settle_s` (2 s), by its modification time or since it was first seen so. Or it is handed over
  anyway once unchanged for longer than `give_up_s` (the service passes `collect_timeout`), and
  fails its window with the reader's reason (empty, truncated, not JSON, unreadable) instead of
  being waited for forever;
- not processed before: processed files are remembered by (name, size, mtime_ns, ctime_ns) for
  as long as they are in the folder (the memory is pruned to the files present, so it stays
  bounded); a file rewritten in place counts as new, and so does one whose permissions changed
  (`chmod` changes ctime): a file unreadable when first seen is read again once it is readable.

A folder that cannot be listed (permissions, I/O error) fails each window with the reason; a
folder that does not exist yet is waited for.

After a window is analysed the file is deleted when `delete_processed` is set. Retention
(`retention_files`, `retention_bytes`, 0 = no bound) bounds the folder: when the trace files in
it exceed either bound, the oldest *processed* ones are deleted until both hold; files not yet
processed are never deleted.

The traced process's identity (used to merge windows) comes from the file name when it has
`tensorboard_trace_handler`'s `{worker}.{time_ns}.pt.trace.json[.gz]` form (`process=worker`)
and from the trace's `distributedInfo` rank otherwise.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config.units import check_seconds
from ..logs import RepeatFilter, event, limited_event
from . import CapturedWindow, Source
from .confine import RefusedFile, check
from .files import TEMP_SUFFIXES, TRACE_SUFFIXES, is_complete_json_file, is_finished
from .folders import check_start_folder, list_traces

log = logging.getLogger(__name__)

_WORKER = re.compile(r"^(?P<worker>.+)\.\d{9,}\.pt\.trace\.json(\.gz)?$")

Key = tuple[str, int, int, int]
"""(name, size, mtime_ns, ctime_ns): a file's identity for "processed before"."""
JSON_SETTLE_S = 2.0
"""How long a plain `.json` must stay unchanged before it counts as finished (module doc)."""


def is_trace_name(name: str) -> bool:
    """True for names a dir: source considers (see module doc)."""
    lower = name.lower()
    return not name.startswith(".") and lower.endswith(TRACE_SUFFIXES) and not lower.endswith(TEMP_SUFFIXES)


def labels_for(name: str) -> dict[str, str]:
    """`process` from a `tensorboard_trace_handler` file name, else no labels."""
    m = _WORKER.match(name)
    return {"process": m.group("worker")} if m else {}


@dataclass(frozen=True, slots=True)
class _Entry:
    path: Path
    key: Key


@dataclass(frozen=True, slots=True)
class _Look:
    """One look at the folder: trace files by path, and which of them `confine` refuses."""

    files: dict[Path, Key]
    refused: frozenset[Path]


class DirSource(Source):
    """A `Source` over a folder of finished trace files (module doc)."""

    windows_timed_by = "producer"  # whoever dropped the files chose their windows

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        name: str | None = None,
        delete_processed: bool = False,
        retention_files: int = 0,
        retention_bytes: int = 0,
        give_up_s: float = 30.0,
        json_settle_s: float = JSON_SETTLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder = Path(folder)
        self.name = name or f"dir:{self.folder}"
        self.delete_processed = delete_processed
        self.retention_files = retention_files
        self.retention_bytes = retention_bytes
        self.give_up_s = check_seconds(give_up_s, "give_up_s", zero=True, prefix=f"{self.name}: ")
        self.json_settle_s = check_seconds(json_settle_s, "json_settle_s", zero=True, prefix=f"{self.name}: ")
        self._clock = clock
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._processed: set[Key] = set()
        self._handed: set[Key] = set()
        self._first_seen: dict[Key, float] = {}
        self._missing_logged = False
        self._repeats = RepeatFilter()

    # -- Source protocol

    def start(self) -> None:
        if not check_start_folder(self.name, self.folder):
            event(
                log,
                "source_waiting",
                logging.WARNING,
                source=self.name,
                reason="folder does not exist yet; windows start when it appears",
            )
            self._missing_logged = True

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        """Look, wait `window_s`, look again; return the files finished and not yet processed."""
        first_at = self._clock()
        look = self._look()
        if isinstance(look, CapturedWindow):
            return [look]
        if look is None:
            return []
        first = look.files
        with self._lock:
            for key in first.values():
                self._first_seen.setdefault(key, first_at)
        if any(key not in self._done_keys() for key in first.values()):
            self._closed.wait(max(0.0, min(window_s, timeout_s if timeout_s > 0 else window_s)))
        if self._closed.is_set():
            return []
        look = self._look()
        if isinstance(look, CapturedWindow):
            return [look]
        second = look.files if look is not None else {}
        refused = look.refused if look is not None else frozenset()
        now, wall = self._clock(), time.time()
        ready: list[_Entry] = []
        with self._lock:
            present = set(second.values())
            # Memory stays bounded: forget files that are gone.
            self._processed &= present
            self._handed &= present
            self._first_seen = {k: t for k, t in self._first_seen.items() if k in present}
            for path, key in sorted(second.items(), key=lambda kv: (kv[1][2], kv[1][0])):
                if key in self._processed or key in self._handed:
                    continue
                seen_at = self._first_seen.setdefault(key, now)
                settled = now - seen_at >= self.json_settle_s or wall - key[2] / 1e9 >= self.json_settle_s
                if path in refused or (
                    first.get(path) == key
                    and is_finished(path, self.folder)
                    and (settled or not key[0].lower().endswith(".json") or is_complete_json_file(path, self.folder))
                    and self._unchanged(path, key)
                ):
                    ready.append(_Entry(path, key))
                elif now - seen_at >= self.give_up_s:
                    ready.append(_Entry(path, key))  # give up waiting: let the reader say what is wrong
            for e in ready:
                self._handed.add(e.key)
        return [
            CapturedWindow(
                source=self.name,
                path=e.path,
                labels=labels_for(e.path.name),
                on_done=self._done_callback(e),
            )
            for e in ready
        ]

    def close(self) -> None:
        self._closed.set()

    # -- internals

    def _unchanged(self, path: Path, key: Key) -> bool:
        """The file still is what `key` says: a writer that appended while it was being checked
        must not get the earlier key marked processed (the file would be read twice)."""
        try:
            st = check(path, self.folder).st
        except (OSError, RefusedFile):
            return False
        return (path.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == key

    def _done_keys(self) -> set[Key]:
        with self._lock:
            return self._processed | self._handed

    def _look(self) -> _Look | CapturedWindow | None:
        """The folder's trace files; None while it does not exist; a failed window when it
        cannot be listed."""
        try:
            listing = list_traces(self.folder, is_trace_name)
        except FileNotFoundError:
            if not self._missing_logged:
                event(log, "source_waiting", logging.WARNING, source=self.name, reason="folder does not exist")
                self._missing_logged = True
            return None
        except OSError as exc:
            error = f"cannot list the folder {self.folder}: {exc.strerror or exc}"
            return CapturedWindow(source=self.name, path=None, error=error, outcome="failed")
        if self._missing_logged:
            event(log, "source_folder_found", source=self.name)
            self._missing_logged = False
        files = {path: (path.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for path, st in listing.files.items()}
        return _Look(files, listing.refused)

    def _done_callback(self, e: _Entry) -> Callable[[bool], None]:
        def done(processed: bool) -> None:
            with self._lock:
                self._handed.discard(e.key)
                if processed:
                    self._processed.add(e.key)
            if processed and self.delete_processed:
                self._unlink(e.path, "delete_processed")
            if processed:
                self._apply_retention()

        return done

    def _unlink(self, path: Path, why: str) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            limited_event(
                log,
                self._repeats,
                ("delete", path.name, exc.errno),
                "source_delete_failed",
                logging.WARNING,
                source=self.name,
                file=path.name,
                error=exc.strerror or str(exc),
            )
        else:
            event(log, "source_deleted", logging.DEBUG, source=self.name, file=path.name, reason=why)

    def _apply_retention(self) -> None:
        if not self.retention_files and not self.retention_bytes:
            return
        look = self._look()
        files = look.files if isinstance(look, _Look) else {}
        count = len(files)
        total = sum(key[1] for key in files.values())
        with self._lock:
            processed = self._processed.copy()
        # Oldest first (mtime, then name); only processed files may go.
        for path, key in sorted(files.items(), key=lambda kv: (kv[1][2], kv[1][0])):
            over_count = self.retention_files and count > self.retention_files
            over_bytes = self.retention_bytes and total > self.retention_bytes
            if not (over_count or over_bytes):
                break
            if key not in processed:
                continue
            self._unlink(path, "retention")
            count -= 1
            total -= key[1]
