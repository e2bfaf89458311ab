"""The evidence worker: one thread, a bounded queue, gone when there is no work; closing waits a
bounded time and hands back what it did not start."""

from __future__ import annotations

import threading

from warpwatch.evidence.keeper import Keeper

WAIT_S = 30.0  # an upper bound on waits that end when the work does; nothing asserts on time


class Work:
    """Records items in the order done; each waits for `go` (the test's gate)."""

    def __init__(self) -> None:
        self.done: list[int] = []
        self.go = threading.Event()
        self.started = threading.Event()

    def __call__(self, item: int) -> None:
        self.started.set()
        self.go.wait(WAIT_S)
        self.done.append(item)


def test_items_are_done_in_order_and_a_full_queue_refuses_the_next() -> None:
    work = Work()
    keeper = Keeper(work, capacity=2)
    assert keeper.hand(0) and work.started.wait(WAIT_S)  # 0 in progress: the queue is empty
    assert keeper.hand(1) and keeper.hand(2)
    assert not keeper.hand(3)
    assert keeper.waiting() == 3
    work.go.set()
    assert keeper.idle(WAIT_S)
    assert work.done == [0, 1, 2] and keeper.waiting() == 0


def test_no_thread_is_left_once_the_work_is_done() -> None:
    before = {t.ident for t in threading.enumerate()}
    work = Work()
    work.go.set()
    keeper = Keeper(work)
    assert keeper.hand(0)
    assert keeper.idle(WAIT_S)
    assert {t.ident for t in threading.enumerate()} == before
    assert keeper.hand(1) and keeper.idle(WAIT_S)  # a new burst starts a new worker
    assert work.done == [0, 1]


def test_close_hands_back_what_it_did_not_start_and_takes_no_more() -> None:
    work = Work()
    keeper = Keeper(work, capacity=4)
    assert keeper.hand(0) and work.started.wait(WAIT_S)
    assert keeper.hand(1) and keeper.hand(2)
    assert keeper.close(0.0) == [1, 2]
    assert keeper.abandoning() and keeper.closed
    assert not keeper.hand(3)
    work.go.set()
    assert keeper.idle(WAIT_S) and work.done == [0]


def test_close_waits_for_what_it_can_finish() -> None:
    work = Work()
    work.go.set()
    keeper = Keeper(work, capacity=4)
    for i in range(3):
        assert keeper.hand(i)
    assert keeper.close(WAIT_S) == []
    assert work.done == [0, 1, 2] and not keeper.abandoning()
