"""The HTTP layer under abuse: each flood of benchmarks/attacks/floods.py, scaled down, on loopback, bounded in count
and time. A real `HttpServer` (aiohttp behind the guarded accept loop) serves real sockets; the
render function is the test's, so that a test can count renders or hold a request in progress.

Every test here failed against the previous `ThreadingHTTPServer` handler (one thread per
connection, no timeouts, no bound, headers up to 100 x 64 KiB, tracebacks on a client that goes
away, a global bcrypt lock), each for the reason its name says.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import logging
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from support.patience import hang_guard
from support.pki import HASH, PASSWORD, USER, Pki, basic, client_context, refused
from support.pki import get as webget
from support.pki import make_leaf as _make_leaf
from warpwatch.serving import Endpoints, HttpServer, Limits, accepts_gzip
from warpwatch.serving.webconfig import dummy_hash
from warpwatch.serving.webfile import load_web_config

BODY = b"# TYPE test_metric gauge\ntest_metric 1\n"


class Renders:
    """A render function that counts its calls and can be held (a request in progress)."""

    def __init__(self) -> None:
        self.count = 0
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Semaphore(0)

    def __call__(self, accept: str) -> tuple[bytes, str]:
        self.count += 1
        self.entered.release()
        self.hold.wait(hang_guard())
        return BODY, "text/plain; version=0.0.4; charset=utf-8"


@contextlib.contextmanager
def serving(
    limits: Limits | None = None, web_config: Path | None = None, renders: Renders | None = None
) -> Iterator[tuple[HttpServer, Renders]]:
    r = renders or Renders()
    web = load_web_config(web_config) if web_config is not None else None
    server = HttpServer(Endpoints(r, lambda: (True, "ready"), web), "127.0.0.1", 0, web=web, limits=limits)
    server.start()
    try:
        yield server, r
    finally:
        r.hold.set()
        server.stop()


def get(
    port: int, path: str = "/metrics", headers: dict[str, str] | None = None, source: str = "127.0.0.1"
) -> tuple[int, dict[str, str], bytes]:
    """One request from `source` (a loopback address) on its own connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=hang_guard(), source_address=(source, 0)) as s:
        lines = [
            f"GET {path} HTTP/1.1",
            "Host: x",
            "Connection: close",
            *(f"{k}: {v}" for k, v in (headers or {}).items()),
        ]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), hdrs, body


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=hang_guard())


def closed_by_server(s: socket.socket) -> bytes:
    """Everything the server sent until it closed the connection (b"" when it sent nothing)."""
    s.settimeout(hang_guard())
    data = b""
    try:
        while chunk := s.recv(4096):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def wait_until(predicate: object, usual_s: float | None = None) -> None:
    deadline = time.monotonic() + hang_guard(usual_s)
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# Negotiation


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
            wait_until(lambda: server.rejected["evicted"] >= 32)
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
        wait_until(lambda: server.connections == 3 and all(c.in_request for c in server._conns))
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
        wait_until(lambda: server.connections == 0)
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
        wait_until(lambda: server.rejected["client_gone"] == 20)
        renders.hold.set()
        wait_until(lambda: server.connections == 0)
        assert get(server.port)[0] == 200
    gone = [
        r
        for r in caplog.records
        if getattr(r, "warpwatch_fields", {}).get("reason") == "client_gone" and r.levelno >= logging.INFO
    ]
    assert len(gone) == 1
    assert not any(r.exc_info for r in caplog.records)


class Stopping:
    """A server with 200 half-sent requests and one request in progress (held by `renders`), and
    its stop() begun in a thread of the test's."""

    def __init__(self, limits: Limits, renders: Renders) -> None:
        self.server = HttpServer(Endpoints(renders, lambda: (True, "")), "127.0.0.1", 0, limits=limits)
        self.server.start()
        self.port = self.server.port
        self.half = [connect(self.port) for _ in range(200)]
        for s in self.half:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
        self.answer: list[bytes] = []
        self.scrape = threading.Thread(target=self._scrape)
        self.scrape.start()
        assert renders.entered.acquire(timeout=hang_guard())
        self.stop = threading.Thread(target=self.server.stop)
        self.stop.start()

    def _scrape(self) -> None:
        with connect(self.port) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            self.answer.append(closed_by_server(s))

    def close(self) -> None:
        for s in self.half:
            s.close()


