"""One window through a server's own profiler: the source every profiling server shares.

A window is:

1. hand over what an earlier, given-up session has finished writing since (`session`);
   while such a session still has files coming, open no new window (counted
   `previous_flush_pending`): the server is still writing, and new files could not be told apart;
2. the server-specific check that the start is safe (the dialect's `before_start`: SGLang's version);
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

At shutdown `finish` gives what is still in flight (an unanswered stop, the late session's files)
what is left of the service's grace, and deletes the files that complete as processed ones are.
Where the server names sessions (vLLM 0.32's `profile_prefix`), the files an earlier run could
not wait for are claimed at start and at each round (`leftovers`).

Expected failures never raise: `capture()` returns `CapturedWindow(path=None,
outcome="failed" | "timed_out", error=...)`. After a failure to start or stop (profiling
disabled, refused token, server unreachable or gone) the source backs off exponentially
(`backoff_s`, doubling up to `max_backoff_s`): while backing off, `capture()` returns [] without
touching the server. Windows not opened on purpose are counted by reason in `stats()`
(`sourcestats.SKIP_REASONS`), trace files by kind (`sourcestats.FILE_KINDS`).

A source is its settings (`options.ServerOptions`) and its server's `dialect.Dialect` (each
engine's pair is made by `capture.registry.vllm_source` and `sglang_source`); what it keeps
between rounds lives in three objects it composes: the back-off and the skipped windows
(`backoff.Backoff`), the trace folder's sessions and file counts (`files.SessionFiles`) and the
stops (`stops.StopTracker`).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ...overhead import LatencySplit
from ...sourcestats import SourceStats
from .. import CapturedWindow, Source
from ..folders import check_start_folder
from .backoff import Backoff
from .client import Reply, RequestFailed, ServerClient, reply_error
from .dialect import Dialect
from .files import SessionFiles
from .leftovers import new_run_prefix
from .options import DEFAULT_TOKEN_ENV, ServerOptions
from .servedlatency import BASELINE_S, ServedLatency
from .session import Session
from .stops import StopTracker

log = logging.getLogger("warpwatch.capture.servers")

__all__ = ["DEFAULT_TOKEN_ENV", "ProfilingServerSource"]


class ProfilingServerSource(Source):
    """Windows through a server's profiler: `options` (checked settings) and `dialect` (what the
    server's requests and trace names are), see the module docstring."""

    windows_timed_by = "agent"

    def __init__(self, options: ServerOptions, dialect: Dialect) -> None:
        self.options = options
        self.dialect = dialect
        self.name = options.label
        self.url = options.url
        self.trace_dir = options.trace_dir
        self._closed = threading.Event()
        self._client = ServerClient(
            self.name,
            self.url,
            token_env=options.token_env,
            max_retries=options.max_retries,
            retry_pause_s=options.retry_pause_s,
            closed=self._closed,
            clock=options.clock,
        )
        self._clock = options.clock
        self._backoff = Backoff(options)
        self.prefix = new_run_prefix() if dialect.names_sessions else None
        """This run's session prefix (`leftovers`): None where the server does not name sessions."""
        self._files = SessionFiles(options, dialect, self._closed, self.prefix)
        self._capturing = threading.Lock()
        self._stops = StopTracker(options, self._client, dialect, self._backoff, self._files)
        self._served = ServedLatency(
            dialect.inter_token_histograms,
            self._read_metrics,
            name=self.name,
            first_token=dialect.first_token_histograms,
            generated=dialect.generated_counters,
        )

    # -- Source protocol -----------------------------------------------------------------

    def start(self) -> None:
        if not check_start_folder(self.name, self.trace_dir, "trace folder"):
            log.warning(
                "%s: trace folder %s does not exist (yet); the server creates it when it writes "
                "its first trace, and the agent must see the same folder",
                self.name,
                self.trace_dir,
            )
        self._claim_leftovers()

    def finish(self, timeout_s: float) -> None:
        """At shutdown, before `close`: up to `timeout_s` for what is in flight (a stop unanswered,
        a late session's files), whose files are then deleted as processed ones are (unread: the
        agent is stopping); one line says what was done and what is left to the next run."""
        if not self._capturing.acquire(timeout=max(0.0, timeout_s)):
            log.warning("%s: at exit: a window still in progress; %s", self.name, self._left_to())
            return
        try:
            handed, left = self._stops.drain(self._clock.now() + max(0.0, timeout_s), self._closed)
        finally:
            self._capturing.release()
        kept = "deleted" if self.options.delete_processed else "left in place"
        done = f"{handed} trace file(s) of ended sessions handed over unread ({kept})"
        if left:
            log.warning("%s: at exit: %s; a session still being written; %s", self.name, done, self._left_to())
        else:
            log.info("%s: at exit: %s; nothing left in flight", self.name, done)

    def _left_to(self) -> str:
        if self.prefix is None:
            return "its files will stay in the folder"
        return f"its files ({self.prefix}_*) are claimed by the agent's next start"

    def _claim_leftovers(self) -> None:
        if self._files.leftovers is not None:
            self._files.leftovers.claim()

    def close(self) -> None:
        self._closed.set()

    def served_latency(self) -> LatencySplit | None:
        """The server's inter-token latency inside and outside windows, cumulative (`servedlatency`)."""
        return self._served.split()

    def _read_metrics(self) -> str | None:
        """The server's `/metrics` text; "" where it has none (404), None when it cannot be read now."""
        try:
            reply = self._client.request_once("GET", "/metrics", None, self.options.request_timeout_s)
        except RequestFailed:
            return None
        if reply.status == 404:
            return ""
        return None if reply_error(reply) else reply.raw.decode("utf-8", "replace")

    def stats(self) -> SourceStats:
        """Windows skipped by reason and trace files by kind, since start."""
        return SourceStats(skipped=dict(self._backoff.skipped), files=dict(self._files.counts))

    def take_stop_seconds(self) -> list[float]:
        """The stops answered since the last call, each from its request to its answer."""
        return self._stops.take_seconds()

    def inspect_windows(self, windows: list[CapturedWindow]) -> None:
        """Sees each round's windows before the service does (a look at what the server records)."""
        self.dialect.inspect_windows(self.name, self.trace_dir, windows, self._files.counts)

    @property
    def capture_overhead_s(self) -> float:
        """How long `capture` may take beyond window + timeout (the service bounds rounds with it):
        the requests before the window (the start, and what the dialect's `before_start` asks)
        with all their retries and their doubling pauses."""
        o = self.options
        attempts = o.max_retries + 1
        one = attempts * o.request_timeout_s + o.retry_pause_s * (2**o.max_retries - 1)
        # plus the wait for a stop that ends a session an earlier window left open, the reads of
        # the server's /metrics around the window and the span measured before the first one
        reads = 3 * o.request_timeout_s
        return float((self.dialect.requests_before_start + 1) * one + o.request_timeout_s + reads + BASELINE_S)

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        with self._capturing:
            self._claim_leftovers()
            out = self._capture(window_s, timeout_s)
        self.inspect_windows(out)
        return out

    def _capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        if self._closed.is_set():
            return []
        out = self._files.sweep_late()
        if not self._stops.previous_answered(out):
            return out
        # A session of ours may still run (its stop failed or went unanswered): end it first.
        if (
            self._stops.maybe_active
            and self._backoff.over()
            and (ended := self._stops.end_leftover_session()) is not None
        ):
            return [*out, *ended]
        if (late := self._files.late) is not None:
            if late.given_up:
                self._backoff.skip(
                    "previous_flush_pending", "the previous window's trace files are still being written"
                )
            else:
                self._backoff.skip(
                    "session_pending",
                    "the previous step-bounded profile has not written all "
                    "its traces yet (it records when requests come)",
                )
            return out
        if self._backoff.waiting():
            return out
        if (refusal := self.dialect.before_start(self._client, self.options, self._backoff)) is not None:
            return [*out, refusal]
        if self._served.begin_baseline() and self._clock.sleep(self._closed, BASELINE_S):
            return out
        self._served.started()
        try:
            out.extend(self._window(window_s, timeout_s))
        finally:
            self._served.ended()
        return out

    def _session(
        self, before: frozenset[str], start_wall: float, requested: tuple[float, float] | None, quiet_s: float
    ) -> Session:
        want = self.dialect.expected(self.options.expected_files)
        return Session(before, start_wall, requested, want, quiet_s, last_new=self._clock.now())

    def _window(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        """Start, wait, stop and collect one window (the module doc's steps 3 to 5)."""
        if self.dialect.step_bounded():
            return self._step_bounded_window(window_s, timeout_s)

        o = self.options
        before = frozenset(self._files.listing())
        start_wall = time.time()
        failed, _ = self._send_start()
        if failed is not None:
            if self._stops.maybe_active:
                # The start may have been taken (no answer): end that session now, and await its
                # files as the late session's, before any other start.
                self._stops.in_background(self._clock.now() + o.request_timeout_s)
                self._files.give_up(self._session(before, start_wall, None, o.settle_quiet_s))
            return [failed]
        started_us = time.time() * 1e6

        interrupted = self._clock.sleep(self._closed, window_s)
        stop_us = time.time() * 1e6
        if interrupted:
            self._stops.stop_quietly()
            return []

        budget = self._budget(timeout_s)
        deadline = self._clock.now() + budget
        stop_error = self._stops.stop(budget, deadline)
        if stop_error is not None:
            return [stop_error]
        # One quiet poll is enough where the stop answered after the files were written; else
        # (an early answer, or none in time) ranks may still finish apart.
        waited = self._stops.answered and self.dialect.stop_waits_for_files()
        quiet = o.poll_interval_s if waited else o.settle_quiet_s
        out = self._files.collect(self._session(before, start_wall, (started_us, stop_us), quiet), deadline, budget)
        self._backoff.healthy()
        return out

    def _budget(self, timeout_s: float) -> float:
        flush = self.options.flush_timeout_s
        return flush if timeout_s <= 0 else min(flush, timeout_s)

    def _send_start(self) -> tuple[CapturedWindow | None, bool]:
        """POST /start_profile: a failed window (counted, backed off) unless the server took it,
        and whether the request reached the server without an answer (it may have been taken)."""
        step_bounded = self.dialect.step_bounded()
        try:
            reply = self._client.request(
                "POST", "/start_profile", self.dialect.start_body(self.prefix), self.options.request_timeout_s
            )
        except RequestFailed as exc:
            if exc.delivered and not step_bounded:
                self._stops.maybe_active = True
            what = "the server did not answer" if exc.delivered else "cannot reach the server"
            return self._backoff.fail(f"{what}: POST /start_profile: {exc}"), exc.delivered
        if error := reply_error(reply):
            return self._start_refused(reply, error), False
        if not step_bounded:
            self._stops.maybe_active = True
        return None, False

    def _step_bounded_window(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        """A profile the server ends by itself after some steps (no stop request): it becomes the
        open session, whose files are handed over as they come, now or in later rounds."""
        before = frozenset(self._files.listing())
        start_wall = time.time()
        failed, delivered = self._send_start()
        if failed is None or delivered:
            # Never abandoned, and kept even when the start went unanswered (it may have been
            # taken): a new start while the server records this one could fail in the server
            # (SGLang's profile v2); an idle server keeps it armed until requests come.
            session = self._session(before, start_wall, None, self.options.settle_quiet_s)
            session.accept = self.dialect.session_filter()
            self._files.late = session
        if failed is not None:
            return [failed]
        self._backoff.healthy()
        out: list[CapturedWindow] = []
        deadline = self._clock.now() + max(0.0, window_s) + self._budget(timeout_s)
        while True:
            out.extend(self._files.sweep_late())
            if (
                self._files.late is None
                or self._clock.now() >= deadline
                or self._clock.sleep(self._closed, self.options.poll_interval_s)
            ):
                return out

    def _start_refused(self, reply: Reply, error: str) -> CapturedWindow:
        if reply.status in (404, 405, 501):
            message = (
                f"profiling is disabled on the server (POST /start_profile -> {error}). {self.dialect.enable_hint()}"
            )
            return self._backoff.fail(message, disabled=True)
        if reply.status in (401, 403):
            token_env = self.options.token_env
            has = "is set" if os.environ.get(token_env, "").strip() else "is not set"
            message = (
                "the server refused the request "
                f"(POST /start_profile -> HTTP {reply.status} {reply.reason}); "
                f"a bearer token is read from the environment variable {token_env}, which {has}"
            )
            return self._backoff.fail(message)
        if (reason := self.dialect.refusal_reason(reply)) == "profile_in_use":
            return self._backoff.refuse(
                reason,
                f"a profile is already running on the server, someone else's "
                f"(POST /start_profile -> {error}); not started, to leave it alone",
            )
        if reason is not None:
            return self._backoff.refuse(reason, f"POST /start_profile -> {error}")
        return self._backoff.fail(f"POST /start_profile -> {error}")
