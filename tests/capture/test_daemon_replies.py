"""Issue 20: a reply from the kineto-daemon source must never harm the client it goes to.

Against real PyTorch clients (KINETO_USE_DAEMON=1, torch 2.13 CPU): a socket dir spelled with a
trailing "/" (libkineto aborted on the reply's sender address), and a stalled agent (late
replies left the client one poll behind for good). With fake clients that never read: their
unread replies used up the socket's send buffer and then nobody got a reply.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator

import pytest

from support.daemonpeer import (
    Peer,
    assert_kineto_trace,
    fake_client,
    kineto_send,
    needs_torch,
    open_peer,
    ready_pids,
    req,
    warpwatch_threads,
)
from support.patience import wait_for
from warpwatch.capture import CapturedWindow
from warpwatch.capture.daemon import HEADER, KinetoDaemonSource
from warpwatch.capture.daemon.sockets import DaemonSocket
from warpwatch.capture.daemon.window import Window
from warpwatch.capture.daemon.wire import daemon_path, reply_is_safe


@pytest.fixture
def peer() -> Iterator[Peer]:
    with open_peer() as p:
        yield p


def polls_of(src: KinetoDaemonSource, pid: int) -> int:
    return next((c.polls for c in src.clients() if c.pid == pid), 0)


# -- addresses, as libkineto's EndPoint spells and checks them --------------------------------


def test_the_daemon_path_is_the_dir_a_slash_and_dynolog_unnormalised() -> None:
    assert daemon_path("/x") == "/x/dynolog"
    assert daemon_path("/x/") == "/x//dynolog"
    assert daemon_path("/x//") == "/x///dynolog"


@pytest.mark.parametrize(
    ("own", "peer_address", "safe"),
    [
        ("/x/dynolog", "/x/dynoconfigclientabc", True),
        ("/x//dynolog", "/x//dynoconfigclientabc", True),  # client dir "/x/", agent dir "/x/"
        ("/x//dynolog", "/x/dynoconfigclientabc", True),  # client dir "/x": "/x" then "/"
        ("/x/dynolog", "/x//dynoconfigclientabc", False),  # client dir "/x/": "/x/" then "d"
        ("/xy/dynolog", "/x/dynoconfigclientabc", False),  # "/x" then "y"
        (b"\0dynolog\0", b"\0dynoconfigclientabc\0", True),
        ("/x/dynolog", b"\0dynoconfigclientabc\0", False),  # an abstract client aborts on a path
        (b"\0dynolog\0", "/x/dynoconfigclientabc", False),
    ],
)
def test_a_reply_is_safe_only_from_an_address_libkineto_accepts(
    own: str | bytes, peer_address: str | bytes, safe: bool
) -> None:
    assert reply_is_safe(own, peer_address) is safe


# -- real clients -----------------------------------------------------------------------------


@pytest.mark.slow
@needs_torch
def test_a_socket_dir_with_a_trailing_slash_is_bound_as_kineto_spells_it(peer: Peer) -> None:
    """Issue 20: the client died of SIGABRT (exit 134) at the agent's first reply: "Unexpected
    socket name: <dir>/dynolog. Expected to start with <dir>/"."""
    socket_dir = f"{peer.socket_dir}/"
    src = peer.source(socket_dir=socket_dir)
    assert src.address == f"{peer.socket_dir}//dynolog"
    src.start()
    try:
        proc = peer.spawn(socket_dir=socket_dir)
        wait_for(lambda: polls_of(src, proc.pid) >= 3 or proc.poll() is not None, 30, "three polls")
        assert proc.poll() is None, f"client exited {proc.returncode}: {peer.log(proc)[-500:]}"
        assert proc.pid in ready_pids(src)
        [window] = src.capture(0.3, 10)
        assert_kineto_trace(window, proc.pid, 300)
        window.done()
        assert proc.poll() is None
    finally:
        src.close()


