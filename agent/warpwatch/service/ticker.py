"""The agent's schedule: a tick every `period` plus a random 0..`jitter`, on APScheduler 3, with a
watchdog for steps of the wall clock. `service.Service` starts one and runs a round on each tick."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

CLOCK_JUMP_S = 1.0
"""A step of the wall clock against the monotonic clock beyond this is a jump."""


class Ticker:
    """Calls `tick` every `period` seconds plus a random 0..`jitter`, the first time at once, with
    APScheduler 3 (`BackgroundScheduler`, `IntervalTrigger`): coalesced misfires (a tick late by
    several periods stands for all of them, no burst), never two at once. `tick` must return at once.

    APScheduler 3 computes due times on the wall clock, so a step of it (NTP, a resumed VM) would
    stop ticks for the length of a backward step. A watchdog thread compares the wall clock with
    the monotonic clock every `watch_s` and, on a step beyond CLOCK_JUMP_S, makes the job due at
    once: rounds go on after one early tick. `wall` (the watchdog's wall clock, seconds) and `now`
    (the time of the first tick and of a tick made due at once) are injectable for tests.
    """

    JOB_ID = "round"

    def __init__(
        self,
        tick: Callable[[], None],
        period: float,
        jitter: float = 0.0,
        *,
        wall: Callable[[], float] = time.time,
        watch_s: float = 1.0,
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        self._tick = tick
        self._period = period
        self._jitter = jitter
        self._wall = wall
        self._watch_s = watch_s
        self._now = now
        self._stop = threading.Event()
        self._scheduler: Any = None
        self._watchdog: threading.Thread | None = None

    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        # APScheduler logs every job added, run and finished at INFO: our own round lines say it.
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
        scheduler = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=timezone.utc,
        )
        scheduler.add_job(
            self._tick,
            IntervalTrigger(seconds=self._period, jitter=self._jitter or None, timezone=timezone.utc),
            id=self.JOB_ID,
            name="capture window",
            next_run_time=self._now(),
        )
        scheduler.start()
        self._scheduler = scheduler
        self._watchdog = threading.Thread(target=self._watch, name="warpwatch-clock-watch", daemon=True)
        self._watchdog.start()

    def set_period(self, period: float) -> None:
        """Ticks every `period` from now on (the next one `period` after the last)."""
        from apscheduler.triggers.interval import IntervalTrigger

        self._period = period
        if self._scheduler is not None:
            self._scheduler.reschedule_job(
                self.JOB_ID, trigger=IntervalTrigger(seconds=period, jitter=self._jitter or None, timezone=timezone.utc)
            )

    def _watch(self) -> None:
        wall0, mono0 = self._wall(), time.monotonic()
        while not self._stop.wait(self._watch_s):
            wall, mono = self._wall(), time.monotonic()
            if abs((wall - wall0) - (mono - mono0)) > CLOCK_JUMP_S and self._scheduler is not None:
                self._scheduler.modify_job(self.JOB_ID, next_run_time=self._now())
            wall0, mono0 = wall, mono

    def stop(self) -> None:
        self._stop.set()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(2.0)
