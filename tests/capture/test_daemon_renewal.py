"""Renewing the kineto-daemon source's socket (`daemon.sockets`): a socket whose send buffer is full
of unread replies is replaced by a fresh one at the same name, and no datagram the kernel accepted
for the old one is lost in the change: each is answered through the new socket."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from support.daemonpeer import Peer, fake_client, open_peer, req
from support.patience import wait_for
from warpwatch.capture.daemon.clients import ClientRegistry
from warpwatch.capture.daemon.serve import Responder
from warpwatch.capture.daemon.sockets import DaemonSocket
from warpwatch.capture.daemon.wire import DEFAULT_ACTIVITY_TYPES, HEADER

if TYPE_CHECKING:
    from warpwatch.capture.daemon.sockets import Received


pytestmark = pytest.mark.usefixtures("lockstep_replies")  # fake clients in lockstep (conftest)


@pytest.fixture
def peer() -> Iterator[Peer]:
    with open_peer() as p:
        yield p


def daemon_socket(peer: Peer, abstract: bool) -> DaemonSocket:
    sock = DaemonSocket(str(peer.socket_dir), "kineto-daemon")
    if abstract:  # a name of this test's own: the machine's @dynolog may be someone else's
        sock.own = f"\0warpwatch-test-{uuid.uuid4().hex}".encode()
    sock.bind()
    return sock


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_a_renewal_hands_back_the_datagrams_queued_on_the_old_socket(peer: Peer, abstract: bool) -> None:
    sock = daemon_socket(peer, abstract)
    senders = [fake_client(str(peer.socket_dir / f"c{i}")) for i in range(3)]
    try:
        for i, s in enumerate(senders):
            s.sendto(req(3, [1000 + i]), sock.own)
        queued = sock.renew()
        assert [(data, sender) for data, _, sender, _ in queued] == [
            (req(3, [1000 + i]), str(peer.socket_dir / f"c{i}")) for i in range(3)
        ]
        senders[0].sendto(b"next", sock.own)  # the name is bound again, on the new socket
        got = sock.receive()
        assert got is not None and got[0] == b"next"
        assert sock.receive() is None
    finally:
        for s in senders:
            s.close()
        sock.close()


class SentDuringRenewal(DaemonSocket):
    """A daemon socket that a client sends to at the last moment before each renewal: after the
    serving thread has read everything queued, while the old socket is still bound."""

    def __init__(self, peer: Peer, late: socket.socket) -> None:
        super().__init__(str(peer.socket_dir), "kineto-daemon")
        self.late = late

    def renew(self) -> list[Received]:
        self.late.sendto(req(3, [2002]), self.own)
        return super().renew()


def test_a_datagram_that_arrives_while_the_socket_is_renewed_is_answered(peer: Peer) -> None:
    early = fake_client(str(peer.socket_dir / "early"))
    late = fake_client(str(peer.socket_dir / "late"))
    sock = SentDuringRenewal(peer, late)
    sock.bind()
    clients = ClientRegistry(1.0)
    responder = Responder(
        "kineto-daemon", peer.trace_dir, DEFAULT_ACTIVITY_TYPES, 3.0, 60.0, sock, clients, threading.Condition()
    )
    responder.clogged = True  # renew after the next datagram, as after a send that found the buffer full
    wake_r, wake_w = socket.socketpair()
    stop = threading.Event()
    thread = threading.Thread(target=responder.serve, args=(wake_r, stop), daemon=True)
    thread.start()
    try:
        early.sendto(req(3, [2001]), sock.own)
        assert early.recv(4096) == HEADER.pack(0, b"req")
        wait_for(lambda: responder.counters.socket_renewals == 1, 10, "the renewal")
        wait_for(lambda: clients.seen == 2, 10, "the late sender to be registered")
        assert late.recv(4096) == HEADER.pack(0, b"req")  # answered through the new socket
        assert sorted(c.pids[0] for c in clients.values()) == [2001, 2002]
        assert responder.broken is None and os.path.exists(sock.own)
    finally:
        stop.set()
        wake_w.send(b"x")
        thread.join(10)
        for s in (early, late, wake_r, wake_w):
            s.close()
        sock.close()
