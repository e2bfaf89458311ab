"""The time a profiling-server source measures its windows on (`WindowClock`).

A window's budget (`flush_timeout_s`), the quiet spell that ends a session (`settle_quiet_s`),
the late session's `late_timeout_s` and the pauses between retries all count on it, in two
kinds of wait: `sleep` lets time pass (the window itself, a poll's interval, a retry's pause),
and `await_answer` waits for the server to answer a request (a stop, while its ranks write).

The real clock is `time.monotonic`, and both waits are `threading.Event.wait`. A test gives a
clock that moves only while the source lets time pass and stands still while it awaits an
answer (`tests/support/servers.PatientClock`): how fast the machine runs then changes how long
the test takes, never what its windows see. The stop's own duration, the stall it cost the
server (`client.InFlight.seconds`), is measured on `time.monotonic` always.
"""

from __future__ import annotations

import threading
import time


class WindowClock:
    """Monotonic seconds, and the two waits a source makes on them."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, interrupt: threading.Event, seconds: float) -> bool:
        """Let `seconds` pass, or less when `interrupt` is set first: whether it is set."""
        return interrupt.wait(max(0.0, seconds))

    def await_answer(self, answered: threading.Event, seconds: float) -> bool:
        """Wait up to `seconds` for a request's end (`answered`): whether it ended."""
        return answered.wait(max(0.0, seconds))
