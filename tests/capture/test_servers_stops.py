"""No start after an unanswered stop, and no session of the agent's left unaccounted for: the fast
version, against the threaded vLLM stand-in made to queue its profiler's requests one behind the
other as vLLM 0.32 does (`AsyncLLM._profile_lock`). The same hazard on the real vLLM, where a
stop with stacks takes a minute: tests/capture/test_vllm_real_stacks.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.engines.threaded import ALEXNET, Recorded, VllmStandIn
from support.patience import hang_guard
from warpwatch.capture import CapturedWindow
from warpwatch.capture.registry import vllm_source
from warpwatch.capture.servers import ProfilingServerSource

pytestmark = pytest.mark.skipif(not ALEXNET.exists(), reason="shared traces not present")

FAST = {
    "poll_interval_s": 0.05,
    "retry_pause_s": 0.05,
    "request_timeout_s": 0.5,
    "settle_quiet_s": 0.3,
    "backoff_s": 0.2,
    "max_backoff_s": 0.2,
}


@dataclass
class QueuedStandIn(VllmStandIn):
    """Profiler requests served one at a time, each holding the queue: a stop that ends a session
    writes its files, then (`hold_stop`) holds until the test sets `stop_release` (vLLM writes its
    key_averages table after the trace); a start takes effect, then holds `start_hold_s` before its
    answer (each hold the first time only)."""

    stop_release: threading.Event = field(default_factory=threading.Event)
    hold_stop: bool = False
    start_hold_s: float = 0.0
    sessions: int = 0
    _queue: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, rec: Recorded) -> tuple[int, str, bytes]:
        with self._queue:
            was_active = self.active
            answer = super().handle(rec)
            if rec.path == "/start_profile":
                self.sessions += not was_active
                time.sleep(self.start_hold_s)
                self.start_hold_s = 0.0  # the first start only
            elif rec.path == "/stop_profile" and was_active and self.hold_stop:
                self.stop_release.wait(hang_guard())
                self.hold_stop = False
            return answer


@pytest.fixture
def server(trace_dir: Path) -> Iterator[QueuedStandIn]:
    s = QueuedStandIn(trace_dir)
    yield s
    s.stop_release.set()
    s.close()


def rounds_until(src: ProfilingServerSource, done: Callable[[list[CapturedWindow]], bool]) -> list[CapturedWindow]:
    """Rounds (a 50-ms window, then 50 ms) until what they gave satisfies `done`."""
    out: list[CapturedWindow] = []
    deadline = time.monotonic() + hang_guard(5)
    while not done(out):
        assert time.monotonic() < deadline, [w.error for w in out]
        out += src.capture(0.05, 5)
        time.sleep(0.05)
    return out


def ranks_handed(windows: list[CapturedWindow]) -> list[str]:
    return sorted(w.labels["rank"] for w in windows if w.path is not None)


def starts(server: QueuedStandIn) -> int:
    return sum(r.path == "/start_profile" for r in server.requests)


@pytest.mark.slow
def test_no_start_while_a_stop_is_unanswered(server: QueuedStandIn, trace_dir: Path) -> None:
    """The stop writes its files at once but answers only when the test lets it: the files are
    handed over as late windows meanwhile, and no start is sent until the answer (until f2305fe,
    a start went out once the files were in, queued behind the stop, and began a session nobody
    ended)."""
    server.hold_stop = True
    src = vllm_source(server.url, trace_dir, delete_processed=True, flush_timeout_s=0.5, **FAST)
    first = src.capture(0.05, 5)
    # No answer within flush_timeout_s: the window times out, one window per rank file seen by
    # then (both, on an idle machine; under load the stand-in's second file once came later).
    assert first and all(w.outcome == "timed_out" and w.path is None for w in first), [w.error for w in first]
    later = rounds_until(src, lambda got: ranks_handed(got) == ["0", "1"])  # late, while the stop is out
    later += src.capture(0.05, 5)  # a round with the files in: before f2305fe, it sent a start
    assert starts(server) == 1 and server.sessions == 1
    assert src.stats().skipped.get("previous_flush_pending", 0) >= 1
    for w in later:
        if w.path is not None:
            w.done(True)
    server.stop_release.set()
    later = rounds_until(src, lambda got: starts(server) >= 2 and any(w.path is not None for w in got))
    assert [w.error for w in later if w.path is None] == []  # the stop is answered: windows again
    assert server.sessions == starts(server)  # every start the server took began a session of ours


@pytest.mark.slow
def test_a_start_answered_too_late_is_ended_at_once_and_its_files_collected(
    server: QueuedStandIn, trace_dir: Path
) -> None:
    """The start takes effect but answers after the agent's 0.5 s request time-out: the agent stops
    that session right away (it may be running, and only the agent knows of it), reads its files
    as late ones, and starts nothing more until the stop is answered."""
    server.start_hold_s = 1.0
    src = vllm_source(server.url, trace_dir, delete_processed=True, flush_timeout_s=2.0, **FAST)
    (w,) = src.capture(0.05, 5)
    assert w.outcome == "failed" and w.error is not None and "did not answer" in w.error
    got = rounds_until(src, lambda got: ranks_handed([x for x in got if x.requested is None]) == ["0", "1"])
    paths = [r.path for r in server.requests]
    assert paths[:2] == ["/start_profile", "/stop_profile"], paths
    late = [x for x in got if x.path is not None and x.requested is None]
    for x in late:
        x.done(True)
        assert x.path is not None and not x.path.exists()
    assert src.stats().files.get("late") == 2
    assert server.sessions == starts(server)  # every start the server took began a session of ours
    assert [x.error for x in got if x.path is None] == []  # later windows: no failure
