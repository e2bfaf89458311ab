"""The stop half of `base.ProfilingServerSource`: every `POST /stop_profile` is awaited until
the server answers it (`client.InFlight`), and no start is sent while one is unanswered.

vLLM serialises its profiler's requests (`AsyncLLM._profile_lock`): a start sent while a stop is
flushing (minutes with `torch_profiler_with_stack`, vLLM's default) waits behind it and opens a
session after it. So a stop not answered within its window stays in flight (`_stop_call`), each
round until then opens no window (`previous_flush_pending`), and the answer ends the late
session's wait (`session.Session.ended_at`).
"""

from __future__ import annotations

import logging
import threading
import time

from .. import CapturedWindow
from .client import InFlight, RequestFailed, ServerClient, reply_error
from .session import Session

log = logging.getLogger("warpwatch.capture.servers")


class SessionStops:
    """Mixed into `base.ProfilingServerSource`, which sets the attributes below."""

    name: str
    request_timeout_s: float
    late_timeout_s: float
    _client: ServerClient
    _closed: threading.Event
    _late: Session | None
    _maybe_active: bool
    _stop_answered: bool
    _stop_call: InFlight | None
    _stop_seconds: list[float]

    def _stop_body(self) -> bytes | None:
        raise NotImplementedError

    def _stop_waits_for_files(self) -> bool:
        raise NotImplementedError

    def _fail_and_back_off(self, message: str, *, disabled: bool = False) -> CapturedWindow:
        raise NotImplementedError

    def _skip(self, reason: str, why: str) -> None:
        raise NotImplementedError

    def _stop(self, budget: float, deadline: float) -> CapturedWindow | None:
        """Send stop_profile, retries included, by `deadline` (the collection's: the window's
        time after its stop is `budget` in all); a failed window when the window is lost. An
        answer not there by `deadline` is still awaited (`_previous_stop_answered`)."""
        self._stop_answered = False
        call = self._stop_in_background(deadline)
        if not call.wait(deadline - time.monotonic()):
            # Still flushing: the files may yet appear; collect what is there.
            log.info("%s: POST /stop_profile not answered within %g s (server still writing traces); "
                     "no new window until it is", self.name, budget)
            return None
        self._stop_call = None
        if call.reply is None:
            return self._fail_and_back_off(f"server went away mid-window: POST /stop_profile: {call.error}")
        return self._stop_ended(call)

    def _stop_in_background(self, retry_deadline: float) -> InFlight:
        """POST /stop_profile, its answer awaited up to `late_timeout_s` (retries of attempts that
        never reached the server only until `retry_deadline`)."""
        timeout = max(self.late_timeout_s, self.request_timeout_s)
        call = InFlight(self._client, "POST", "/stop_profile", self._stop_body(), timeout, retry_deadline)
        self._stop_call = call
        return call

    def _stop_ended(self, call: InFlight) -> CapturedWindow | None:
        """The server answered a stop: no session of ours runs now. How long it took is the stall
        the stop cost the server (`take_stop_seconds`)."""
        reply = call.reply
        assert reply is not None
        if (seconds := call.seconds()) is not None:
            self._stop_seconds.append(seconds)
        self._maybe_active = False
        self._stop_answered = True
        if self._late is not None and self._stop_waits_for_files():
            self._late.ended_at = time.monotonic()  # its files are written: done once quiet
        if error := reply_error(reply):
            return self._fail_and_back_off(f"POST /stop_profile -> {error}")
        return None

    def _previous_stop_answered(self, out: list[CapturedWindow]) -> bool:
        """Whether a new window may open as far as the last stop goes: False (counted) while it is
        unanswered, or when it failed (a failed window in `out`; the session is ended later)."""
        call = self._stop_call
        if call is None:
            return True
        if not call.done():
            self._skip("previous_flush_pending", "POST /stop_profile is not answered yet (the server is "
                       "still ending the previous session)")
            return False
        self._stop_call = None
        if call.reply is None:
            out.append(self._fail_and_back_off(f"POST /stop_profile got no answer: {call.error}"))
            return False
        if (failed := self._stop_ended(call)) is not None:
            out.append(failed)
            return False
        return True

    def _stop_quietly(self) -> None:
        try:
            self._client.request_once("POST", "/stop_profile", self._stop_body(), self.request_timeout_s)
            self._maybe_active = False
        except RequestFailed as exc:
            log.warning("%s: POST /stop_profile at shutdown: %s", self.name, exc)

    def _end_leftover_session(self) -> list[CapturedWindow] | None:
        """Stop a session an earlier window may have left running; None once the server answered,
        else what this round gives instead of a window (the stop is still awaited, or failed)."""
        log.info("%s: sending POST /stop_profile to end a session an earlier window left open", self.name)
        call = self._stop_in_background(time.monotonic() + self.request_timeout_s)
        if not call.wait(self.request_timeout_s):
            self._skip("previous_flush_pending", "POST /stop_profile, sent to end a session an earlier "
                       "window left open, is not answered yet")
            return []
        self._stop_call = None
        if call.reply is None:
            return [self._fail_and_back_off(f"cannot end the session an earlier window left open: "
                                            f"POST /stop_profile: {call.error}")]
        failed = self._stop_ended(call)
        return None if failed is None else [failed]

    def take_stop_seconds(self) -> list[float]:
        """The stops answered since the last call, each from its request to its answer."""
        out, self._stop_seconds = self._stop_seconds, []
        return out
