"""The agent's HTTP server: aiohttp's low-level server behind an accept loop that bounds what any
client can hold.

aiohttp (`aiohttp.web.Server`, a documented asyncio protocol factory) parses HTTP/1.1 with
llhttp (Node.js's parser: request-smuggling checks, line and field size limits answered 400
before any handler runs), handles keep-alive, pipelining and HEAD, and shuts connections down
gracefully. It has no deadline for a request's headers, no bound on connections and no hook
before its parser, so this module owns the sockets and adds them (see `Limits`):

- one event loop in one thread serves every connection: a connection costs an fd and a few KiB,
  never a thread;
- at most `max_connections` at once. At the bound, a new connection first evicts the longest
  waiting one that has no request in progress (an idle keep-alive, a client that sends nothing
  or too slowly); only when every connection is serving a request is it refused, with a plain
  `503 Service Unavailable` (a bare close on a TLS port, where no clear-text answer can be read);
- `header_timeout_s` from accept to the end of the first request's headers (the TLS handshake
  included), then `idle_timeout_s` from the end of each response to the end of the next
  request's headers. The deadlines are absolute: trickling a byte at a time does not extend
  them. A request whose headers never finished gets no response: its connection is closed;
- at most `max_header_bytes` of request line and headers, counted as they arrive, before
  parsing and before authentication: beyond it, `431` and close;
- a response the client does not read within `write_timeout_s` is dropped with its connection;
- a client that goes away before its response is sent is one log line (rate-limited, never a
  traceback), as is every other per-connection problem; each is counted in
  `warpwatch_http_rejected_total{reason}` (`rejects.REJECT_REASONS`);
- TLS (`webconfig`): the first byte is peeked before the handshake, so a plain-HTTP request on
  the TLS port gets "400 Client sent an HTTP request to an HTTPS server." (as Go answers); each
  handshake uses the current SSL context, rebuilt when the certificate, key or CA files change
  (rotation); `client_allowed_sans` is checked before the first byte of HTTP is parsed;
- `stop()` closes the listening socket and idle connections at once, lets requests in progress
  finish for at most `shutdown_timeout_s`, then closes the rest: it always returns within that
  bound (plus a second), and joins every thread it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import threading
import time
from typing import Any

from aiohttp import HttpVersion11, web

from ..errors import WarpwatchError
from ..logs import limited_event
from .aiohttplog import AiohttpLog
from .connection import Connection, Limits, _reason
from .endpoints import Endpoints
from .rejects import RejectLog
from .tls import _ContextHolder, answer_plain_http, peek_first_byte
from .webconfig import WebConfig

log = logging.getLogger("warpwatch.http")

_BUSY_ANSWER = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: 42\r\n\r\n"
    b"too many connections to warpwatch; retry\r\n\n"
)


class HttpServer(RejectLog):
    """Serves `endpoints` on (address, port) with `limits` (module doc): `start()`, `port`, `stop()`."""

    def __init__(
        self,
        endpoints: Endpoints,
        address: str,
        port: int,
        *,
        web: WebConfig | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.address = address
        self.requested_port = port
        self.web = web
        self.tls = web.tls if web is not None else None
        self.limits = limits or Limits()
        super().__init__()
        self.by_handler: dict[Any, Connection] = {}
        self._conns: dict[Connection, None] = {}
        self._refusing = 0
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._accepting: asyncio.Task[None] | None = None
        self._contexts = _ContextHolder(web, self.tls) if web is not None and self.tls is not None else None
        self._web_server: Any = None  # aiohttp.web.Server (untyped in aiohttp's stubs)

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        assert self._sock is not None, "not started"
        return int(self._sock.getsockname()[1])

    @property
    def connections(self) -> int:
        return len(self._conns)

    @property
    def requests_in_progress(self) -> int:
        """How many connections are serving a request now (the others are idle or still sending one)."""
        return sum(1 for c in self._conns if c.in_request)

    def start(self) -> None:
        """Bind and serve in a thread of its own; WarpwatchError when the address cannot be bound."""
        try:
            infos = socket.getaddrinfo(
                self.address, self.requested_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            family, _, _, _, sockaddr = infos[0]
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(sockaddr)
                sock.listen(min(socket.SOMAXCONN, 1024))
            except BaseException:
                sock.close()
                raise
        except OSError as exc:
            raise WarpwatchError(
                f"cannot listen on {self.address}:{self.requested_port}: {exc.strerror or exc}; "
                "choose another address or port with --address / --port"
            ) from None
        sock.setblocking(False)
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="warpwatch-http", daemon=True)
        self._thread.start()
        self._started.wait(10)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        loop.set_exception_handler(self._loop_error)
        try:
            loop.run_until_complete(self._serve())
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._web_server = web.Server(
            self._handle,
            access_log=None,
            logger=AiohttpLog(self._repeats, self.count),
            keepalive_timeout=self.limits.idle_timeout_s + 5.0,  # ours (`idle_timeout_s`) comes first
            max_line_size=8190,
            max_field_size=8190,
        )
        self._stopping = asyncio.Event()
        self._accepting = asyncio.create_task(self._accept_loop())
        self._started.set()
        await self._stopping.wait()
        await self._shutdown()

    def web_server(self) -> Any:
        assert self._web_server is not None
        return self._web_server()

    def stop(self) -> None:
        """Graceful shutdown within `limits.shutdown_timeout_s` (module doc); idempotent."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._stopping.set)
            thread.join(self.limits.shutdown_timeout_s + 2.0)
        self.endpoints.close()
        if self._sock is not None:
            self._sock.close()

    async def _shutdown(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(BaseException):
                await self._accepting
        if self._sock is not None:
            self._sock.close()
        for conn in list(self._conns):
            if not conn.in_request:
                conn.abort()
        deadline = time.monotonic() + self.limits.shutdown_timeout_s
        while self.requests_in_progress and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self._web_server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._web_server.shutdown(0.1), 1.0)
        for conn in list(self._conns):
            conn.abort()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)

    # ------------------------------------------------------------------ connections

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        failures = evicted = 0
        while True:
            try:
                sock, addr = await loop.sock_accept(self._sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS...: never fatal, never a spin
                failures += 1
                await asyncio.sleep(self._accept_failed(exc, failures))
                continue
            failures = 0
            sock.setblocking(False)
            peer = str(addr[0]) if isinstance(addr, tuple) else str(addr)
            if len(self._conns) >= self.limits.max_connections:
                if not self._evict():
                    self._refuse(sock, peer)
                    continue
                # An evicted transport closes its socket in a loop callback, and sock_accept does
                # not yield while the backlog is full: a burst would hold two descriptors per place
                # (EMFILE under the limit `fds.http_limits` sized us for). Let the closes run once
                # the descriptors left are taken (`evictions_per_yield`); not after each eviction
                # wherever descriptors abound: that ran every pending callback between two accepts
                # and left a scraper seconds in a backlog full of clients resetting connections.
                evicted += 1
                if evicted >= self.limits.evictions_per_yield:
                    evicted = 0
                    try:
                        await asyncio.sleep(0)
                    except asyncio.CancelledError:  # stopping: the new socket is nobody's yet
                        sock.close()
                        raise
            conn = Connection(self, sock, peer)
            self._conns[conn] = None
            conn.opening = asyncio.create_task(self._open(conn))

    def _accept_failed(self, exc: OSError, failures: int) -> float:
        """Count a failed accept() and return how long to wait before the next one.

        The connection stays in the listen backlog. Out of descriptors (EMFILE, ENFILE: something
        else holds them, or the limit is below what `fds.http_limits` planned for), the
        longest-waiting idle connection is closed so that the waiting one (a scraper, most likely)
        gets its descriptor; the wait doubles from 10 ms to 1 s while accept() keeps failing."""
        self.count("accept_failed")
        limited_event(
            log,
            self._repeats,
            ("accept", exc.errno),
            "http_accept_failed",
            logging.WARNING,
            error=exc.strerror or str(exc),
            connections=len(self._conns),
        )
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            self._evict()
        return float(min(1.0, 0.01 * 2 ** min(failures - 1, 7)))

    def _evict(self) -> bool:
        """Close the longest-waiting connection without a request in progress; False if none."""
        idle = [c for c in self._conns if not c.in_request]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.since)
        self.reject(
            "evicted",
            oldest.peer,
            "closed to make room for a new connection (connection bound reached)",
            level=logging.INFO,
        )
        oldest.abort()
        self._conns.pop(oldest, None)
        return True

    def _refuse(self, sock: socket.socket, peer: str) -> None:
        self.reject(
            "too_many_connections", peer, f"{self.limits.max_connections} connections are serving requests; refused"
        )
        if self.tls is not None or self._refusing >= self.limits.refusals_in_flight:
            sock.close()
            return
        with contextlib.suppress(OSError):
            sock.send(_BUSY_ANSWER)
            sock.shutdown(socket.SHUT_WR)
        self._refusing += 1

        def close() -> None:
            self._refusing -= 1
            sock.close()

        asyncio.get_running_loop().call_later(0.5, close)  # let the 503 reach the client before the close

    def forget(self, conn: Connection) -> None:
        self._conns.pop(conn, None)

    async def _open(self, conn: Connection) -> None:
        loop = asyncio.get_running_loop()
        limit = self.limits.header_timeout_s
        try:
            if self._contexts is None:
                await loop.connect_accepted_socket(lambda: conn, conn.sock)
            else:
                await asyncio.wait_for(self._open_tls(conn, limit), limit)
        except (asyncio.TimeoutError, TimeoutError):
            self.reject(
                "header_timeout" if self._contexts is None else "tls_failed",
                conn.peer,
                "TLS handshake not complete in time",
                level=logging.DEBUG,
            )
            conn.abort()
            return
        except asyncio.CancelledError:
            conn.abort()
            return
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            self.reject("tls_failed", conn.peer, _reason(exc), level=logging.DEBUG)
            conn.abort()
            return
        conn.opening = None
        if not conn.closed:
            conn.arm(limit)

    async def _open_tls(self, conn: Connection, limit: float) -> None:
        loop = asyncio.get_running_loop()
        sock = conn.sock
        first = await peek_first_byte(sock)
        if not first:  # connected and closed (a TCP probe)
            conn.abort()
            return
        if first != b"\x16":  # not a TLS handshake record: most likely plain HTTP
            self.reject("tls_failed", conn.peer, "not TLS (plain HTTP on the TLS port?)", level=logging.DEBUG)
            if first.isalpha():
                await answer_plain_http(sock)
            conn.abort()
            return
        assert self._contexts is not None
        await loop.connect_accepted_socket(lambda: conn, sock, ssl=self._contexts.get(), ssl_handshake_timeout=limit)

    # ------------------------------------------------------------------ requests

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        conn = self.by_handler.get(request.protocol)
        if conn is None:  # cannot happen: every aiohttp protocol is made by a Connection
            raise web.HTTPServiceUnavailable()
        conn.begin_request()
        try:
            if request.version not in ((1, 0), (1, 1)):  # HTTP/0.9 (llhttp reads it) and anything newer
                if request.version > HttpVersion11:
                    # aiohttp's status line repeats the request's version, and "HTTP/2.0 505" is no
                    # HTTP/1 answer: reply in HTTP/1.1 (RFC 9110 15.6.6), through a copy of the
                    # request (the original has cached its version)
                    request = request.clone()
                    request._version = HttpVersion11
                response: web.StreamResponse = web.Response(
                    status=505, text="HTTP/1.0 or HTTP/1.1 only\n", headers={"Connection": "close"}
                )
                response.force_close()
            else:
                response = await self.endpoints.respond(request, conn.peer)
            if response.status == 429:
                self.reject("auth_busy", conn.peer, "basic-auth queue full; answered 429")
            elif response.status == 404:
                self.reject("not_found", conn.peer, "no such path or evidence id; answered 404", level=logging.DEBUG)
            try:
                await asyncio.wait_for(self._send(request, response), self.limits.write_timeout_s)
            except (asyncio.TimeoutError, TimeoutError):
                self.reject(
                    "slow_reader",
                    conn.peer,
                    f"response not read within {self.limits.write_timeout_s:g}s; connection closed",
                )
                conn.abort()
            except (ConnectionError, RuntimeError):  # reset, or writing to a closing transport:
                conn.abort()  # counted and logged once, as client_gone, when the connection is lost
            return response
        finally:
            conn.end_request()

    @staticmethod
    async def _send(request: web.BaseRequest, response: web.StreamResponse) -> None:
        await response.prepare(request)
        await response.write_eof()
