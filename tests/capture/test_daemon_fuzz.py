"""Issue 20: generated datagrams against a live kineto-daemon source.

Arbitrary bytes, and datagrams built from the wire format with any header size and type, any
request type, pid count (negative too) and pids, huge pid lists, truncated and oversized
payloads, sent from filesystem senders, abstract senders and an unbound one. After each batch
a well-formed client must be answered within bounded time, the serving thread must be alive
and must not have raised, and exactly the datagrams that the wire format (docs, written out
again below) rejects must have been counted as malformed.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.daemonpeer import Peer, fake_client, open_peer, req, warpwatch_threads
from warpwatch.capture.daemon import HEADER, KinetoDaemonSource


@pytest.fixture
def peer() -> Iterator[Peer]:
    with open_peer() as p:
        yield p


FS_SENDERS = 4
ABSTRACT_SENDERS = 2
UNBOUND = FS_SENDERS + ABSTRACT_SENDERS
INT32 = st.integers(-(2**31), 2**31 - 1)


def expected_malformed(data: bytes, sender: int) -> bool:
    """The wire format's rules, independently of the source's parser: a 40-byte header whose
    uint64 size is the payload's, a NUL-terminated alphanumeric type "req" or "ctxt" with only
    NULs after it; "req": int32 type, int32 n in 1..1024, int64 job, exactly n positive int32
    pids; "ctxt": int32 gpu, a positive int32 pid, int64 job. An unbound sender (no address to
    answer) and a datagram longer than the 64 KiB receive buffer are malformed too."""
    if sender == UNBOUND or len(data) < 40 or len(data) > 65536:
        return True
    size = int.from_bytes(data[:8], "little")
    raw = data[8:40]
    if size != len(data) - 40 or b"\0" not in raw:
        return True
    name, rest = raw.split(b"\0", 1)
    if rest.strip(b"\0") or name not in (b"req", b"ctxt"):
        return True
    payload = data[40:]
    if name == b"ctxt":
        return len(payload) != 16 or int.from_bytes(payload[4:8], "little", signed=True) <= 0
    if len(payload) < 16:
        return True
    n = int.from_bytes(payload[4:8], "little", signed=True)
    if not 1 <= n <= 1024 or len(payload) != 16 + 4 * n:
        return True
    pids = [int.from_bytes(payload[i : i + 4], "little", signed=True) for i in range(16, len(payload), 4)]
    return any(p <= 0 for p in pids)


@st.composite
def request_payload(draw: st.DrawFn) -> bytes:
    pids = draw(
        st.one_of(
            st.lists(st.one_of(st.integers(1, 4_000_000), INT32), max_size=8),
            st.integers(1000, 17_000).map(lambda k: [7] * k),  # huge pid lists, some beyond 64 KiB
        )
    )
    n = draw(st.one_of(st.just(len(pids)), INT32))
    return struct.pack("<iiq", draw(INT32), n, draw(st.integers(-(2**63), 2**63 - 1))) + struct.pack(
        f"<{len(pids)}i", *pids
    )


@st.composite
def datagram(draw: st.DrawFn) -> bytes:
    shape = draw(st.sampled_from(["bytes", "built", "well-formed"]))
    if shape == "bytes":
        return draw(st.binary(max_size=120))
    if shape == "well-formed":
        if draw(st.booleans()):
            return req(draw(INT32), draw(st.lists(st.integers(1, 2**31 - 1), min_size=1, max_size=8)))
        return HEADER.pack(16, b"ctxt") + struct.pack("<iiq", draw(INT32), draw(st.integers(1, 2**31 - 1)), 0)
    kind = draw(st.one_of(st.sampled_from([b"req", b"ctxt"]), st.binary(max_size=32)))
    if kind == b"ctxt" and draw(st.booleans()):
        payload = struct.pack("<iiq", draw(INT32), draw(INT32), 0)
    elif kind == b"req" or draw(st.booleans()):
        payload = draw(request_payload())
    else:
        payload = draw(st.binary(max_size=64))
    size = draw(st.one_of(st.just(len(payload)), st.integers(0, 2**64 - 1)))
    data = struct.pack("<Q", size) + kind.ljust(32, b"\0")[:32] + payload
    cut = draw(st.one_of(st.just(0), st.integers(1, 48)))  # truncated
    extra = draw(st.one_of(st.just(b""), st.binary(min_size=1, max_size=8)))  # oversized
    return (data[:-cut] if cut else data) + extra


def poll_answer(src: KinetoDaemonSource, client: socket.socket, daemon: str) -> bytes:
    """The answer to a poll of `client`. A reply the daemon does not send because the request
    waited past `REPLY_DEADLINE_S` (the daemon thread was starved: a loaded test machine) is,
    for a real client, a missed poll: it polls again, and so does this, while that is the cause."""
    for _ in range(5):
        stale = src.stats().replies_dropped["stale"]
        client.sendto(req(3, [os.getpid()]), daemon)
        try:
            return client.recv(4096)
        except TimeoutError:
            if src.stats().replies_dropped["stale"] == stale:
                raise
    raise AssertionError("five polls in a row were answered too late")


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.slow
def test_generated_datagrams_are_counted_and_never_stop_the_daemon(peer: Peer) -> None:
    src = peer.source()
    src.start()
    daemon = str(peer.socket_dir / "dynolog")
    tag = f"wwfuzz-{os.getpid()}"
    senders = [fake_client(str(peer.socket_dir / f"f{i}")) for i in range(FS_SENDERS)]
    senders += [fake_client(f"\0{tag}-{i}".encode()) for i in range(ABSTRACT_SENDERS)]
    unbound = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    unbound.settimeout(2)
    senders.append(unbound)
    good = fake_client(str(peer.socket_dir / "good"))
    errors = _Errors()
    logging.getLogger("warpwatch.capture.daemon").addHandler(errors)

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(st.tuples(st.integers(0, UNBOUND), datagram()), min_size=1, max_size=10))
    def batch(items: list[tuple[int, bytes]]) -> None:
        before = src.malformed_datagrams
        expected = 0
        for sender, data in items:
            try:
                senders[sender].sendto(data, daemon)
            except OSError:  # longer than a Unix datagram may be at all: nothing was sent
                continue
            expected += expected_malformed(data, sender)
        assert poll_answer(src, good, daemon) == HEADER.pack(0, b"req")  # after every datagram above: one queue
        assert src.malformed_datagrams - before == expected
        assert [t.name for t in warpwatch_threads()] == [f"warpwatch-{src.name}"]
        assert errors.records == []
        for s in senders[:UNBOUND]:  # read the replies, as clients do: queues never fill here
            s.setblocking(False)
            while True:
                try:
                    s.recv(65536)
                except BlockingIOError:
                    break
            s.settimeout(2)

    try:
        batch()
        # A well-formed poll from an abstract address gets no answer from a filesystem socket:
        # a real libkineto there would abort on it (daemon.wire.reply_is_safe).
        unsafe = src.stats().replies_dropped["unsafe_address"]
        senders[FS_SENDERS].sendto(req(3, [os.getpid()]), daemon)
        senders[FS_SENDERS].settimeout(0.5)
        with pytest.raises(TimeoutError):
            senders[FS_SENDERS].recv(4096)
        assert src.stats().replies_dropped["unsafe_address"] == unsafe + 1
    finally:
        logging.getLogger("warpwatch.capture.daemon").removeHandler(errors)
        for s in [*senders, good]:
            s.close()
        src.close()