def server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(("warpwatch-http", "warpwatch-render"))]


@pytest.mark.slow
def test_graceful_shutdown_closes_the_idle_at_once_and_finishes_requests_in_progress() -> None:
    """Issue: with 5,000 half-open connections SIGTERM did not finish in 20 s. The request in
    progress is released only once stop() has closed the listener and the 200 half-sent
    connections (its drain has begun), under a shutdown bound no test reaches: it finishes.
    (Deadlines of an hour: never the reason for a close here.)"""
    renders = Renders()
    renders.hold.clear()
    stopping = Stopping(Limits(shutdown_timeout_s=3600, header_timeout_s=3600), renders)
    try:
        assert all(closed_by_server(s) == b"" for s in stopping.half)  # closed by stop(), without a response
        with pytest.raises(ConnectionRefusedError):  # the listener was closed before them
            connect(stopping.port).close()
        time.sleep(1.0)  # a check that something does not happen: stop() does not cut the request off
        loop = stopping.server._thread
        assert loop is not None and loop.is_alive() and stopping.answer == []
        renders.hold.set()
        stopping.stop.join(hang_guard())
        assert not stopping.stop.is_alive()
        assert server_threads() == []  # stop() joined every thread it started
        stopping.scrape.join(hang_guard())
        (answer,) = stopping.answer
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(BODY)  # finished, not cut off
    finally:
        renders.hold.set()
        stopping.close()


@pytest.mark.slow
def test_graceful_shutdown_cuts_off_a_request_still_in_progress_at_its_bound() -> None:
    """The request in progress is never released while the server stops: the event loop ends once
    shutdown_timeout_s has passed and the client is closed without an answer. A stop that waited
    for requests in progress without a bound would not end while one is held (the hang guard)."""
    renders = Renders()
    renders.hold.clear()
    stopping = Stopping(Limits(shutdown_timeout_s=0.5, header_timeout_s=3600), renders)
    try:
        assert all(closed_by_server(s) == b"" for s in stopping.half)
        loop = stopping.server._thread
        assert loop is not None
        loop.join(hang_guard())
        assert not loop.is_alive()  # the event loop is done while the request is still held
        stopping.scrape.join(hang_guard())
        assert stopping.answer == [b""]  # cut off: closed without a response
        assert not renders.hold.is_set()
    finally:
        renders.hold.set()  # the render, which stop() joins, may now return
        stopping.close()
    stopping.stop.join(hang_guard())
    assert not stopping.stop.is_alive()
    assert server_threads() == []


# ---------------------------------------------------------------------------------------------
# Basic auth


def test_the_dummy_hash_has_the_configured_cost() -> None:
    """Issue: the dummy hash had cost 10 whatever the users' (htpasswd -B uses 5): an oracle."""
    assert dummy_hash([5])[:7] == b"$2b$05$"
    assert dummy_hash([5, 12, 12])[:7] == b"$2b$12$"
    assert dummy_hash([5, 12])[:7] == b"$2b$12$"  # a tie: the higher
    assert bcrypt.checkpw(b"anything", dummy_hash([4])) is False  # a well-formed hash: a full bcrypt


