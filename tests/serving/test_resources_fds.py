"""File descriptors (issue 20): at a soft RLIMIT_NOFILE of 256 and 1,200 idle connections the agent
ran out of descriptors: no scrape got in, the dir: source could not list its folder.

The real agent (`warpwatch run`) runs under `prlimit --nofile=SOFT:HARD`; the idle connections come
from 127.0.0.2, the normal client from 127.0.0.1 (loopback only, every loop bounded).
"""

from __future__ import annotations

import contextlib
import re
import resource
import shutil
import signal
import socket
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support.paths import HTA
from support.patience import hang_guard
from support.process import Process, get

CONTROL = HTA / "trace_diff/control/control.json.gz"
ATTACKER = "127.0.0.2"
IDLE = 1200


@pytest.fixture(autouse=True)
def _room_for_the_clients() -> Iterator[None]:
    """This process holds the 1,200 client sockets: its own soft limit goes up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < IDLE + 200:
        pytest.skip(f"the hard RLIMIT_NOFILE ({hard}) is too low for {IDLE} client sockets")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def prlimit(nofile: str) -> list[str]:
    tool = shutil.which("prlimit")
    if tool is None:
        pytest.skip("prlimit (util-linux) is not installed")
    return [tool, f"--nofile={nofile}"]


@contextlib.contextmanager
def idle_connections(port: int, n: int) -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((ATTACKER, 0))
            s.settimeout(5)
            try:
                s.connect(("127.0.0.1", port))
                socks.append(s)
            except OSError:
                s.close()
        yield socks
    finally:
        for s in socks:
            s.close()


def value(body: bytes, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    m = re.search(rf"^{re.escape(name)}(?:\{{{re.escape(want)}\}})? (\S+)$".encode(), body, re.M)
    return float(m.group(1)) if m else None


@pytest.mark.slow
@pytest.mark.parametrize(("nofile", "soft_after"), [("256:256", 256), ("256:4096", 4096)])
def test_the_agent_keeps_serving_and_reading_traces_under_1200_idle_connections(
    tmp_path: Path, nofile: str, soft_after: int
) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    agent = Process(
        [
            *prlimit(nofile),
            sys.executable,
            "-m",
            "warpwatch",
            "run",
            "--address",
            "127.0.0.1",
            "--port",
            "0",
            "--period",
            "1s",
            "--window",
            "50ms",
            "--jitter",
            "0",
            "--source",
            f"dir:{traces}",
        ]
    )
    try:
        with idle_connections(agent.port, IDLE) as socks:
            assert len(socks) > 1000  # the listen backlog takes them; the agent closes the excess
            shutil.copy(CONTROL, traces / CONTROL.name)  # a real trace, to be read while they are held
            statuses, body = [], b""
            deadline = time.monotonic() + hang_guard(60)  # the first window read, however loaded
            while time.monotonic() < deadline:
                status, body = get(agent.port)
                statuses.append(status)
                if status == 200 and (value(body, "warpwatch_windows_total", outcome="ok") or 0) >= 1:
                    break
                time.sleep(0.5)
            assert agent.proc.poll() is None
            assert statuses[-1] == 200, statuses
            assert value(body, "warpwatch_windows_total", outcome="ok") == 1  # the trace was read
            assert value(body, "warpwatch_windows_total", outcome="failed") == 0  # the folder was always listed
            connections = value(body, "warpwatch_http_connections")
            assert connections is not None and connections <= min(256, soft_after - 64)
            assert (value(body, "warpwatch_http_rejected_total", reason="evicted") or 0) > 0
            assert value(body, "warpwatch_http_rejected_total", reason="accept_failed") == 0  # within the plan
        assert [get(agent.port)[0] for _ in range(3)] == [200, 200, 200]
        assert any(f"event=fd_limit soft_was=256 soft={soft_after} " in line for line in agent.lines)
    finally:
        code = agent.stop()
    assert code == 0
    assert not [line for line in agent.lines if "Traceback" in line]


SERVER = textwrap.dedent("""
    import signal, sys, threading
    from warpwatch.serving import Endpoints, HttpServer, Limits, http_limits
    server = None
    def render(accept):
        text = "".join(f"rejected {reason} {n}\\n" for reason, n in sorted(server.rejected.items()))
        return (text + f"connections open {server.connections}\\n").encode(), "text/plain"
    server = HttpServer(Endpoints(render, lambda: (True, "ok")), "127.0.0.1", 0,
                        limits=http_limits(Limits()) if sys.argv[2:] == ["sized"] else Limits(max_connections=100_000))
    server.start()
    print(f"port={server.port}", file=sys.stderr, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait(float(sys.argv[1]))
    server.stop()
""")


def counts_when(port: int, done: Callable[[dict[str, int]], bool]) -> dict[str, int]:
    """SERVER's counts (`evicted`, `accept_failed`, ..., `open`), read until `done` holds."""
    deadline = time.monotonic() + hang_guard(30.0)
    while True:
        status, body = get(port, timeout=hang_guard(10.0))
        assert status == 200
        counts = {line.split(" ")[1]: int(line.split(" ")[2]) for line in body.decode().splitlines()}
        if done(counts):
            return counts
        assert time.monotonic() < deadline, counts
        time.sleep(0.2)


@pytest.mark.slow
def test_accept_out_of_descriptors_makes_room_for_the_waiting_client() -> None:
    """A server whose connection bound is far above its descriptor limit (as before the bound was
    sized from the limit, or with descriptors held elsewhere): accept() fails with EMFILE. The
    server stays up, counts it, and closes an idle connection so that the scraper gets in."""
    server = Process([*prlimit("64:64"), sys.executable, "-c", SERVER, "60"])
    try:
        with idle_connections(server.port, 200) as socks:
            assert len(socks) > 100
            time.sleep(1.0)
            status, body = get(server.port, timeout=hang_guard(10.0))
            assert server.proc.poll() is None
            assert status == 200
            counts = {line.split(" ")[1]: int(line.split(" ")[2]) for line in body.decode().splitlines()}
            assert counts["accept_failed"] >= 1
            assert counts["evicted"] >= 1
    finally:
        code = server.stop()
    assert code == 0
    assert not [line for line in server.lines if "Traceback" in line]


@pytest.mark.slow
def test_a_burst_of_connections_at_the_bound_stays_within_the_descriptors_planned() -> None:
    """At the bound, each new connection evicts an idle one, whose socket asyncio closes in a later
    callback: accepting a whole backlog without yielding held two descriptors per place, and
    accept() failed with EMFILE under a limit the bound was sized for (where trace files and the
    folder listing would fail too). The server is stopped while the burst fills its backlog."""
    server = Process([*prlimit("256:256"), sys.executable, "-c", SERVER, "60", "sized"])
    try:
        with idle_connections(server.port, 144) as socks:  # http_limits at 256: 144 connections
            counts_when(server.port, lambda c: c["open"] >= 144)  # at its bound (each look evicts one)
            server.proc.send_signal(signal.SIGSTOP)
            try:
                for _ in range(400):
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    socks.append(s)
                    s.bind((ATTACKER, 0))
                    s.setblocking(False)
                    s.connect_ex(("127.0.0.1", server.port))
                time.sleep(0.5)
            finally:
                server.proc.send_signal(signal.SIGCONT)
            counts = counts_when(server.port, lambda c: c["evicted"] >= 400)  # the whole burst taken
            assert counts["accept_failed"] == 0
    finally:
        code = server.stop()
    assert code == 0
    assert not [line for line in server.lines if "Traceback" in line]


@pytest.mark.parametrize("soft", [16, 64, 100, 256, 1024, 4096, 1 << 20])
def test_the_connection_bound_leaves_descriptors_for_the_rest_of_the_agent(soft: int) -> None:
    from warpwatch.serving import Limits, http_limits

    configured = Limits()
    limits = http_limits(configured, soft)
    assert 8 <= limits.max_connections <= configured.max_connections
    assert 1 <= limits.refusals_in_flight <= configured.refusals_in_flight
    if soft >= 256:  # connections, refusals being flushed and the socket being accepted fit, with 64 to spare
        assert limits.max_connections + limits.refusals_in_flight + 1 <= soft - 64
    if soft >= 64 + 1 + 256 + 64:
        assert (limits.max_connections, limits.refusals_in_flight) == (256, 64)
    # Evicted sockets waiting for the loop to close them may take a quarter of the 64 kept back.
    assert limits.evictions_per_yield >= 1
    if soft >= 256:
        assert limits.max_connections + limits.refusals_in_flight + 1 + limits.evictions_per_yield <= soft - 64 + 16
    if soft == 1 << 20:  # descriptors abound: the accept loop never waits for closes
        assert limits.evictions_per_yield == configured.evictions_per_yield
