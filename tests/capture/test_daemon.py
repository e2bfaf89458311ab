"""The Kineto daemon source against real PyTorch processes started with KINETO_USE_DAEMON=1.

Each test gets its own socket folder (KINETO_IPC_SOCKET_DIR), so tests never meet each other
or a real dynolog; one test uses Kineto's default abstract name when it is free. The clients
poll every second (ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1 in a KINETO_CONFIG file).
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.daemonpeer import (
    Peer,
    assert_kineto_trace,
    needs_torch,
    open_peer,
    ready_pids,
    req,
    warpwatch_threads,
)
from support.patience import hang_guard, wait_for
from warpwatch.capture import CapturedWindow, Source
from warpwatch.capture.daemon import (
    ABSTRACT_ADDRESS,
    HEADER,
    KinetoDaemonSource,
    MalformedDatagram,
    build_config,
    encode_message,
    parse_datagram,
    parse_request,
)
from warpwatch.errors import CaptureError, ConfigError

pytestmark = pytest.mark.slow


@pytest.fixture
def peer() -> Iterator[Peer]:
    with open_peer() as p:
        yield p


# -- pure parts ------------------------------------------------------------------------------


def test_a_request_parses_into_type_job_and_pids() -> None:
    kind, payload = parse_datagram(req(3, [4242, 1], jobid=7))
    assert kind == "req"
    parsed = parse_request(payload)
    assert (parsed.type, parsed.job_id, parsed.pids, parsed.can_trace) == (3, 7, (4242, 1), True)
    assert not parse_request(parse_datagram(req(1, [5]))[1]).can_trace


@pytest.mark.parametrize(
    "datagram",
    [
        b"",
        b"\x00" * 39,
        req(3, [1])[:-1],  # payload shorter than the header says
        req(3, [1]) + b"\x00",  # longer
        HEADER.pack(0, b"r\xffq"),  # type not ascii
        HEADER.pack(0, b"req\x00junk"),  # garbage after the NUL
        HEADER.pack(0, b"\x00" * 32),  # empty type
    ],
)
def test_malformed_headers_are_refused(datagram: bytes) -> None:
    with pytest.raises(MalformedDatagram):
        parse_datagram(datagram)


@pytest.mark.parametrize(
    "datagram",
    [
        req(3, [1, 2], n=3),  # n says 3 pids, 2 present
        req(3, [1, 2], n=1),
        req(3, [], n=0),
        req(3, [1], n=-1),
        req(3, [0]),
        req(3, [-5]),
        encode_message("req", b"\x03\x00\x00\x00"),
    ],
)
def test_malformed_requests_are_refused(datagram: bytes) -> None:
    with pytest.raises(MalformedDatagram):
        parse_request(parse_datagram(datagram)[1])


def test_config_text_has_exactly_the_five_settings() -> None:
    text = build_config(Path("/tmp/x/warpwatch_1-1-0.json"), 1_800_000_000_000, 500, ("kernel", "gpu_memcpy"))
    assert text.splitlines() == [
        "ACTIVITIES_LOG_FILE=/tmp/x/warpwatch_1-1-0.json",
        "PROFILE_START_TIME=1800000000000",
        "ACTIVITIES_DURATION_MSECS=500",
        "ACTIVITIES_WARMUP_PERIOD_SECS=0",
        "ACTIVITY_TYPES=kernel,gpu_memcpy",
    ]


@pytest.mark.parametrize(
    ("trace_dir", "message"),
    [
        ("relative/dir", "must be an absolute path"),
        ("/tmp/a\nPROFILE_START_TIME=0", "may contain only"),
        ("/tmp/a=b", "may contain only"),
        ("/tmp/a b", "may contain only"),
        ("/tmp/a#b", "may contain only"),
    ],
)
def test_unsafe_trace_dirs_are_refused(trace_dir: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        KinetoDaemonSource(Path(trace_dir), socket_dir="/tmp/unused")


def test_unknown_activity_types_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"'cuda_graph\\nX=1' not allowed"):
        KinetoDaemonSource(Path("/tmp/t"), activity_types=["kernel", "cuda_graph\nX=1"])


def test_the_source_satisfies_the_protocol() -> None:
    assert isinstance(KinetoDaemonSource(Path("/tmp/t"), socket_dir="/tmp/unused"), Source)


# -- against real Kineto clients --------------------------------------------------------------


@needs_torch
def test_two_processes_each_get_a_config_and_deliver_their_trace(peer: Peer) -> None:
    src = peer.source()
    src.start()
    try:
        a, b = peer.spawn(), peer.spawn()
        wait_for(lambda: ready_pids(src) >= {a.pid, b.pid}, 30, "both clients to register")
        # Long-running servers are the use case: let both settle (see assert_kineto_trace).
        wait_for(lambda: min(c.polls for c in src.clients()) >= 4, 30, "a few polls of both")
        # Kineto polls once a second, never sooner; a loaded machine makes polls late, not early
        # (beside stress-ng and a full run, 1.65 s once; the estimate itself, from given receive
        # times: test_daemon_abuse.py). In seconds (not 1,000), each polling on its own.
        intervals = [c.poll_interval_s for c in src.clients()]
        assert all(i is not None and 1.0 <= i < 5.0 for i in intervals), intervals
        clients = {c.pid: c for c in src.clients()}
        assert clients[a.pid].pids[0] == a.pid
        assert clients[a.pid].address.startswith(str(peer.socket_dir) + "/dynoconfigclient")

        # torch 2.13 leaves the Trace span out of a process's first on-demand trace now and then
        # (when it starts within seconds of `import torch`, which a loaded machine stretches; see
        # assert_kineto_trace): the first window is checked without it, the second with it.
        for span in (False, True):
            windows = src.capture(0.5, 10)
            assert sorted(int(w.labels["process"]) for w in windows) == sorted([a.pid, b.pid])
            for w in windows:
                assert_kineto_trace(w, int(w.labels["process"]), 500, span=span)
            for w in windows:
                w.done()
        assert src.configs_sent == 4
        assert os.listdir(peer.trace_dir) == []
    finally:
        src.close()
    assert not (peer.socket_dir / "dynolog").exists()
    assert warpwatch_threads() == []


@needs_torch
def test_the_abstract_socket_name_serves_clients_by_default(peer: Peer) -> None:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.bind(ABSTRACT_ADDRESS)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            pytest.skip("the abstract dynolog name is taken on this machine (a dynolog runs)")
        raise
    finally:
        probe.close()
    src = peer.source(socket_dir="")
    assert src.address == "@dynolog"
    src.start()
    try:
        proc = peer.spawn(abstract=True)
        wait_for(lambda: proc.pid in ready_pids(src), 30, "the client to register")
        assert next(c for c in src.clients() if c.pid == proc.pid).address.startswith("@dynoconfigclient")
        windows = src.capture(0.3, 10)
        mine = [w for w in windows if w.labels["process"] == str(proc.pid)]
        assert len(mine) == 1
        assert_kineto_trace(mine[0], proc.pid, 300)
        for w in windows:
            w.done()
    finally:
        src.close()


@needs_torch
def test_clients_come_back_after_the_source_restarts(peer: Peer) -> None:
    src = peer.source()
    src.start()
    proc = peer.spawn()
    try:
        wait_for(lambda: proc.pid in ready_pids(src), 30, "the client to register")
        src.close()
        assert not (peer.socket_dir / "dynolog").exists()
        assert src.clients() == []
        time.sleep(1.5)  # the client polls into the void at least once

        src.start()
        wait_for(lambda: proc.pid in ready_pids(src), 10, "the client to re-register")
        windows = src.capture(0.3, 10)
        assert len(windows) == 1
        assert_kineto_trace(windows[0], proc.pid, 300)
        windows[0].done()
    finally:
        src.close()


@needs_torch
def test_a_client_killed_mid_window_times_out_and_leaves_nothing(peer: Peer) -> None:
    src = peer.source()
    src.start()
    proc = peer.spawn()
    try:
        wait_for(lambda: proc.pid in ready_pids(src), 30, "the client to register")
        results: list[list[CapturedWindow]] = []
        capture = threading.Thread(target=lambda: results.append(src.capture(2.0, 1.0)))
        capture.start()
        # Kineto opens <file>.tmp when the window starts; kill it while recording.
        wait_for(lambda: any(peer.trace_dir.glob("*.tmp")), 15, "the trace to start")
        proc.send_signal(signal.SIGKILL)
        capture.join(timeout=30)
        assert not capture.is_alive()
        [window] = results[0]
        assert window.path is None
        assert window.outcome == "timed_out"
        assert window.labels == {"process": str(proc.pid)}
        assert window.error is not None and f"pid {proc.pid}: no trace file" in window.error
        assert os.listdir(peer.trace_dir) == []
        # silent since its config (two poll intervals and a second): counted as an exit in a window
        wait_for(lambda: src.stats().exits_in_window == 1, 15, "the exit to be counted")
    finally:
        src.close()
    assert warpwatch_threads() == []


def test_a_taken_socket_name_is_refused_with_advice(peer: Peer) -> None:
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    squatter.bind(str(peer.socket_dir / "dynolog"))
    try:
        with pytest.raises(CaptureError) as info:
            peer.source().start()
        message = str(info.value)
        assert f"the Kineto daemon socket {peer.socket_dir}/dynolog is already taken" in message
        assert "Stop dynolog" in message and "KINETO_IPC_SOCKET_DIR" in message
    finally:
        squatter.close()
    assert (peer.socket_dir / "dynolog").exists()  # never unlinks a live socket
    assert warpwatch_threads() == []


def test_a_stale_socket_file_is_replaced(peer: Peer) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(peer.socket_dir / "dynolog"))
    stale.close()  # the file stays, nobody listens
    src = peer.source()
    src.start()
    src.close()


def test_a_file_in_the_sockets_place_is_refused(peer: Peer) -> None:
    (peer.socket_dir / "dynolog").write_text("not a socket")
    with pytest.raises(CaptureError, match=r"dynolog exists and is not a socket"):
        peer.source().start()
    assert (peer.socket_dir / "dynolog").read_text() == "not a socket"


def test_a_taken_abstract_name_is_refused(tmp_path: Path) -> None:
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        squatter.bind(ABSTRACT_ADDRESS)
    except OSError:
        squatter.close()  # someone else holds it: the source must refuse all the same
        squatter = None  # type: ignore[assignment]
    try:
        with pytest.raises(CaptureError, match="@dynolog is already taken"):
            KinetoDaemonSource(tmp_path, socket_dir="").start()
    finally:
        if squatter is not None:
            squatter.close()


@pytest.mark.usefixtures("lockstep_replies")
def test_malformed_datagrams_are_counted_and_ignored(peer: Peer) -> None:
    src = peer.source()
    src.start()
    client = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    client.bind(str(peer.socket_dir / "fakeclient"))
    client.settimeout(0.3)
    daemon = str(peer.socket_dir / "dynolog")
    try:
        junk = [
            b"hello",
            req(3, [1, 2], n=9),
            encode_message("ctxt", b"\x00" * 3),
            encode_message("nope", b""),
            HEADER.pack(2**63, b"req") + b"xx",
        ]
        for datagram in junk:
            client.sendto(datagram, daemon)
        unbound = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        unbound.sendto(req(3, [77]), daemon)  # nobody to answer
        unbound.close()
        wait_for(lambda: src.malformed_datagrams == len(junk) + 1, 5, "the junk to be counted")
        with pytest.raises(TimeoutError):
            client.recv(4096)  # no reply to junk (all of it counted above: none is on its way)
        assert src.clients() == []
        client.settimeout(hang_guard(0.3))  # replies from here on: however long a loaded agent takes

        # Still serving: a well-formed poll is answered "nothing to do"...
        client.sendto(req(3, [os.getpid()]), daemon)
        assert client.recv(4096) == HEADER.pack(0, b"req")
        # ...a "ctxt" registration gets its int32...
        client.sendto(encode_message("ctxt", struct.pack("<iiq", 0, os.getpid(), 0)), daemon)
        assert client.recv(4096) == encode_message("ctxt", struct.pack("<i", 1))
        # ...and during a window the next poll carries the config.
        results: list[list[CapturedWindow]] = []
        capture = threading.Thread(target=lambda: results.append(src.capture(0.2, 0.5)))
        capture.start()
        reply = HEADER.pack(0, b"req")
        while reply == HEADER.pack(0, b"req") and capture.is_alive():  # polls, as Kineto does, until
            time.sleep(0.05)  # the window has opened and its config comes
            client.sendto(req(3, [os.getpid()]), daemon)
            reply = client.recv(4096)
        size, kind = HEADER.unpack_from(reply)
        config = reply[HEADER.size :].decode()
        assert kind.rstrip(b"\0") == b"req" and size == len(config)
        assert f"ACTIVITIES_LOG_FILE={peer.trace_dir}/warpwatch_" in config
        assert "ACTIVITIES_DURATION_MSECS=200\n" in config
        capture.join(timeout=hang_guard(15))
        [window] = results[0]
        assert window.outcome == "timed_out"  # this fake client writes no trace
    finally:
        client.close()
        src.close()


@pytest.mark.usefixtures("lockstep_replies")
def test_silent_clients_are_forgotten(peer: Peer) -> None:
    src = peer.source(client_ttl_s=0.5)
    src.start()
    client = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    client.bind(str(peer.socket_dir / "fakeclient"))
    client.settimeout(hang_guard(1))
    try:
        client.sendto(req(3, [os.getpid()]), str(peer.socket_dir / "dynolog"))
        client.recv(4096)
        # Registered (its registry entry may already be gone if the agent answered it late).
        assert src.stats().clients_seen == 1
        wait_for(lambda: src.clients() == [], 5, "the client to be forgotten")
    finally:
        client.close()
        src.close()


def test_no_clients_means_no_windows(peer: Peer) -> None:
    src = peer.source()
    src.start()
    try:
        started = time.monotonic()
        assert src.capture(600, 600) == []
        assert time.monotonic() - started < 60  # not held for the 10-min window, however loaded the machine
    finally:
        src.close()
