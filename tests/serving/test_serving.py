"""The HTTP layer under abuse: each flood of benchmarks/attacks/floods.py, scaled down, on loopback, bounded in count
and time. A real `HttpServer` (aiohttp behind the guarded accept loop) serves real sockets; the
render function is the test's, so that a test can count renders or hold a request in progress.

Every test here, in test_shutdown.py and in test_serving_auth.py failed against the previous
`ThreadingHTTPServer` handler (one thread per connection, no timeouts, no bound, headers up to
100 x 64 KiB, tracebacks on a client that goes away, a global bcrypt lock), each for the reason its
name says. The server and its clients: `support.httpserving`.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import logging
import socket
import threading
import time
from pathlib import Path

import bcrypt
import pytest

from support.httpserving import BODY, Renders, closed_by_server, connect, get, serving
from support.patience import hang_guard, wait_for
from warpwatch.serving import Limits, accepts_gzip


@pytest.mark.parametrize(
    ("header", "gz"),
    [
        ("gzip", True),
        ("gzip;q=0", False),
        ("gzip; q=0.0", False),
        ("GZIP;Q=0.5", True),
        ("deflate", False),
        ("*", True),
        ("*;q=0", False),
        ("gzip;q=0, *", False),
        ("identity, *;q=0.1", True),
        ("", False),
        ("x-gzip", True),
        ("gzip;q=bogus", False),
        ("br, gzip;q=0.001", True),
    ],
)
def test_accept_encoding_q_values_are_respected(header: str, gz: bool) -> None:
    assert accepts_gzip(header) is gz


def test_metrics_are_gzipped_only_when_accepted_and_every_path_answers() -> None:
    with serving() as (server, _):
        status, headers, body = get(server.port, headers={"Accept-Encoding": "gzip"})
        assert (status, headers["content-encoding"], gzip.decompress(body)) == (200, "gzip", BODY)
        status, headers, body = get(server.port, headers={"Accept-Encoding": "gzip;q=0"})
        assert (status, "content-encoding" in headers, body) == (200, False, BODY)
        assert get(server.port, "/healthz")[0::2] == (200, b"ok\n")
        assert get(server.port, "/readyz")[0::2] == (200, b"ready\n")
        assert get(server.port, "/nope")[0] == 404


def test_an_http_0_9_request_line_is_answered_at_once_not_left_hanging() -> None:
    with serving() as (server, renders), connect(server.port) as s:
        s.sendall(b"GET /metrics\r\n\r\n")
        answer = closed_by_server(s)
        assert b" 505 " in answer.split(b"\r\n")[0]
        assert renders.count == 0


# ---------------------------------------------------------------------------------------------
# Connections: bound, deadlines, header size


def test_idle_connections_beyond_the_bound_cannot_starve_a_scrape() -> None:
    """Issue: 1,200 idle connections made every scrape time out. Here 40 idle connections against
    a bound of 8: the idle ones are evicted, the scrape is served, the fds stay bounded."""
    with serving(Limits(max_connections=8, header_timeout_s=hang_guard())) as (server, _):
        idle = [connect(server.port) for _ in range(40)]
        try:
            wait_for(lambda: server.rejected["evicted"] >= 32, 1.0, "32 evictions")
            assert server.connections <= 8
            assert get(server.port)[0] == 200
            assert server.rejected["evicted"] >= 33
        finally:
            for s in idle:
                s.close()


def test_beyond_the_bound_of_busy_connections_a_new_one_gets_a_clear_503() -> None:
    renders = Renders()
    renders.hold.clear()
    with serving(Limits(max_connections=3), renders=renders) as (server, _):
        busy = [threading.Thread(target=get, args=(server.port,)) for _ in range(3)]
        for t in busy:
            t.start()
        for _ in range(2):  # two renders run at once (the pool); the third waits for one
            assert renders.entered.acquire(timeout=hang_guard())
        wait_for(lambda: server.requests_in_progress == 3, 1.0, "3 busy connections")
        with connect(server.port) as s:
            answer = closed_by_server(s)
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert b"Retry-After: 1" in answer
        assert server.rejected["too_many_connections"] == 1
        renders.hold.set()
        for t in busy:
            t.join(hang_guard())


@pytest.mark.slow
def test_a_request_whose_headers_never_finish_gets_no_response_and_is_never_rendered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue: closing 2,000 half-sent connections made the server answer each as GET /metrics."""
    caplog.set_level(logging.INFO)
    with serving(Limits(header_timeout_s=1.0)) as (server, renders):
        half = [connect(server.port) for _ in range(30)]
        for s in half:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        for s in half[:15]:  # these go away themselves ...
            s.close()
        for s in half[15:]:  # ... these are closed by the deadline, without a response
            assert closed_by_server(s) == b""
            s.close()
        assert renders.count == 0
        assert server.rejected["header_timeout"] >= 15
        wait_for(lambda: server.connections == 0, 1.0, "no connection left")
    lines = [r for r in caplog.records if r.name == "warpwatch.http" and r.levelno >= logging.INFO]
    assert len(lines) <= 2, [r.getMessage() for r in lines]  # rate-limited: one line per reason
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.slow
def test_a_trickle_of_header_bytes_does_not_extend_the_deadline() -> None:
    """The trickle goes on until the server closes the connection: a deadline that each byte
    extended would never come (the hang guard fails the test), however slow the machine."""
    with serving(Limits(header_timeout_s=1.0)) as (server, renders), connect(server.port) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
        deadline = time.monotonic() + hang_guard()
        with pytest.raises(OSError):  # the send after the server's close: EPIPE or ECONNRESET
            while time.monotonic() < deadline:  # a byte every 100 ms while the connection is open
                s.sendall(b"X")
                time.sleep(0.1)
        assert closed_by_server(s) == b""
        assert renders.count == 0
        assert server.rejected["header_timeout"] == 1