def test_guessers_queue_fairly_and_beyond_the_bound_get_429(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue: one global bcrypt lock made a legitimate first scrape wait behind every attacker.
    Here 12 wrong guesses from 127.0.0.2 (4 may wait, the rest get 429) and then a first scrape
    from 127.0.0.1: its turn comes after one more guess (round-robin), not after the whole queue."""
    order: list[bytes] = []
    started = threading.Event()
    release = threading.Event()
    real = bcrypt.checkpw

    def slow(password: bytes, hashed: bytes) -> bool:
        order.append(password)
        started.set()
        release.wait(hang_guard())
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", slow)
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prom: '{bcrypt.hashpw(b'right', bcrypt.gensalt(4)).decode()}'\n")
    results: dict[str, list[int]] = {"guess": [], "scrape": []}

    def attempt(kind: str, password: bytes, source: str) -> None:
        auth = "Basic " + base64.b64encode(b"prom:" + password).decode()
        results[kind].append(get(port, headers={"Authorization": auth}, source=source)[0])

    with serving(web_config=cfg) as (server, _):
        assert server.endpoints.auth is not None
        server.endpoints.auth.workers = 1
        port = server.port
        guesses = [threading.Thread(target=attempt, args=("guess", b"wrong%d" % i, "127.0.0.2")) for i in range(12)]
        guesses[0].start()
        assert started.wait(hang_guard())
        for t in guesses[1:]:
            t.start()
        wait_until(lambda: len(results["guess"]) == 7)  # 1 in progress, 4 waiting, 7 refused at once
        assert results["guess"] == [429] * 7
        scrape = threading.Thread(target=attempt, args=("scrape", b"right", "127.0.0.1"))
        scrape.start()
        wait_until(lambda: server.endpoints.auth is not None and server.endpoints.auth._queued == 5)
        release.set()
        scrape.join(hang_guard())
        for t in guesses:
            t.join(hang_guard())
    assert results["scrape"] == [200]
    assert sorted(results["guess"]) == [401] * 5 + [429] * 7
    # Round-robin: after the guess in progress and at most one more of the other client's 4,
    # never behind all of them.
    assert order.index(b"right") == 2, order
    assert server.rejected["auth_busy"] == 7


# ---------------------------------------------------------------------------------------------
# TLS through the agent's server (the web-config format; test_webconfig covers loading it)


@pytest.mark.slow
def test_tls_client_certificates_sans_rotation_and_plain_http_on_the_agents_server(pki: Pki, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki.server_crt, cert)
    shutil.copy(pki.server_key, key)
    cfg = tmp_path / "web.yml"
    cfg.write_text(
        f"tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"
        "  client_allowed_sans: [prometheus.test]\n"
        f"basic_auth_users:\n  {USER}: {HASH}\n"
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
    )
    client = (pki.client_crt, pki.client_key)
    with serving(web_config=cfg) as (server, _):
        url = f"https://127.0.0.1:{server.port}/metrics"
        ok = webget(url, client_context(pki, client), basic(USER, PASSWORD))
        assert (ok.status, ok.body, ok.headers["X-Content-Type-Options"]) == (200, BODY, "nosniff")
        denied = webget(url, client_context(pki, client), basic(USER, "wrong"))
        assert denied.status == 401 and denied.headers["WWW-Authenticate"].startswith('Basic realm="warpwatch"')
        refused(url, client_context(pki), basic(USER, PASSWORD))  # no client certificate
        refused(url, client_context(pki, (pki.foreign_crt, pki.foreign_key)), basic(USER, PASSWORD))
        plain = webget(f"http://127.0.0.1:{server.port}/metrics")
        assert plain.status == 400 and b"Client sent an HTTP request to an HTTPS server" in plain.body

        def serial() -> int:
            with (
                socket.create_connection(("127.0.0.1", server.port), timeout=hang_guard()) as raw,
                client_context(pki, client).wrap_socket(raw, server_hostname="localhost") as conn,
            ):
                return int(conn.getpeercert()["serialNumber"], 16)  # type: ignore[index, arg-type]

        assert serial() == 2
        _make_leaf(pki.dir, "rotated15", "ca", "serverAuth", "DNS:localhost,IP:127.0.0.1", 15)
        shutil.copy(pki.dir / "rotated15.key", key)
        shutil.copy(pki.dir / "rotated15.crt", cert)
        assert serial() == 15
        assert server.rejected["tls_failed"] >= 3


def test_a_client_certificate_without_an_allowed_san_is_refused_before_any_http(pki: Pki, tmp_path: Path) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(
        f"tls_server_config:\n  cert_file: {pki.server_crt}\n  key_file: {pki.server_key}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"
        "  client_allowed_sans: [grafana.test]\n"
    )
    with serving(web_config=cfg) as (server, renders):
        refused(f"https://127.0.0.1:{server.port}/metrics", client_context(pki, (pki.client_crt, pki.client_key)))
        assert renders.count == 0
