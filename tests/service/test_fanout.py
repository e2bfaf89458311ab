"""A round's captures side by side (`CaptureFanout`): each source in its own thread, one deadline for
all, a source still busy skipped, a source that raises turned into a failed window."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from support.patience import hang_guard, wait_for
from warpwatch.capture import CapturedWindow, Source
from warpwatch.service.fanout import CaptureFanout


class Scripted(Source):
    def __init__(self, name: str, overhead_s: float = 0.0) -> None:
        self.name = name
        self.asked: list[tuple[float, float]] = []
        self.release = threading.Event()
        self.hang = False
        self.exc: Exception | None = None
        self.overhead_s = overhead_s

    @property
    def capture_overhead_s(self) -> float:
        return self.overhead_s

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        self.asked.append((window_s, timeout_s))
        if self.exc is not None:
            raise self.exc
        if self.hang:
            self.release.wait(30)
        return [CapturedWindow(self.name, None, error="none", outcome="failed")]


class CutByItsProducer(Scripted):
    """A source handing over windows somebody else cut (as dir: and replay: do)."""

    windows_timed_by = "producer"


class GatedClock:
    """A frozen clock that cannot be read until `gate()` holds (waited for as long as `hang_guard`):
    the round's deadline cannot run out before then, however slow the machine."""

    def __init__(self, gate: Callable[[], bool]) -> None:
        self.now = 100.0
        self.gate = gate

    def __call__(self) -> float:
        wait_for(self.gate, 1, "the gate to open")
        return self.now


def test_each_source_gets_its_window_and_windows_come_in_source_order() -> None:
    chosen, replayed = Scripted("kineto-daemon"), CutByItsProducer("replay:/t")
    windows = CaptureFanout().capture([chosen, replayed], 2.0, 1.0, 0.5)
    assert [w.source for w in windows] == ["kineto-daemon", "replay:/t"]
    assert chosen.asked == [(2.0, 0.5)] and replayed.asked == [(1.0, 0.5)]


def test_who_cuts_the_windows_is_declared_not_read_from_the_name() -> None:
    chosen, replayed = Scripted("dir:/looks-like-a-folder"), CutByItsProducer("stand-in")
    CaptureFanout().capture([chosen, replayed], 2.0, 1.0, 0.5)
    assert chosen.asked == [(2.0, 0.5)] and replayed.asked == [(1.0, 0.5)]


def test_a_source_that_raises_gives_a_failed_window_of_kind_raised() -> None:
    src = Scripted("s")
    src.exc = RuntimeError("socket gone")
    [window] = CaptureFanout().capture([src], 1.0, 1.0, 0.0)
    assert (window.outcome, window.failure_kind, window.error) == (
        "failed",
        "raised",
        "capture raised RuntimeError: socket gone",
    )


def test_the_bound_grows_by_the_largest_stated_overhead() -> None:
    fanout = CaptureFanout(grace_s=5.0)
    assert fanout.bound([Scripted("a", 1.5), Scripted("b", 3.0)], 2.0, 10.0) == 2.0 + 10.0 + 5.0 + 3.0
    assert fanout.bound([], 2.0, 10.0) == 17.0


def test_a_hanging_source_times_out_and_is_skipped_until_it_returns() -> None:
    src, other = Scripted("s"), Scripted("t")
    src.hang = True
    fanout: CaptureFanout
    # Time stands still until `other` has returned: its window always arrives before the deadline
    # (0.05 s of frozen time, i.e. joins of 0.05 s), while `src` hangs past it.
    fanout = CaptureFanout(grace_s=0.0, monotonic=GatedClock(lambda: not fanout.busy(other)))
    [timed_out, ok] = fanout.capture([src, other], 0.05, 0.05, 0.0)
    assert (timed_out.outcome, timed_out.error) == ("timed_out", "capture did not return within 0.05s")
    assert (ok.source, ok.outcome, ok.error) == ("t", "failed", "none")  # the window `other` returned
    assert fanout.busy(src) and not fanout.busy(other)
    busy: list[Source] = []
    windows = fanout.capture([src, other], 0.05, 0.05, 0.0, on_busy=busy.append)
    assert busy == [src] and [(w.source, w.outcome) for w in windows] == [("t", "failed")]
    assert len(src.asked) == 1 and len(other.asked) == 2  # never called while its capture runs
    src.release.set()
    deadline = time.monotonic() + hang_guard()
    while fanout.busy(src):
        assert time.monotonic() < deadline, "the released capture never returned"
        time.sleep(0.01)
