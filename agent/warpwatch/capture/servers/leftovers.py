"""The trace files an earlier run of the agent left behind, found by their name and claimed.

A server that names its sessions (vLLM 0.32: the start's `profile_prefix`) writes each of the
agent's sessions as `{prefix}_{worker}.{time_ns}.pt.trace.json.gz`, where the prefix is
`warpwatch-{run}`: `run` is drawn anew by every source when it is made, so a name tells this run's
sessions from an earlier run's. A session still being written when the agent exited (a stop
that flushes for minutes with stacks on, beyond the shutdown's grace) is written after the agent
is gone; the next run finds it here. Such a file is never a window of this run (`is_earlier`
keeps it out of the sessions' listings): once complete (`files.SettleTracker`), or
`late_timeout_s` after it was first seen if it never completes, it is counted (`leftover`,
`sourcestats.FILE_KINDS`) and deleted where the source deletes processed files, unread (its
window is long over); the server's other files of such a session (vLLM's key_averages tables,
`{prefix}_{worker}.profiler_out.txt`) go with it, uncounted. A server that ignores the prefix
(before vLLM 0.32) writes names without it: those are the sessions' as before, and an exited
run's late files are left in place.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ..files import TEMP_SUFFIXES, SettleTracker, is_finished
from ..folders import list_traces
from .clock import WindowClock

log = logging.getLogger("warpwatch.capture.servers")

PREFIX = "warpwatch-"
QUIET_S = 2.0
"""A file not written for this long is one its writer is done with: a whole trace, or a table, is
claimed at the first look (an earlier run's files, found at start), not only after two."""
_NAMED = re.compile(r"^warpwatch-(?P<run>[0-9a-f]{8})_")


def new_run_prefix() -> str:
    """A session prefix for a new run: `warpwatch-` and 8 random hex digits (vLLM's rules for a
    `profile_prefix`: 1-128 ASCII letters, digits, `.`, `_` or `-`)."""
    return f"{PREFIX}{secrets.token_hex(4)}"


def strip_prefix(worker: str) -> str:
    """A worker's name without the agent's session prefix (labels stay bounded across runs)."""
    m = _NAMED.match(worker)
    return worker[m.end() :] if m else worker


class Leftovers:
    """An earlier run's trace files in `trace_dir`, each claimed once it is complete (module doc).
    `prefix` is this run's (`new_run_prefix`); `is_trace` tells the server's trace names."""

    def __init__(
        self,
        name: str,
        trace_dir: Path,
        prefix: str,
        is_trace: Callable[[str], bool],
        *,
        delete: bool,
        late_timeout_s: float,
        clock: WindowClock,
        counts: Counter[str],
    ) -> None:
        self.name = name
        self.trace_dir = trace_dir
        self.prefix = prefix
        self._is_trace = is_trace
        self.delete = delete
        self.late_timeout_s = late_timeout_s
        self._clock = clock
        self._counts = counts
        self._tracker = SettleTracker()
        self._first_seen: dict[str, float] = {}
        self._others: dict[str, tuple[int, int]] = {}
        """Files of an earlier run that are not traces: (size, mtime) at the last look."""
        self._claimed: set[str] = set()

    def is_earlier(self, name: str) -> bool:
        """Whether a file's name is a session of an earlier run of the agent (not this run's)."""
        return _NAMED.match(name) is not None and not name.startswith(self.prefix + "_")

    def claim(self) -> int:
        """One look at the folder: claims the earlier runs' trace files complete now (or too old
        to wait for), and their other files (vLLM's `*.profiler_out.txt` tables) unchanged since
        the last look; returns how many trace files were claimed."""
        try:
            found = list_traces(self.trace_dir, lambda n: self.is_earlier(n) and not n.endswith(TEMP_SUFFIXES))
        except OSError:
            return 0
        now, present = self._clock.now(), found.allowed()
        for seen in (self._first_seen, self._others):  # forget what is gone: only the folder's files are kept
            for gone in seen.keys() - present.keys():
                del seen[gone]
        self._claimed &= present.keys()
        claimed = []
        for name, path in sorted(present.items()):
            if name in self._claimed:
                continue
            first = self._first_seen.setdefault(name, now)
            if self._settled(name, path) or now - first >= self.late_timeout_s:
                claimed.append(name)
                self._claim(name, path)
        if claimed:
            action = "deleted unread" if self.delete else "left in place"
            log.warning(
                "%s: %d file(s) of an earlier run of the agent (written after it exited): %s; %s",
                self.name,
                len(claimed),
                ", ".join(claimed),
                action,
            )
        return sum(1 for n in claimed if self._is_trace(n))

    def _settled(self, name: str, path: Path) -> bool:
        """A trace: complete (`SettleTracker`, or quiet for `QUIET_S` and whole); another file:
        unchanged since the last look, or quiet for `QUIET_S`."""
        try:
            st = path.stat()
        except OSError:
            return False
        quiet = time.time() - st.st_mtime >= QUIET_S
        if self._is_trace(name):
            return self._tracker.observe(path) or (quiet and st.st_size > 0 and is_finished(path))
        now, before = (st.st_size, st.st_mtime_ns), self._others.get(name)
        self._others[name] = now
        return quiet or before == now

    def _claim(self, name: str, path: Path) -> None:
        self._claimed.add(name)
        self._first_seen.pop(name, None)
        self._others.pop(name, None)
        if self._is_trace(name):
            self._counts["leftover"] += 1
        if not self.delete:
            return
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("%s: cannot delete %s: %s", self.name, path, exc.strerror or exc)