@pytest.mark.slow
@needs_torch
def test_a_client_spelling_the_dir_otherwise_is_left_unanswered_not_killed(peer: Peer) -> None:
    """The agent binds <dir>/dynolog; a client given "<dir>/" reaches the same socket as
    <dir>//dynolog and would abort on any reply from <dir>/dynolog: it gets none."""
    src = peer.source()
    src.start()
    try:
        proc = peer.spawn(socket_dir=f"{peer.socket_dir}/")
        wait_for(
            lambda: src.stats().replies_dropped["unsafe_address"] >= 3 or proc.poll() is not None, 30, "three polls"
        )
        assert proc.poll() is None, f"client exited {proc.returncode}: {peer.log(proc)[-500:]}"
        assert src.clients() == []
    finally:
        src.close()


@pytest.mark.slow
@needs_torch
def test_a_stalled_agent_does_not_leave_the_client_a_poll_behind(peer: Peer) -> None:
    """Issue 20: one late reply was read by the client as the answer to its next poll, and so on
    for good: every later config came a poll late and every window timed out. The agent holds
    the GIL for 3 s here (as a C extension or a long GC pause would), so the client's polls
    queue unread; their replies would all be late."""
    src = peer.source(start_lead_s=2.0)  # a config read even one 1 s poll late is then refused
    src.start()
    try:
        proc = peer.spawn(60)
        wait_for(lambda: proc.pid in ready_pids(src) and polls_of(src, proc.pid) >= 3, 30, "three polls")
        ctypes.PyDLL(None).sleep(3)  # libc sleep(3), called without releasing the GIL
        polls = polls_of(src, proc.pid)
        wait_for(lambda: polls_of(src, proc.pid) >= polls + 2, 10, "two polls after the stall")
        for _ in range(2):
            [window] = src.capture(0.3, 5)
            assert_kineto_trace(window, proc.pid, 300)
            window.done()
        assert src.stats().replies_dropped["stale"] >= 2
    finally:
        src.close()


# -- senders that never read ----------------------------------------------------------------


@pytest.mark.usefixtures("lockstep_replies")
def test_senders_that_never_read_cannot_stop_the_replies_to_others(peer: Peer) -> None:
    """Issue 20: their unread replies used up the socket's send buffer, after which no one got
    a reply. 40 senders x 20 polls of about 1.3 KB each are five times the default 208 KiB."""
    src = peer.source()
    src.start()
    daemon = str(peer.socket_dir / "dynolog")
    silent = [fake_client(str(peer.socket_dir / f"mute{i}")) for i in range(40)]
    good = fake_client(str(peer.socket_dir / "good"))
    try:
        for s in silent:
            for _ in range(20):
                kineto_send(s, req(3, [os.getpid()]), daemon)
        for _ in range(3):
            assert kineto_send(good, req(3, [os.getpid()]), daemon)
            assert good.recv(4096) == HEADER.pack(0, b"req")
        stats = src.stats()
        assert stats.replies_dropped["send_failed"] > 0
        assert stats.evicted["undeliverable"] > 0
        assert src.socket_renewals >= 1
        assert src.address == daemon and (peer.socket_dir / "dynolog").exists()
    finally:
        for s in [*silent, good]:
            s.close()
        src.close()
    assert not (peer.socket_dir / "dynolog").exists()


def queue_capacity(peer: Peer) -> int:
    """How many datagrams a socket that never reads takes before sends to it fail (the kernel's
    net.unix.max_dgram_qlen, give or take one), measured on a pair of our own."""
    sink, source = fake_client(str(peer.socket_dir / "sink")), fake_client(str(peer.socket_dir / "src"))
    source.setblocking(False)
    try:
        for count in range(10_000):
            try:
                source.sendto(b"x", str(peer.socket_dir / "sink"))
            except BlockingIOError:  # EAGAIN: the sink's queue is full
                return count
        raise AssertionError("the queue never filled")
    finally:
        sink.close()
        source.close()


