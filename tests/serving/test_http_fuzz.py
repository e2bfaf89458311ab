"""Generative tests of the metrics port (issue 20): whatever bytes a client sends, it gets a clean
HTTP answer or a clean close (the hang guard: never a hang), the server stays up, a normal scrape works
afterwards, and nothing in the logs or on stderr is a traceback.

One real `HttpServer` (aiohttp behind the guarded accept loop) serves loopback sockets, with short
deadlines so that a request that never completes costs about a second. How long the close takes is
no assertion here (a loaded machine takes what it takes); that the header deadline closes a request
that never completes, without an answer, and counts it, test_serving.py proves. Request lines, methods,
paths (unicode, %-escapes, very long), headers (huge, duplicated, invalid bytes, many), bodies and
chunked encodings come from hypothesis; each connection is then half-closed, left open, or reset.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.patience import hang_guard
from warpwatch.serving import Endpoints, HttpServer, Limits

HEADER_TIMEOUT_S = 1.0
LIMITS = Limits(
    header_timeout_s=HEADER_TIMEOUT_S,
    idle_timeout_s=1.0,
    write_timeout_s=2.0,
    max_header_bytes=16 * 1024,
    shutdown_timeout_s=2.0,
)
METRICS = b"# HELP up 1 when up\n# TYPE up gauge\nup 1.0\n"
STATUS_LINE = re.compile(rb"^HTTP/(1\.[01]|0\.9) ([1-5]\d\d) [^\r\n]*\r\n")
"""aiohttp echoes the request's version: an HTTP/0.9 request line gets "HTTP/0.9 505" (README)."""


class Collected(logging.Handler):
    """Every log record of any logger (aiohttp's included), formatted with its traceback if any,
    and every exception that escaped a thread."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def tracebacks(self) -> list[str]:
        return [line for line in self.lines if "Traceback" in line]


@pytest.fixture(scope="module")
def logs() -> Iterator[Collected]:
    handler = Collected()
    root = logging.getLogger()
    level, hook = root.level, threading.excepthook
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    threading.excepthook = lambda args: handler.lines.append(f"Traceback (thread {args.thread}): {args.exc_value!r}")
    try:
        yield handler
    finally:
        threading.excepthook = hook
        root.setLevel(level)
        root.removeHandler(handler)


@pytest.fixture(scope="module")
def server(logs: Collected) -> Iterator[HttpServer]:
    s = HttpServer(
        Endpoints(lambda accept: (METRICS, "text/plain; version=0.0.4"), lambda: (True, "ready")),
        "127.0.0.1",
        0,
        limits=LIMITS,
    )
    s.start()
    try:
        yield s
    finally:
        s.stop()
    assert logs.tracebacks() == []


# --------------------------------------------------------------------------------------------- inputs

TOKEN = st.text(
    alphabet="!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=20
).map(str.encode)
ANY_BYTES = st.binary(max_size=64)
METHOD = st.one_of(
    st.sampled_from(
        [b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"TRACE", b"CONNECT", b"PATCH", b"PRI", b"get", b""]
    ),
    TOKEN,
    ANY_BYTES,
)
PATH = st.one_of(
    st.sampled_from(
        [
            b"/metrics",
            b"/healthz",
            b"/readyz",
            b"/",
            b"*",
            b"/metrics?x=1",
            b"http://h/metrics",
            b"//metrics",
            b"/%2e%2e/metrics",
            b"/metrics#f",
        ]
    ),
    st.text(max_size=40).map(lambda t: b"/" + t.encode("utf-8", "surrogatepass")),
    st.lists(st.integers(0, 255), max_size=20).map(lambda xs: b"/" + b"".join(b"%%%02X" % x for x in xs)),
    st.integers(1, 20_000).map(lambda n: b"/" + b"a" * n),
    ANY_BYTES,
)
VERSION = st.sampled_from(
    [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/0.9", b"HTTP/2.0", b"HTTP/1.1x", b"HTTP/9", b"", b"http/1.1"]
)
HEADER = st.one_of(
    st.tuples(
        st.sampled_from(
            [
                b"Host",
                b"Accept",
                b"Accept-Encoding",
                b"Connection",
                b"Content-Length",
                b"Transfer-Encoding",
                b"Authorization",
                b"Expect",
                b"Upgrade",
            ]
        ),
        st.one_of(
            st.sampled_from(
                [
                    b"x",
                    b"gzip;q=0",
                    b"*",
                    b"close",
                    b"keep-alive",
                    b"chunked",
                    b"0",
                    b"-1",
                    b"99999999999999999999",
                    b"identity, chunked",
                    b"100-continue",
                    b"Basic !!!",
                    b"websocket",
                    b"h2c",
                ]
            ),
            ANY_BYTES,
        ),
    ),
    st.tuples(TOKEN, ANY_BYTES),
    st.tuples(ANY_BYTES, ANY_BYTES),
    st.tuples(TOKEN, st.integers(1, 40_000).map(lambda n: b"v" * n)),  # huge
)
ENDING = st.sampled_from(["half_close", "leave_open", "reset"])


@st.composite
def body(draw: st.DrawFn) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Extra headers and the bytes after the header block: none, raw, or a (possibly broken) chunked body."""
    kind = draw(st.sampled_from(["none", "raw", "chunked"]))
    if kind == "none":
        return [], b""
    if kind == "raw":
        data = draw(st.binary(max_size=2048))
        length = draw(st.one_of(st.just(len(data)), st.integers(0, 5000), st.none()))
        return ([] if length is None else [(b"Content-Length", str(length).encode())]), data
    chunks = draw(st.lists(st.binary(max_size=300), max_size=5))
    out = b"".join(b"%x\r\n%s\r\n" % (draw(st.sampled_from([len(c), len(c) + 1, 0])), c) for c in chunks)
    out += draw(st.sampled_from([b"0\r\n\r\n", b"0\r\nTrailer: x\r\n\r\n", b"", b"zz\r\n", b"-1\r\n"]))
    return [(b"Transfer-Encoding", b"chunked")], out


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, str]:
    method, path, version = draw(METHOD), draw(PATH), draw(VERSION)
    line = draw(
        st.one_of(
            st.just(method + b" " + path + b" " + version),
            st.just(method + b" " + path),  # HTTP/0.9 style
            ANY_BYTES,
        )
    )
    headers = draw(st.lists(HEADER, max_size=8))
    if draw(st.booleans()):
        headers = headers * draw(st.integers(1, 30))  # duplicated, many
    extra, data = draw(body())
    eol = draw(st.sampled_from([b"\r\n", b"\n", b"\r"]))
    block = line + eol + b"".join(name + b": " + value + eol for name, value in headers + extra) + eol
    return block + data, draw(ENDING)


