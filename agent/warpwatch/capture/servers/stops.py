"""The stops of `base.ProfilingServerSource` (`StopTracker`): every `POST /stop_profile` is
awaited until the server answers it (`client.InFlight`), and no start is sent while one is
unanswered.

vLLM serialises its profiler's requests (`AsyncLLM._profile_lock`): a start sent while a stop is
flushing (minutes with `torch_profiler_with_stack`, vLLM's default) waits behind it and opens a
session after it. So a stop not answered within its window stays in flight (`StopTracker`), each
round until then opens no window (`previous_flush_pending`), and the answer ends the late
session's wait (`session.Session.ended_at`).
"""

from __future__ import annotations

import logging
import threading

from .. import CapturedWindow
from .backoff import Backoff
from .client import InFlight, RequestFailed, ServerClient, reply_error
from .dialect import Dialect
from .files import SessionFiles
from .options import ServerOptions

log = logging.getLogger("warpwatch.capture.servers")


class StopTracker:
    """The stops a source sends: the one whose answer is still awaited, whether a session of ours
    may still run on the server, and how long each answered stop took (`take_seconds`)."""

    def __init__(
        self, options: ServerOptions, client: ServerClient, dialect: Dialect, backoff: Backoff, files: SessionFiles
    ) -> None:
        self.name = options.label
        self.request_timeout_s = options.request_timeout_s
        self.late_timeout_s = options.late_timeout_s
        self.poll_interval_s = options.poll_interval_s
        self._client = client
        self._dialect = dialect
        self._backoff = backoff
        self._files = files
        self._clock = options.clock
        self.maybe_active = False
        """A start succeeded and its stop may not have: end that session before the next one."""
        self.answered = False
        """Whether the last stop sent for a window was answered in its window."""
        self._call: InFlight | None = None
        """The last stop sent, while its answer has not been dealt with."""
        self._seconds: list[float] = []

    def stop(self, budget: float, deadline: float) -> CapturedWindow | None:
        """Send stop_profile, retries included, by `deadline` (the collection's: the window's
        time after its stop is `budget` in all); a failed window when the window is lost. An
        answer not there by `deadline` is still awaited (`previous_answered`)."""
        self.answered = False
        call = self.in_background(deadline)
        if not call.wait(deadline - self._clock.now()):
            # Still flushing: the files may yet appear; collect what is there.
            log.info(
                "%s: POST /stop_profile not answered within %g s (server still writing traces); "
                "no new window until it is",
                self.name,
                budget,
            )
            return None
        self._call = None
        if call.reply is None:
            return self._backoff.fail(f"server went away mid-window: POST /stop_profile: {call.error}")
        return self._ended(call)

    def in_background(self, retry_deadline: float) -> InFlight:
        """POST /stop_profile, its answer awaited up to `late_timeout_s` (retries of attempts that
        never reached the server only until `retry_deadline`). No engine's stop takes a body."""
        timeout = max(self.late_timeout_s, self.request_timeout_s)
        call = InFlight(self._client, "POST", "/stop_profile", None, timeout, retry_deadline)
        self._call = call
        return call

    def _ended(self, call: InFlight) -> CapturedWindow | None:
        """The server answered a stop: no session of ours runs now. How long it took is the stall
        the stop cost the server (`take_seconds`)."""
        reply = call.reply
        assert reply is not None
        if (seconds := call.seconds()) is not None:
            self._seconds.append(seconds)
        self.maybe_active = False
        self.answered = True
        if self._files.late is not None and self._dialect.stop_waits_for_files():
            self._files.late.ended_at = self._clock.now()  # its files are written: done once quiet
        if error := reply_error(reply):
            return self._backoff.fail(f"POST /stop_profile -> {error}")
        return None

    def previous_answered(self, out: list[CapturedWindow]) -> bool:
        """Whether a new window may open as far as the last stop goes: False (counted) while it is
        unanswered, or when it failed (a failed window in `out`; the session is ended later)."""
        call = self._call
        if call is None:
            return True
        if not call.done():
            self._backoff.skip(
                "previous_flush_pending",
                "POST /stop_profile is not answered yet (the server is still ending the previous session)",
            )
            return False
        self._call = None
        if call.reply is None:
            out.append(self._backoff.fail(f"POST /stop_profile got no answer: {call.error}"))
            return False
        if (failed := self._ended(call)) is not None:
            out.append(failed)
            return False
        return True

    def stop_quietly(self) -> None:
        try:
            self._client.request_once("POST", "/stop_profile", None, self.request_timeout_s)
            self.maybe_active = False
        except RequestFailed as exc:
            log.warning("%s: POST /stop_profile at shutdown: %s", self.name, exc)

    def end_leftover_session(self) -> list[CapturedWindow] | None:
        """Stop a session an earlier window may have left running; None once the server answered,
        else what this round gives instead of a window (the stop is still awaited, or failed)."""
        log.info("%s: sending POST /stop_profile to end a session an earlier window left open", self.name)
        call = self.in_background(self._clock.now() + self.request_timeout_s)
        if not call.wait(self.request_timeout_s):
            self._backoff.skip(
                "previous_flush_pending",
                "POST /stop_profile, sent to end a session an earlier window left open, is not answered yet",
            )
            return []
        self._call = None
        if call.reply is None:
            return [
                self._backoff.fail(
                    f"cannot end the session an earlier window left open: POST /stop_profile: {call.error}"
                )
            ]
        failed = self._ended(call)
        return None if failed is None else [failed]

    def drain(self, deadline: float, closed: threading.Event) -> tuple[int, bool]:
        """At shutdown: ends a session of ours that may still run, then hands over the late
        session's files as they complete, each released at once as processed, until nothing is in
        flight or `deadline`. Returns (files handed over, whether something is still in flight)."""
        if self.maybe_active and self._call is None:
            self.in_background(deadline)
        handed = 0
        while True:
            for w in self._files.sweep_late():
                handed += w.path is not None
                w.done(True)
            left = self._awaiting() or self._files.late is not None
            if not left or self._clock.now() >= deadline or self._clock.sleep(closed, self.poll_interval_s):
                return handed, left

    def _awaiting(self) -> bool:
        """Whether a stop's answer is still awaited; an answer that came is taken (`_ended`)."""
        call = self._call
        if call is None:
            return False
        if not call.done():
            return True
        self._call = None
        if call.reply is not None:
            self._ended(call)
        return False

    def take_seconds(self) -> list[float]:
        """The stops answered since the last call, each from its request to its answer."""
        out, self._seconds = self._seconds, []
        return out