@pytest.mark.usefixtures("lockstep_replies")
def test_a_client_that_cannot_be_delivered_to_three_times_in_a_row_is_dropped(peer: Peer) -> None:
    capacity = queue_capacity(peer)
    src = peer.source()
    src.start()
    daemon = str(peer.socket_dir / "dynolog")
    mute = fake_client(str(peer.socket_dir / "mute"))
    good = fake_client(str(peer.socket_dir / "good"))
    try:
        for _ in range(capacity + 3):  # its queue takes `capacity` replies, the next 3 fail
            mute.sendto(req(3, [4242]), daemon)
        good.sendto(req(3, [os.getpid()]), daemon)
        assert good.recv(4096) == HEADER.pack(0, b"req")  # handled after all of mute's
        stats = src.stats()
        assert stats.replies_dropped["send_failed"] == 3
        assert stats.evicted == {"registry_full": 0, "undeliverable": 1}
        assert [c.pid for c in src.clients()] == [os.getpid()]
    finally:
        mute.close()
        good.close()
        src.close()


# -- a serving thread that stops, a flood during a window ------------------------------------


@pytest.mark.usefixtures("lockstep_replies")
def test_a_serving_thread_that_stops_fails_the_next_window_with_the_reason(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception out of the serving thread ended it with a traceback and left the source
    looking alive: every later window waited for clients nobody answered, without a word. Now
    the window fails with the reason and the source binds its socket afresh for the next."""
    src = peer.source()
    src.start()
    client = fake_client(str(peer.socket_dir / "c"))
    try:

        def broken_receive(sock: DaemonSocket) -> None:
            raise RuntimeError("receive exploded")

        monkeypatch.setattr(DaemonSocket, "receive", broken_receive)
        client.sendto(req(3, [os.getpid()]), str(peer.socket_dir / "dynolog"))
        serving = f"warpwatch-{src.name}"  # the serving thread, by its name
        wait_for(lambda: serving not in [t.name for t in warpwatch_threads()], 10, "the serving thread to end")
        [window] = src.capture(0.1, 0.5)
        assert window.outcome == "failed"
        assert window.error is not None and "RuntimeError: receive exploded" in window.error
        monkeypatch.undo()  # the fault is gone: the source answers again, on a socket bound afresh
        client.sendto(req(3, [os.getpid()]), str(peer.socket_dir / "dynolog"))
        assert client.recv(4096) == HEADER.pack(0, b"req")
        assert [c.pid for c in src.clients()] == [os.getpid()]
    finally:
        client.close()
        src.close()


@pytest.mark.usefixtures("lockstep_replies")
@pytest.mark.slow
def test_a_flood_of_new_senders_during_a_window_gets_no_more_configs_than_the_registry_holds(
    peer: Peer, opened_windows: list[Window]
) -> None:
    """Every sender with the trace bit that polled while a window accepted was served a config,
    however many: each one then cost a file looked for on every pass of the window and a stem
    kept for ten minutes. Here 12 fresh senders come while the window for no known client
    accepts, with room for 4."""
    src = peer.source(max_clients=4, start_lead_s=0.5)
    src.start()
    daemon = str(peer.socket_dir / "dynolog")
    senders = [fake_client(str(peer.socket_dir / f"new{i}")) for i in range(12)]
    results: list[list[CapturedWindow]] = []
    capture = threading.Thread(target=lambda: results.append(src.capture(0.1, 0.5)))
    try:
        capture.start()
        wait_for(lambda: opened_windows != [], 5, "the window to open")
        configs = 0
        for i, s in enumerate(senders):
            s.sendto(req(3, [20_000 + i]), daemon)
            configs += len(s.recv(4096)) > HEADER.size
        capture.join(timeout=30)
        assert configs == 4
        assert [w.outcome for w in results[0]] == ["timed_out"] * 4
    finally:
        for s in senders:
            s.close()
        src.close()