# --------------------------------------------------------------------------------------------- client


def exchange(port: int, payload: bytes, ending: str) -> bytes:
    """Send `payload`, end the connection as told, and read until the server closes (its header and
    idle deadlines close every connection it keeps) or the hang guard passes: then fail, unless a
    connection left open was answered. Returns what came back."""
    deadline = time.monotonic() + hang_guard()
    with socket.create_connection(("127.0.0.1", port), timeout=hang_guard()) as s:
        with contextlib.suppress(OSError):  # the server may close (431) before it has read everything
            s.sendall(payload)
        if ending == "reset":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return b""
        if ending == "half_close":
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return data  # a close by RST after an answer or none: clean for the client
            except TimeoutError:
                if ending == "leave_open" and STATUS_LINE.match(data):
                    return data  # answered; a keep-alive connection may stay open
                raise AssertionError(f"no answer and no close within {hang_guard()}s: got {data[:200]!r}") from None
            if not chunk:
                return data
            data += chunk


def assert_clean(data: bytes) -> None:
    """Nothing, or HTTP/1.x responses with well-formed status lines."""
    if not data:
        return
    m = STATUS_LINE.match(data)
    assert m is not None, data[:200]
    status = int(m.group(2))
    assert status in (100, 200) or 400 <= status <= 505, data[:200]
    assert m.group(1) != b"0.9" or status == 505, data[:200]


def scrape(port: int) -> bytes:
    data = exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "half_close")
    assert data.startswith(b"HTTP/1.1 200 "), data[:200]
    assert data.endswith(METRICS)
    return data


# --------------------------------------------------------------------------------------------- tests


@settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@pytest.mark.slow
@given(request=requests())
def test_any_request_gets_a_clean_answer_or_close(
    server: HttpServer, logs: Collected, request: tuple[bytes, str]
) -> None:
    payload, ending = request
    assert_clean(exchange(server.port, payload, ending))
    assert logs.tracebacks() == []


@pytest.mark.slow
@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(requests(), min_size=2, max_size=4))
def test_pipelined_requests_on_one_connection_get_clean_answers(
    server: HttpServer, logs: Collected, requests: list[tuple[bytes, str]]
) -> None:
    assert_clean(exchange(server.port, b"".join(p for p, _ in requests), requests[-1][1]))
    assert logs.tracebacks() == []


def test_a_request_followed_by_a_half_close_is_answered(server: HttpServer) -> None:
    """`printf 'GET /metrics ...' | nc -N`: the request is complete, then the client shuts its side
    (aiohttp alone closes at once and the scraper gets nothing)."""
    scrape(server.port)
    data = exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "half_close")  # keep-alive
    assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(b"ok\n")


def test_pipelined_requests_followed_by_a_half_close_are_all_answered(server: HttpServer) -> None:
    data = exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 3, "half_close")
    assert data.count(b"HTTP/1.1 200 ") == 3 and data.endswith(b"ok\n"), data


def test_an_http_2_request_line_is_refused_in_http_1_1(server: HttpServer) -> None:
    """llhttp passes "HTTP/2.0" to the handler, and aiohttp echoes the request's version in its
    status line: "HTTP/2.0 505" is no HTTP/1 response (hypothesis found it now and then)."""
    for ending in ("half_close", "leave_open"):
        data = exchange(server.port, b"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", ending)
        assert data.startswith(b"HTTP/1.1 505 "), data[:200]
        assert data.endswith(b"HTTP/1.0 or HTTP/1.1 only\n")


def test_a_request_the_parser_refuses_is_counted_and_logged_in_one_line(server: HttpServer, logs: Collected) -> None:
    before = server.rejected["bad_request"]
    n = len(logs.lines)
    data = exchange(server.port, b"GET /metrics HTTP/1.1\r\nX: \x00\x01\r\n\r\n", "half_close")  # no Host, bad byte
    assert data.startswith(b"HTTP/1.0 400 ")  # aiohttp answers its parser's refusals in HTTP/1.0
    assert server.rejected["bad_request"] == before + 1
    new = logs.lines[n:]
    assert new and all("\n" not in line and "Traceback" not in line for line in new), new


def test_after_the_generated_requests_the_server_still_scrapes_and_logged_no_traceback(
    server: HttpServer, logs: Collected, capfd: pytest.CaptureFixture[str]
) -> None:
    """Runs last in this module (pytest keeps file order): the same server took every request above."""
    assert_clean(exchange(server.port, b"GET /" + "é%00".encode() * 3000 + b" HTTP/1.1\r\n\r\n", "half_close"))
    scrape(server.port)
    out, err = capfd.readouterr()
    assert logs.tracebacks() == []
    assert "Traceback" not in out + err
    assert len(logs.lines) > 0  # the handler did see the server's lines (rejections are logged)
