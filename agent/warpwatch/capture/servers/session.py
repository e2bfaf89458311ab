"""Which trace files in a profiling server's folder belong to one of warpwatch's sessions.

A session is one start (and, except SGLang's profile v2, one stop) of the server's profiler. Its
files are the trace names that were not in the folder when it started and whose mtime is not
older than the start request. Each poll follows them with `files.SettleTracker` (size and mtime
unchanged across two polls, then a complete gzip/JSON file); a settled file is handed over once.

A session is *done* when every file it saw has settled and either the number of worker files
expected has been handed over, or (number unknown, or the session was given up) no new name has
appeared for `quiet_s`.
A server that answers `/stop_profile` before its ranks have written (SGLang before 0.4.4) is
waited on with a longer `quiet_s` and, where the server reports its ranks, with that count, so
that the first rank's file is not taken for the whole answer.

A session that was given up on (its window timed out) stays open as the source's *late*
session: files that complete afterwards are still handed over (a slow stop on a large model
takes minutes), and what never completes within `late_timeout_s` is deleted where the source
deletes processed files, so the folder does not fill with a session's leftovers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..files import SettleTracker

MTIME_SLACK_S = 2.0
"""A session's file may be at most this much older than its start request (clock granularity)."""


@dataclass
class Session:
    before: frozenset[str]
    """Trace names present when the session started: never this session's."""
    start_wall: float
    requested: tuple[float, float] | None
    want: int | None
    """Worker files expected (None: unknown)."""
    quiet_s: float
    last_new: float
    """When a new name last appeared (the source's `clock`; at first, when the session began)."""
    accept: Callable[[str], bool] | None = None
    """Which trace names this session may own (None: any new one)."""
    tracker: SettleTracker = field(default_factory=SettleTracker)
    handed: dict[str, Path] = field(default_factory=dict)
    discarded: set[str] = field(default_factory=set)
    pending: dict[str, Path] = field(default_factory=dict)
    given_up: bool = False
    give_up_at: float = math.inf
    """The time after which a late session's unfinished files are abandoned."""
    ended_at: float | None = None
    """The time the server answered the stop of a given-up session (its files written)."""

    def poll(
        self, listing: Mapping[str, Path], is_worker: Callable[[str], bool], now: float
    ) -> tuple[list[tuple[str, Path]], list[tuple[str, Path]]]:
        """One look at the folder: (worker files settled now, other trace files settled now).

        Each settled file is reported once; `is_worker` tells worker traces from the others
        (vLLM's API-server CPU trace); `now` is the source's clock."""
        workers: list[tuple[str, Path]] = []
        others: list[tuple[str, Path]] = []
        pending: dict[str, Path] = {}
        for name, path in listing.items():
            if name in self.before or name in self.handed or name in self.discarded:
                continue
            if self.accept is not None and not self.accept(name):
                continue
            if name not in self.pending:
                try:
                    if path.stat().st_mtime < self.start_wall - MTIME_SLACK_S:
                        continue
                except OSError:
                    continue
                self.last_new = now
            if self.tracker.observe(path):
                if is_worker(name):
                    self.handed[name] = path
                    workers.append((name, path))
                else:
                    self.discarded.add(name)
                    others.append((name, path))
            else:
                pending[name] = path
        self.pending = pending
        return workers, others

    def done(self, now: float) -> bool:
        """Whether the session is over at `now` (the source's clock), see the module doc."""
        if self.pending:
            return False
        if self.want is not None and len(self.handed) >= self.want:
            return True
        if self.given_up and not self.handed and self.ended_at is not None:
            # The server has ended it and written what it had: none after `quiet_s` is none at all
            # (a start that never took effect).
            return now - max(self.ended_at, self.last_new) >= self.quiet_s
        quiet = bool(self.handed) and now - self.last_new >= self.quiet_s
        # A given-up session whose files have stopped coming is over even short of `want` (a rank
        # that never writes must not hold the next windows back for late_timeout_s).
        return quiet and (self.want is None or self.given_up)
