"""Issue 20: the kineto-daemon source's registry under fake senders. One-datagram registrations
must not lock real clients out, and one sender's poll gaps must not set the window's timing for
the others. Fake clients speak the protocol exactly; one test uses a real PyTorch client."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.daemonpeer import (
    Peer,
    assert_kineto_trace,
    fake_client,
    kineto_send,
    needs_torch,
    open_peer,
    ready_pids,
    req,
)
from support.patience import wait_for
from warpwatch.capture import CapturedWindow
from warpwatch.capture.daemon.clients import MAX_CLIENTS, ClientRegistry
from warpwatch.capture.daemon.sockets import DaemonSocket
from warpwatch.capture.daemon.wire import Address


@pytest.fixture
def peer() -> Iterator[Peer]:
    with open_peer() as p:
        yield p


# -- the estimate of a client's poll interval ---------------------------------------------------


def estimate(gaps: list[float]) -> float | None:
    """The interval the registry estimates for a client polling with these gaps."""
    registry = ClientRegistry(default_interval_s=5.0)
    t = 0.0
    client, _ = registry.touch("/x/c", (1,), 0, t)
    registry.poll(client, t)
    for gap in gaps:
        t += gap
        registry.poll(client, t)
    return client.poll_interval_s


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e6, allow_nan=False), min_size=1, max_size=20))
def test_the_interval_is_the_median_of_the_last_five_gaps_within_one_second_and_a_minute(gaps: list[float]) -> None:
    recent = sorted(gaps[-5:])
    middle = (recent[(len(recent) - 1) // 2] + recent[len(recent) // 2]) / 2
    assert estimate(gaps) == pytest.approx(min(max(middle, 1.0), 60.0))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 30), st.integers(5, 10), st.floats(0.0, 1e5), st.integers(0, 4))
def test_one_odd_gap_among_regular_polls_does_not_move_the_interval(
    interval: int, polls: int, odd: float, where: int
) -> None:
    gaps = [float(interval)] * polls
    gaps[-1 - where] = odd  # one missed poll (long) or duplicate (short), among the last five
    assert estimate(gaps) == pytest.approx(interval)


# -- one-shot registrations ---------------------------------------------------------------------


@pytest.mark.usefixtures("lockstep_replies")
def test_one_shot_senders_make_room_for_a_client_that_keeps_polling(peer: Peer) -> None:
    """Issue 20: 1,024 one-datagram registrations filled the registry, and every later sender,
    a real client too, was refused. Here with room for 8."""
    src = peer.source(max_clients=8)
    src.start()
    daemon = str(peer.socket_dir / "dynolog")
    shots: list[socket.socket] = []

    def one_shot(i: int) -> None:
        s = fake_client(str(peer.socket_dir / f"shot{i}"))
        s.sendto(req(3, [10_000 + i]), daemon)
        s.recv(4096)
        shots.append(s)

    real = fake_client(str(peer.socket_dir / "real"))
    try:
        for i in range(8):
            one_shot(i)
        for _ in range(2):
            real.sendto(req(3, [os.getpid()]), daemon)
            real.recv(4096)  # answered: it made room
        for i in range(8, 28):
            one_shot(i)
        pids = sorted(c.pid for c in src.clients())
        # The client that keeps polling stays; of the one-shots, the 7 latest.
        assert pids == sorted([*range(10_021, 10_028), os.getpid()])
        stats = src.stats()
        assert (stats.clients, stats.clients_seen) == (8, 29)
        assert stats.evicted["registry_full"] == 29 - 8
    finally:
        for s in [*shots, real]:
            s.close()
        src.close()


@pytest.mark.slow
@needs_torch
def test_a_real_client_gets_its_window_after_more_one_shot_senders_than_the_registry_holds(peer: Peer) -> None:
    """Issue 20, end to end: 1,100 senders register with one datagram each and never read their
    replies (which also fill the socket's send buffer); then a real PyTorch client comes."""
    src = peer.source()
    src.start()
    daemon = str(peer.socket_dir / "dynolog")
    shots = []
    try:
        delivered = 0
        for i in range(MAX_CLIENTS + 76):
            s = fake_client(str(peer.socket_dir / f"f{i}"))
            # A send that meets the agent renewing its socket may fail; the sender knows it.
            delivered += kineto_send(s, req(3, [100_000 + i]), daemon)
            shots.append(s)
        assert delivered > MAX_CLIENTS
        wait_for(lambda: src.stats().clients_seen == delivered, 30, "every delivered registration")
        proc = peer.spawn()
        wait_for(lambda: proc.pid in ready_pids(src), 30, "the real client to register")
        windows = src.capture(0.3, 10)
        mine = [w for w in windows if w.labels["process"] == str(proc.pid)]
        assert len(mine) == 1
        assert_kineto_trace(mine[0], proc.pid, 300)
        for w in windows:
            w.done()
        assert src.stats().clients_seen == delivered + 1
        assert src.stats().clients == MAX_CLIENTS
    finally:
        for s in shots:
            s.close()
        src.close()


# -- poll gaps and window timing ----------------------------------------------------------------


@pytest.mark.slow
def test_one_clients_poll_gap_sets_only_its_own_wait(peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hint 1 s; "pause" polled twice 4 s apart (one gap: not an interval yet); "slow" polls every
    2 s (three gaps); "fast" polls five times 0.25 s apart (its interval is Kineto's shortest, 1 s).
    None polls during the window, so each is waited for as long as its own interval says: 1.5 x 1 s
    + 1 s for pause and fast, 1.5 x 2 s + 1 s for slow (not 1.5 x 4 s + 1 s for all).

    Each datagram arrives at its planned time on a clock of the test's (an hour ahead of the
    monotonic clock, so no reply is ever late), not at whatever time a loaded machine sends it."""
    arrival = [0.0]
    receive = DaemonSocket.receive

    def receive_at_planned_time(sock: DaemonSocket) -> tuple[bytes, int, Address | None, float] | None:
        got = receive(sock)
        return None if got is None else (got[0], got[1], got[2], arrival[0])

    monkeypatch.setattr(DaemonSocket, "receive", receive_at_planned_time)
    src = peer.source()
    src.start()
    daemon = str(peer.socket_dir / "dynolog")
    clients = {name: fake_client(str(peer.socket_dir / name)) for name in ("pause", "slow", "fast")}
    pids = {"pause": 101, "slow": 102, "fast": 103}

    def poll(name: str) -> None:
        clients[name].sendto(req(3, [pids[name]]), daemon)
        clients[name].recv(4096)  # answered: handled before the next one is sent

    try:
        plan = [
            (0.0, "slow"),
            (2.0, "slow"),
            (2.0, "pause"),
            (4.0, "slow"),
            (6.0, "slow"),
            (6.0, "pause"),
            (6.0, "fast"),
            (6.25, "fast"),
            (6.5, "fast"),
            (6.75, "fast"),
            (7.0, "fast"),
        ]
        start = time.monotonic() + 3600.0
        for at, name in plan:
            arrival[0] = start + at
            poll(name)
        intervals = {c.pid: c.poll_interval_s for c in src.clients()}
        assert intervals[101] == pytest.approx(4.0)
        assert intervals[102] == pytest.approx(2.0)
        assert intervals[103] == 1.0
        results: list[list[CapturedWindow]] = []
        capture = threading.Thread(target=lambda: results.append(src.capture(0.1, 0.5)))
        capture.start()
        capture.join(timeout=30)
        waits = {w.labels["process"]: w.error or "" for w in results[0]}
        assert len(waits) == 3
        assert "no trace config delivered within 2.5 s" in waits["101"]
        assert "no trace config delivered within 4.0 s" in waits["102"]
        assert "no trace config delivered within 2.5 s" in waits["103"]
        # The service's bound on a round follows the trusted intervals too: slow's, not pause's
        # (twice its wait: the longest, when the agent loses configs).
        assert src.capture_overhead_s == pytest.approx(2 * (1.5 * (intervals[102] or 0) + 1) + src.start_lead_s + 2.0)
    finally:
        for s in clients.values():
            s.close()
        src.close()
