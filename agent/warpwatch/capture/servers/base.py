"""What `VllmSource` and `SglangSource` share: one window through a server's own profiler.

A window is:

1. hand over what an earlier, given-up session has finished writing since (`session`);
   while such a session still has files coming, open no new window (counted
   `previous_flush_pending`): the server is still writing, and new files could not be told apart;
2. the server-specific check that the start is safe (`_before_start`: SGLang's version);
3. list the trace folder (the names present now are never this window's);
4. `POST {url}/start_profile`; wait `window_s`; `POST {url}/stop_profile`;
5. poll the folder until the session is done (`session.Session.done`), bounded by
   `flush_timeout_s` and by the service's `timeout_s`, whichever is shorter. What is still
   unfinished then is reported `timed_out`, and the session stays open as the late session.

A start never follows a stop that has not been answered: the stop's answer is awaited in its own
thread (`client.InFlight`, up to `late_timeout_s`) beyond the window, and while it is awaited
no window opens (counted `previous_flush_pending`). vLLM queues requests to its profiler behind a
flush (minutes with stacks on), so a start sent then would open a session after the flush that no
window accounts for. A start that may have reached the server without an answer is ended at once
(a stop, awaited the same way) and its files, if any, are the late session's.

Expected failures never raise: `capture()` returns `CapturedWindow(path=None,
outcome="failed" | "timed_out", error=...)`. After a failure to start or stop (profiling
disabled, refused token, server unreachable or gone) the source backs off exponentially
(`backoff_s`, doubling up to `max_backoff_s`): while backing off, `capture()` returns [] without
touching the server. Windows not opened on purpose are counted by reason in `stats()`
(`sourcestats.SKIP_REASONS`), trace files by kind (`sourcestats.FILE_KINDS`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ...overhead import LatencySplit
from ...sourcestats import SourceStats
from .. import CapturedWindow, Source
from ..folders import check_start_folder
from .client import InFlight, Reply, RequestFailed, ServerClient, reply_error
from .files import SessionFiles
from .options import DEFAULT_TOKEN_ENV, ServerOptions
from .servedlatency import HISTOGRAMS, ServedLatency
from .session import Session
from .stops import SessionStops

log = logging.getLogger("warpwatch.capture.servers")

__all__ = ["DEFAULT_TOKEN_ENV", "ProfilingServerSource"]


class ProfilingServerSource(SessionStops, SessionFiles, Source):
    """Shared machinery of `VllmSource` and `SglangSource` (see the module docstring)."""

    kind = "server"
    _requests_before_start: int = 0
    """Requests `_before_start` may send (each with its retries)."""

    def __init__(self, url: str, trace_dir: str | os.PathLike[str], **options: Any) -> None:
        self.options = ServerOptions.of(self.kind, url, trace_dir, **options)
        o = self.options
        self.url = o.url
        self.name = o.label
        self.trace_dir = o.trace_dir
        self.delete_processed = o.delete_processed
        self.token_env = o.token_env
        self.request_timeout_s = o.request_timeout_s
        self.flush_timeout_s = o.flush_timeout_s
        self.max_retries = o.max_retries
        self.retry_pause_s = o.retry_pause_s
        self.backoff_s = o.backoff_s
        self.max_backoff_s = o.max_backoff_s
        self.poll_interval_s = o.poll_interval_s
        self.expected_files = o.expected_files
        self.late_timeout_s = o.late_timeout_s
        self.settle_quiet_s = o.settle_quiet_s

        self._closed = threading.Event()
        self._client = ServerClient(
            self.name, self.url, token_env=o.token_env, max_retries=self.max_retries,
            retry_pause_s=self.retry_pause_s, closed=self._closed,
        )
        self._failures = 0
        self.backoff_clock: Callable[[], float] = time.monotonic
        """The clock the backoff after a failed window is measured on (tests set their own)."""
        self._skip_until = 0.0
        self._disabled_logged = False
        self._unhealthy = False
        self._maybe_active = False
        """A start succeeded and its stop may not have: end that session before the next one."""
        self._stop_call: InFlight | None = None
        """The last stop sent, while its answer has not been dealt with."""
        self._late: Session | None = None
        self._recent: Session | None = None
        """The last session that finished: one more look for files that showed late."""
        self._stop_answered = False
        self._stop_seconds: list[float] = []
        self._served = ServedLatency(HISTOGRAMS.get(self.kind, ()), self._read_metrics, name=self.name)
        self._start_delivered = False
        self._skipped: Counter[str] = Counter()
        self._files: Counter[str] = Counter()

    # -- what differs per server ---------------------------------------------------------

    def _before_start(self) -> CapturedWindow | None:
        """A refusal (failed window, already counted) when starting now is not safe, else None."""
        return None

    def _start_body(self) -> bytes | None:
        return None

    def _stop_body(self) -> bytes | None:
        return None

    def _refusal_reason(self, reply: Reply) -> str | None:
        """A `sourcestats.SKIP_REASONS` entry when a refused start means the window was skipped on purpose."""
        return None

    def _stop_waits_for_files(self) -> bool:
        """Whether `/stop_profile` answers only after every rank has written its trace."""
        return True

    def _expected(self) -> int | None:
        """Worker files one window should give: `expected_files`, else what the server reports."""
        return self.expected_files

    def _step_bounded(self) -> bool:
        """Whether a window is a profile the server ends by itself (never sent a stop)."""
        return False

    def _session_filter(self) -> Callable[[str], bool] | None:
        """Which trace names a step-bounded session may own (None: any)."""
        return None

    def inspect_windows(self, windows: list[CapturedWindow]) -> None:
        """Sees each round's windows before the service does (a look at what the server records)."""

    # -- Source protocol -----------------------------------------------------------------

    def start(self) -> None:
        if not check_start_folder(self.name, self.trace_dir, "trace folder"):
            log.warning(
                "%s: trace folder %s does not exist (yet); the server creates it when it writes "
                "its first trace, and the agent must see the same folder",
                self.name,
                self.trace_dir,
            )

    def close(self) -> None:
        self._closed.set()

    def served_latency(self) -> LatencySplit | None:
        """The server's inter-token latency inside and outside windows, cumulative (`servedlatency`)."""
        return self._served.split()

    def _read_metrics(self) -> str | None:
        """The server's `/metrics` text; "" where it has none (404), None when it cannot be read now."""
        try:
            reply = self._client.request_once("GET", "/metrics", None, self.request_timeout_s)
        except RequestFailed:
            return None
        if reply.status == 404:
            return ""
        return None if reply_error(reply) else reply.raw.decode("utf-8", "replace")

    def stats(self) -> SourceStats:
        """Windows skipped by reason and trace files by kind, since start."""
        return SourceStats(skipped=dict(self._skipped), files=dict(self._files))

    @property
    def capture_overhead_s(self) -> float:
        """How long `capture` may take beyond window + timeout (the service bounds rounds with it):
        the requests before the window (the start, and what `_before_start` asks) with all their
        retries and their doubling pauses."""
        attempts = self.max_retries + 1
        one = attempts * self.request_timeout_s + self.retry_pause_s * (2**self.max_retries - 1)
        # plus the wait for a stop that ends a session an earlier window left open
        return float((self._requests_before_start + 1) * one + self.request_timeout_s)

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        out = self._capture(window_s, timeout_s)
        self.inspect_windows(out)
        return out

    def _capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        if self._closed.is_set():
            return []
        out = self._sweep_late()
        if not self._previous_stop_answered(out):
            return out
        # A session of ours may still run (its stop failed or went unanswered): end it first.
        if (self._maybe_active and self.backoff_clock() >= self._skip_until
                and (ended := self._end_leftover_session()) is not None):
            return [*out, *ended]
        if (late := self._late) is not None:
            if late.given_up:
                self._skip("previous_flush_pending", "the previous window's trace files are still being written")
            else:
                self._skip("session_pending", "the previous step-bounded profile has not written all its "
                           "traces yet (it records when requests come)")
            return out
        now = self.backoff_clock()
        if now < self._skip_until:
            log.debug("%s: backing off, next try in %.0f s", self.name, self._skip_until - now)
            return out
        if (refusal := self._before_start()) is not None:
            return [*out, refusal]
        self._served.started()
        try:
            out.extend(self._window(window_s, timeout_s))
        finally:
            self._served.ended()
        return out

    def _window(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        """Start, wait, stop and collect one window (the module doc's steps 3 to 5)."""
        out: list[CapturedWindow] = []
        if self._step_bounded():
            return self._step_bounded_window(window_s, timeout_s)

        before = frozenset(self._list_traces())
        start_wall = time.time()
        if (failed := self._send_start()) is not None:
            if self._maybe_active:
                # The start may have been taken (no answer): end that session now, and await its
                # files as the late session's, before any other start.
                self._stop_in_background(time.monotonic() + self.request_timeout_s)
                self._give_up(Session(before, start_wall, None, self._expected(), self.settle_quiet_s))
            return [*out, failed]
        started_us = time.time() * 1e6

        interrupted = self._closed.wait(max(0.0, window_s))
        stop_us = time.time() * 1e6
        if interrupted:
            self._stop_quietly()
            return out

        budget = self._budget(timeout_s)
        deadline = time.monotonic() + budget
        stop_error = self._stop(budget, deadline)
        if stop_error is not None:
            return [*out, stop_error]
        # One quiet poll is enough where the stop answered after the files were written; else
        # (an early answer, or none in time) ranks may still finish apart.
        waited = self._stop_answered and self._stop_waits_for_files()
        quiet = self.poll_interval_s if waited else self.settle_quiet_s
        session = Session(before, start_wall, (started_us, stop_us), self._expected(), quiet)
        out.extend(self._collect(session, deadline, budget))
        self._healthy()
        return out

    def _budget(self, timeout_s: float) -> float:
        return self.flush_timeout_s if timeout_s <= 0 else min(self.flush_timeout_s, timeout_s)

    def _healthy(self) -> None:
        if self._unhealthy:
            log.info("%s: profiling endpoints answer again", self.name)
        self._failures = 0
        self._skip_until = 0.0
        self._unhealthy = False

    def _send_start(self) -> CapturedWindow | None:
        """POST /start_profile; a failed window (counted, backed off) unless the server took it."""
        self._start_delivered = False
        try:
            reply = self._client.request("POST", "/start_profile", self._start_body(), self.request_timeout_s)
        except RequestFailed as exc:
            self._start_delivered = exc.delivered
            if exc.delivered and not self._step_bounded():
                self._maybe_active = True
            what = "the server did not answer" if exc.delivered else "cannot reach the server"
            return self._fail_and_back_off(f"{what}: POST /start_profile: {exc}")
        if error := reply_error(reply):
            return self._start_refused(reply, error)
        if not self._step_bounded():
            self._maybe_active = True
        return None

    def _step_bounded_window(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        """A profile the server ends by itself after some steps (no stop request): it becomes the
        open session, whose files are handed over as they come, now or in later rounds."""
        before = frozenset(self._list_traces())
        start_wall = time.time()
        failed = self._send_start()
        if failed is None or self._start_delivered:
            # Never abandoned, and kept even when the start went unanswered (it may have been
            # taken): a new start while the server records this one could fail in the server
            # (SGLang's profile v2); an idle server keeps it armed until requests come.
            self._late = Session(before, start_wall, None, self._expected(), self.settle_quiet_s,
                                 accept=self._session_filter())
        if failed is not None:
            return [failed]
        self._healthy()
        out: list[CapturedWindow] = []
        deadline = time.monotonic() + max(0.0, window_s) + self._budget(timeout_s)
        while True:
            out.extend(self._sweep_late())
            if self._late is None or time.monotonic() >= deadline or self._closed.wait(self.poll_interval_s):
                return out

    # -- start / stop --------------------------------------------------------------------

    def _start_refused(self, reply: Reply, error: str) -> CapturedWindow:
        if reply.status in (404, 405, 501):
            message = (
                f"profiling is disabled on the server (POST /start_profile -> {error}). {self._enable_hint()}"
            )
            return self._fail_and_back_off(message, disabled=True)
        if reply.status in (401, 403):
            has = "is set" if os.environ.get(self.token_env, "").strip() else "is not set"
            message = (
                "the server refused the request "
                f"(POST /start_profile -> HTTP {reply.status} {reply.reason}); "
                f"a bearer token is read from the environment variable {self.token_env}, which {has}"
            )
            return self._fail_and_back_off(message)
        if (reason := self._refusal_reason(reply)) is not None:
            return self._refuse(reason, f"POST /start_profile -> {error}")
        return self._fail_and_back_off(f"POST /start_profile -> {error}")

    def _fail_and_back_off(self, message: str, *, disabled: bool = False) -> CapturedWindow:
        delay = min(self.max_backoff_s, self.backoff_s * (2**self._failures))
        self._failures = min(self._failures + 1, 60)
        self._skip_until = self.backoff_clock() + delay
        self._unhealthy = True
        if disabled:
            if not self._disabled_logged:
                log.warning("%s: %s Skipping windows; next try in %.0f s.", self.name, message, delay)
                self._disabled_logged = True
            else:
                log.debug("%s: still disabled; next try in %.0f s", self.name, delay)
        else:
            log.warning("%s: %s; next try in %.0f s", self.name, message, delay)
        return CapturedWindow(source=self.name, path=None, error=message, outcome="failed")

    def _refuse(self, reason: str, message: str) -> CapturedWindow:
        """A window skipped on purpose (`sourcestats.SKIP_REASONS`): counted, logged, backed off."""
        self._skipped[reason] += 1
        return self._fail_and_back_off(message)

    def _skip(self, reason: str, why: str) -> None:
        self._skipped[reason] += 1
        log.info("%s: no window this round: %s", self.name, why)
