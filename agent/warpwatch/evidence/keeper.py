"""The worker that keeps traces off the round's thread: one thread, a bounded queue.

The round hands each window to keep (`hand`) and goes on; the thread does the work, one item at a
time, oldest first. A full queue refuses the hand-over (the caller counts it and lets its source
have the trace back at once). `close` stops taking items, lets the thread finish what was handed
over for at most a given time, and returns what it had not started (abandoned); `abandoning` turns
true then, for the item in progress to give up.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

QUEUE = 4
"""Windows waiting to be kept at most: each holds its trace file from its source's cleanup."""


class Keeper(Generic[T]):
    """One worker thread over a bounded queue (module doc); `work` must not raise. The thread runs
    while there is work and ends when the queue is empty (an idle agent holds no thread for it)."""

    def __init__(self, work: Callable[[T], None], capacity: int = QUEUE, name: str = "warpwatch-evidence") -> None:
        self.work = work
        self.capacity = capacity
        self.name = name
        self._cond = threading.Condition()
        self._items: deque[T] = deque()
        self._busy = False
        self._closed = False
        self._abandoning = threading.Event()
        self._thread: threading.Thread | None = None
        """The worker while there is work; None once it has emptied the queue."""
        self._last: threading.Thread | None = None

    def hand(self, item: T) -> bool:
        """Queue `item`; False (nothing queued) when the queue is full or the keeper closed."""
        with self._cond:
            if self._closed or len(self._items) >= self.capacity:
                return False
            if self._thread is None:
                # a daemon: a copy stuck on a hung volume must not keep the process alive
                thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                thread.start()  # before the item is queued: a thread that cannot start queues nothing
                self._thread = thread
            self._items.append(item)
            return True

    def waiting(self) -> int:
        """Items handed over and not yet done (queued or in progress)."""
        with self._cond:
            return len(self._items) + self._busy

    def idle(self, timeout: float | None = None) -> bool:
        """Wait until everything handed over is done and the worker has ended; False when `timeout`
        passed first."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._thread is None, timeout):
                return False
            last = self._last
        if last is not None:
            last.join(timeout)
        return True

    @property
    def closed(self) -> bool:
        """Whether `close` was called: nothing more is taken."""
        with self._cond:
            return self._closed

    def abandoning(self) -> bool:
        """Whether `close` gave up waiting: the item in progress should stop."""
        return self._abandoning.is_set()

    def close(self, timeout: float) -> list[T]:
        """Take no more; wait at most `timeout` seconds for what was handed over; return the items
        not started by then (the one in progress is told to give up, `abandoning`)."""
        with self._cond:
            self._closed = True
            if self._cond.wait_for(lambda: self._thread is None, max(0.0, timeout)):
                return []
            left = list(self._items)
            self._items.clear()
            self._abandoning.set()
            return left

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._items:
                    self._thread, self._last = None, threading.current_thread()
                    self._cond.notify_all()
                    return
                item = self._items.popleft()
                self._busy = True
            try:
                self.work(item)
            finally:
                with self._cond:
                    self._busy = False
