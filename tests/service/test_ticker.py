"""The agent's schedule (`service.ticker`) on the real APScheduler 3, driven by a fake clock: due
times are read from the clock the test moves, so what is asserted is which ticks ran at which
scheduled time, never how many fit into some seconds of real time."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

import apscheduler.executors.base
import apscheduler.schedulers.base
import pytest

from warpwatch.service.ticker import Ticker

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
PERIOD = 0.25
"""Exact in binary, so scheduled times add up without rounding."""
WAIT_S = 30.0
"""How long a wait for a state gives up after: a hang, never a slow machine."""


class FakeClock:
    """The time APScheduler's scheduler loop and the ticker read; it moves only in `advance`. The
    scheduler's loop still sleeps in real time until the next due time, so it notices a move
    within one period."""

    def __init__(self) -> None:
        self._now = START
        self._lock = threading.Lock()

    def now(self, tz: tzinfo | None = None) -> datetime:
        with self._lock:
            return self._now if tz is None else self._now.astimezone(tz)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)

    def since_start(self) -> float:
        return (self.now() - START).total_seconds()


class Ticks:
    """What `tick` saw: the fake time of each call. `hold` makes one call wait for `release`."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.at: list[float] = []
        self.hold: int | None = None
        self.held = threading.Event()
        self.release = threading.Event()
        self._changed = threading.Condition()

    def tick(self) -> None:
        with self._changed:
            self.at.append(self.clock.since_start())
            call = len(self.at)
            self._changed.notify_all()
        if call == self.hold:
            self.held.set()
            self.release.wait(WAIT_S)

    def wait_for(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.at) >= count, WAIT_S), self.at


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """A fake clock for APScheduler 3's scheduler loop, which reads `datetime.now` in its module."""
    fake = FakeClock()

    class FakeDatetime(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> datetime:  # type: ignore[override]
            return fake.now(tz)

    monkeypatch.setattr(apscheduler.schedulers.base, "datetime", FakeDatetime)
    return fake


@pytest.fixture
def ticks(clock: FakeClock) -> Ticks:
    return Ticks(clock)


class Finished:
    """How many runs APScheduler's executor has counted as over: a run is over for its
    `max_instances` only once the executor's callback has run, a moment after `tick` returned."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = threading.Condition()

    def note(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def wait_for(self, count: int) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: self.count >= count, WAIT_S), self.count


@pytest.fixture
def finished(monkeypatch: pytest.MonkeyPatch) -> Finished:
    seen = Finished()
    original = apscheduler.executors.base.BaseExecutor._run_job_success

    def run_job_success(self: Any, job_id: str, events: Any) -> None:
        original(self, job_id, events)
        seen.note()

    monkeypatch.setattr(apscheduler.executors.base.BaseExecutor, "_run_job_success", run_job_success)
    return seen


@pytest.fixture
def started(clock: FakeClock, ticks: Ticks) -> Iterator[Callable[..., Ticker]]:
    tickers: list[Ticker] = []

    def start(**kwargs: Any) -> Ticker:
        ticker = Ticker(ticks.tick, now=clock.now, **{"period": PERIOD, **kwargs})
        ticker.start()
        tickers.append(ticker)
        return ticker

    yield start
    for ticker in tickers:
        ticker.stop()


def settle(clock: FakeClock, ticks: Ticks, count: int) -> None:
    """One more period and its tick: with at most one tick running at a time, every call before it
    has returned, so `ticks.at` is complete up to here."""
    clock.advance(PERIOD)
    ticks.wait_for(count)


def test_the_first_tick_comes_at_once_then_one_every_period(
    clock: FakeClock, ticks: Ticks, started: Callable[..., Ticker]
) -> None:
    started()
    ticks.wait_for(1)
    for n in range(2, 6):
        clock.advance(PERIOD)
        ticks.wait_for(n)
    settle(clock, ticks, 6)
    assert ticks.at == [PERIOD * n for n in range(6)]


def test_a_scheduler_late_by_several_periods_ticks_once_not_in_a_burst(
    clock: FakeClock, ticks: Ticks, started: Callable[..., Ticker]
) -> None:
    """The process was stopped (or starved) for three periods: one tick stands for all of them."""
    started()
    ticks.wait_for(1)
    clock.advance(3 * PERIOD)
    ticks.wait_for(2)
    settle(clock, ticks, 3)
    assert ticks.at == [0.0, 3 * PERIOD, 4 * PERIOD]


def test_a_tick_still_running_when_the_next_is_due_is_not_run_twice(
    clock: FakeClock,
    ticks: Ticks,
    started: Callable[..., Ticker],
    finished: Finished,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Never two ticks at once: ticks due while one runs are skipped (APScheduler says so), and the
    schedule goes on from the next period after the one that ran late."""
    ticks.hold = 2
    started()
    ticks.wait_for(1)
    with caplog.at_level(logging.WARNING, logger="apscheduler"):
        clock.advance(PERIOD)
        assert ticks.held.wait(WAIT_S)
        clock.advance(3 * PERIOD)  # three more due while the second tick runs
        skipped = "maximum number of running instances reached"
        deadline = time.monotonic() + WAIT_S
        while not any(skipped in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the due tick was not skipped"
            time.sleep(0.01)
    ticks.release.set()
    # the second run is over for APScheduler only once its executor counted it so: a tick due
    # before then is skipped like the three above (the race that failed CI under stress-ng)
    finished.wait_for(2)
    settle(clock, ticks, 3)
    assert ticks.at == [0.0, PERIOD, 5 * PERIOD]


def test_a_wall_clock_step_makes_the_next_tick_due_at_once(
    clock: FakeClock, ticks: Ticks, started: Callable[..., Ticker]
) -> None:
    """APScheduler 3 schedules on the wall clock: without the watchdog, a backward step of an hour
    would stop rounds for an hour. The wall clock seen by the watchdog is stepped back by one."""
    offset = [0.0]
    started(period=3600.0, wall=lambda: time.time() + offset[0], watch_s=0.05)
    ticks.wait_for(1)
    offset[0] = -3600.0
    ticks.wait_for(2)
    assert ticks.at == [0.0, 0.0]  # the second tick came at the step, not from the (unmoved) clock
