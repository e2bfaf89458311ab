"""The agent's HTTP server on loopback for tests (tests/serving): a real `HttpServer` (aiohttp behind
the guarded accept loop) with the test's render function, which counts its calls and can hold a
request in progress, and raw-socket clients that read until the server closes."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

from support.patience import hang_guard
from warpwatch.serving import Endpoints, HttpServer, Limits
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
