"""How long a test waits before it calls an operation hung (issue 38).

The tests wait for a state (a line in a log, a value on /metrics, a registered client) and go on
as soon as it holds; the deadline of such a wait only guards the suite against a hang. On a
loaded machine (two cores shared with stress-ng, or with three other test sessions) an operation
that takes 1 s alone takes 20 s or more, so a deadline sized to the operation's usual time is a
timing assertion in disguise. Every waiting helper in `support` waits at least `HANG_GUARD_S`,
whatever its caller asks: the caller's figure says how long the wait usually takes, not how long
a slow machine may take. A test that checks that something does *not* happen within a time sleeps
that time and looks; it does not use these helpers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

HANG_GUARD_S = float(os.environ.get("WARPWATCH_TEST_HANG_GUARD_S", "300"))
"""Five minutes: longer than any wait of the suite takes on a machine ten times overloaded, and
short enough that a hang fails the run rather than the CI's own timeout."""


def hang_guard(usual_s: float | None = None) -> float:
    """The deadline for a wait that usually takes `usual_s`: never less than `HANG_GUARD_S`."""
    return max(usual_s or 0.0, HANG_GUARD_S)


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Wait until `condition` holds; `timeout_s` is how long it usually takes, the deadline a
    hang guard of minutes."""
    limit = hang_guard(timeout_s)
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:g} s waiting for {what}")
        time.sleep(0.05)
