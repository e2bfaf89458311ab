"""The trace-folder half of the vllm/sglang sources: listing the server's trace files, following a
session's files until they are complete (`session.Session`), handing them over as
windows, and what a window that gave up leaves behind (the late session, see `session`).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from pathlib import Path

from .. import CapturedWindow
from ..files import TEMP_SUFFIXES
from ..folders import list_traces
from .dialect import Dialect
from .leftovers import Leftovers
from .options import ServerOptions
from .session import Session

log = logging.getLogger("warpwatch.capture.servers")


class SessionFiles:
    """The trace folder as a source sees it: the sessions' files handed over as windows, the late
    session (a window that gave up), the last finished one, and the files counted by kind
    (`sourcestats.FILE_KINDS`). `prefix`: this run's session prefix where the server names its
    sessions (`leftovers`), else None."""

    def __init__(
        self, options: ServerOptions, dialect: Dialect, closed: threading.Event, prefix: str | None = None
    ) -> None:
        self.name = options.label
        self.trace_dir = options.trace_dir
        self.delete_processed = options.delete_processed
        self.poll_interval_s = options.poll_interval_s
        self.late_timeout_s = options.late_timeout_s
        self.settle_quiet_s = options.settle_quiet_s
        self._dialect = dialect
        self._closed = closed
        self._clock = options.clock
        self.late: Session | None = None
        """A session whose window is over and whose files are still awaited."""
        self._recent: Session | None = None
        """The last session that finished: one more look for files that showed late."""
        self.counts: Counter[str] = Counter()
        """Trace files by kind (`sourcestats.FILE_KINDS`)."""
        self.leftovers: Leftovers | None = None
        """An earlier run's files, claimed (None: the server does not name sessions)."""
        if prefix is not None:
            self.leftovers = Leftovers(
                self.name,
                self.trace_dir,
                prefix,
                dialect.is_trace_name,
                delete=self.delete_processed,
                late_timeout_s=self.late_timeout_s,
                clock=self._clock,
                counts=self.counts,
            )

    def listing(self) -> dict[str, Path]:
        """The trace files in the folder that `confine` allows, by name (`folders.list_traces`),
        but an earlier run's (`leftovers`)."""
        try:
            is_trace, leftovers = self._dialect.is_trace_name, self.leftovers
            listing = list_traces(
                self.trace_dir,
                lambda n: (
                    is_trace(n)
                    and not n.endswith(TEMP_SUFFIXES)
                    and not (leftovers is not None and leftovers.is_earlier(n))
                ),
            )
        except OSError:
            return {}
        return listing.allowed()

    def poll(self, session: Session) -> list[CapturedWindow]:
        """One look at the folder for `session`: windows for its worker files settled now."""
        workers, others = session.poll(self.listing(), self._dialect.is_worker_trace, self._clock.now())
        for name, path in others:
            # The server's front end profiles itself too (vLLM's AsyncLLM: CPU only, no kernels):
            # not a window, neither failed nor empty; gone like the rest.
            self.counts["cpu_only"] += 1
            log.debug("%s: %s is the server's CPU-only front-end trace, not read", self.name, name)
            if self.delete_processed:
                _DeleteWhenProcessed(self.name, path)(True)
        kind = "late" if session.given_up else "worker"
        self.counts[kind] += len(workers)
        return [
            CapturedWindow(
                source=self.name,
                path=path,
                labels=self._dialect.labels_for(name),
                requested=session.requested,
                on_done=self._on_done(path),
            )
            for name, path in sorted(workers)
        ]

    def collect(self, session: Session, deadline: float, budget: float) -> list[CapturedWindow]:
        out: list[CapturedWindow] = []
        while True:
            out.extend(self.poll(session))
            now = self._clock.now()
            if session.done(now) or now >= deadline:
                break
            if self._clock.sleep(self._closed, self.poll_interval_s):
                return out
        out.sort(key=lambda w: w.path.name if w.path is not None else "")  # rank order, not arrival order
        if session.done(self._clock.now()):
            self._recent = session
        else:
            self.give_up(session)
        out.extend(self._timed_out_windows(session, budget))
        log.debug("%s: window gave %d trace file(s)", self.name, len(session.handed))
        return out

    def give_up(self, session: Session) -> None:
        """The window is over, its session is not: it becomes the late session."""
        session.accept = self._dialect.late_filter(session)
        session.given_up = True
        session.quiet_s = max(session.quiet_s, self.settle_quiet_s)
        session.give_up_at = self._clock.now() + self.late_timeout_s
        self.late = session

    def sweep_late(self) -> list[CapturedWindow]:
        """Files of the late session that completed since; its end when done or too old. The last
        finished session gets one more look: a rank whose file showed after the window took the
        others as complete (a shared volume that shows files late) is still handed over."""
        out: list[CapturedWindow] = []
        if (recent := self._recent) is not None:
            self._recent = None
            if self.late is None:
                recent.accept = self._dialect.late_filter(recent)
                recent.given_up = True  # what comes now comes after its window
                out = self.poll(recent)
                if recent.pending:
                    self.give_up(recent)
        session = self.late
        if session is None:
            return out
        out.extend(self.poll(session))
        if session.done(self._clock.now()):
            self.late = None
            if not session.given_up:
                self._recent = session
        elif self._clock.now() >= session.give_up_at:
            for name, path in sorted(session.pending.items()):
                self.counts["abandoned"] += 1
                action = "deleted" if self.delete_processed else "left in place"
                log.warning(
                    "%s: trace file %s still incomplete %.0f s after its window timed out; given up (%s)",
                    self.name,
                    name,
                    self.late_timeout_s,
                    action,
                )
                if self.delete_processed:
                    _DeleteWhenProcessed(self.name, path)(True)
            self.late = None
        return out

    def _timed_out_windows(self, session: Session, budget: float) -> list[CapturedWindow]:
        out: list[CapturedWindow] = []
        requested = session.requested
        for name in sorted(session.pending):
            if not self._dialect.is_worker_trace(name):
                continue
            size = session.tracker.size(session.pending[name])
            out.append(
                self._timed_out(
                    f"trace file {name} still incomplete ({size if size is not None else '?'} bytes, "
                    f"not a complete gzip/JSON file) {budget:g} s after stop_profile; "
                    "raise flush_timeout_s (and the service's time-out) if flushing is this slow",
                    self._dialect.labels_for(name),
                    requested,
                )
            )
        names = [*session.handed, *(n for n in session.pending if self._dialect.is_worker_trace(n))]
        found = len(names)
        want = session.want
        if want is not None and found < want:
            ranks = [r for r in (self._dialect.labels_for(n).get("rank") for n in names) if r is not None]
            if len(ranks) == found and all(r.isdigit() for r in ranks):
                missing = sorted(set(range(want)) - {int(r) for r in ranks})[: want - found]
                for rank in missing:
                    out.append(
                        self._timed_out(
                            f"no trace file for rank {rank} in {self.trace_dir} {budget:g} s after stop_profile "
                            f"(expected {want} files, found {found})",
                            {"rank": str(rank)},
                            requested,
                        )
                    )
            else:
                for _ in range(want - found):
                    out.append(
                        self._timed_out(
                            f"expected {want} trace files in {self.trace_dir}, found {found} "
                            f"{budget:g} s after stop_profile",
                            {},
                            requested,
                        )
                    )
        elif found == 0:
            out.append(
                self._timed_out(
                    f"no new trace file in {self.trace_dir} {budget:g} s after stop_profile; check that this "
                    f"is the server's trace folder as the agent sees it. {self._dialect.enable_hint()}",
                    {},
                    requested,
                )
            )
        for w in out:
            log.warning("%s: %s", self.name, w.error)
        return out

    def _timed_out(self, error: str, labels: dict[str, str], requested: tuple[float, float] | None) -> CapturedWindow:
        return CapturedWindow(
            source=self.name, path=None, labels=labels, requested=requested, error=error, outcome="timed_out"
        )

    def _on_done(self, path: Path) -> _DeleteWhenProcessed | None:
        return _DeleteWhenProcessed(self.name, path) if self.delete_processed else None


class _DeleteWhenProcessed:
    def __init__(self, source: str, path: Path) -> None:
        self.source = source
        self.path = path

    def __call__(self, processed: bool) -> None:
        if not processed:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("%s: cannot delete processed trace %s: %s", self.source, self.path, exc.strerror or exc)