def test_oversized_headers_get_431_before_authentication(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue: 20 clients each sending 6.3 MB of headers took the agent to 550 MiB."""
    calls: list[bytes] = []
    real = bcrypt.checkpw
    monkeypatch.setattr(bcrypt, "checkpw", lambda p, h: calls.append(h) or real(p, h))
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prom: '{bcrypt.hashpw(b'pw', bcrypt.gensalt(4)).decode()}'\n")
    with serving(Limits(max_header_bytes=16 * 1024), web_config=cfg) as (server, renders):
        with connect(server.port) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nAuthorization: Basic " + base64.b64encode(b"prom:bad") + b"\r\n")
            with contextlib.suppress(OSError):
                for i in range(64):  # 64 x 4 KiB: four times the bound
                    s.sendall(b"X-Pad-%d: %s\r\n" % (i, b"p" * 4096))
            answer = closed_by_server(s)
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert calls == [] and renders.count == 0
        assert server.rejected["headers_too_large"] == 1


def test_a_client_that_goes_away_is_one_log_line_never_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """Issue: each client closing before reading its reply printed a 21-line traceback."""
    caplog.set_level(logging.DEBUG)
    renders = Renders()
    renders.hold.clear()
    with serving(renders=renders) as (server, _):
        clients = []
        for _ in range(20):
            s = connect(server.port)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            clients.append(s)
        assert renders.entered.acquire(timeout=hang_guard())
        for s in clients:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # reset
            s.close()
        wait_for(lambda: server.rejected["client_gone"] == 20, 1.0, "20 clients gone")
        renders.hold.set()
        wait_for(lambda: server.connections == 0, 1.0, "no connection left")
        assert get(server.port)[0] == 200
    gone = [
        r
        for r in caplog.records
        if getattr(r, "warpwatch_fields", {}).get("reason") == "client_gone" and r.levelno >= logging.INFO
    ]
    assert len(gone) == 1
    assert not any(r.exc_info for r in caplog.records)
