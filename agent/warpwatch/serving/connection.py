"""One accepted connection of `server.HttpServer`, the `Limits` it is held to, and `Host`: what a
connection uses of its server (which this module does not import: the server imports it).

`Connection` is the asyncio protocol of a socket the server accepted: it forwards to aiohttp's
request handler and enforces, per connection, what the server's module doc lists: the header
and keep-alive deadlines (absolute: trickling bytes does not extend them), the header byte
bound counted before parsing, the client SANs allowed on a TLS port, and half-closes (requests
already sent before the client shut its side, pipelined ones included, are still answered).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any, Protocol

from .tls import _san_allowed
from .webconfig import TLSServerConfig


@dataclass(frozen=True)
class Limits:
    """What one connection may hold, and for how long (module doc)."""

    max_connections: int = 256
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 30.0
    write_timeout_s: float = 30.0
    max_header_bytes: int = 32 * 1024
    shutdown_timeout_s: float = 5.0
    refusals_in_flight: int = 64
    """Refused connections whose 503 is still being flushed; beyond, they are closed at once."""
    evictions_per_yield: int = 1024
    """Connections evicted at the bound whose sockets may wait for the event loop to close them
    before the accept loop lets it (each holds its descriptor until then); `fds.http_limits`
    lowers it to what the descriptor limit leaves."""


_TOO_LARGE_ANSWER = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\nContent-Length: 29\r\n\r\nrequest headers are too large\n"
)


class Host(Protocol):
    """What a `Connection` uses of the server that accepted it (`server.HttpServer`)."""

    @property
    def tls(self) -> TLSServerConfig | None: ...
    @property
    def limits(self) -> Limits: ...
    @property
    def by_handler(self) -> dict[Any, Connection]:
        """Each aiohttp request handler's connection."""

    def web_server(self) -> Any:
        """A new aiohttp request handler."""

    def reject(self, reason: str, peer: str, detail: str, level: int = logging.WARNING) -> None: ...
    def forget(self, conn: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """One accepted connection: forwards to aiohttp's protocol and enforces the deadlines."""

    def __init__(self, server: Host, sock: socket.socket, peer: str) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self.inner: Any = None  # aiohttp's RequestHandler, once connected
        self.transport: asyncio.Transport | None = None
        self.opening: asyncio.Task[None] | None = None
        self.in_request = False
        self.since = time.monotonic()
        """When the current phase began: accept, or the end of the last response."""
        self.header_bytes = 0
        self.requests = 0
        self.deadline: asyncio.TimerHandle | None = None
        self.closed = False
        """Closed, or being closed by us (a close the client did not cause)."""
        self.eof = False
        """The client has half-closed: close once the request in progress is answered."""

    # -- asyncio.Protocol, forwarded

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        tls = self.server.tls
        if (
            tls is not None
            and tls.client_allowed_sans
            and not _san_allowed(transport.get_extra_info("peercert"), tls.client_allowed_sans)
        ):
            self.server.reject(
                "tls_failed",
                self.peer,
                "no subject alternative name of the client certificate is in client_allowed_sans",
            )
            transport.abort()
            return
        self.inner = self.server.web_server()
        self.server.by_handler[self.inner] = self
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.closed or self.inner is None:
            return
        if not self.in_request:
            self.header_bytes += len(data)
            if self.header_bytes > self.server.limits.max_header_bytes:
                self.server.reject(
                    "headers_too_large",
                    self.peer,
                    f"more than {self.server.limits.max_header_bytes} bytes of request headers",
                )
                self.close_with(_TOO_LARGE_ANSWER)
                return
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        """The client half-closed (`shutdown(SHUT_WR)`, `nc -N`): a request already sent is still
        answered, then the connection closes. (aiohttp alone closes at once, dropping it.) With
        nothing pending, close now; a request still incomplete waits for its header deadline."""
        if self.inner is not None:
            self.inner.eof_received()
        if self.closed or (not self.in_request and self.header_bytes == 0):
            return None  # the transport closes itself
        if self.server.tls is not None:
            return None  # asyncio's TLS cannot stay half-open (it closes and warns if asked to)
        self.eof = True
        return True

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.in_request and not self.closed:
            self.server.reject(
                "client_gone",
                self.peer,
                "closed before its response was sent" + (f" ({_reason(exc)})" if exc is not None else ""),
                level=logging.INFO,
            )
        self.closed = True
        self.cancel_deadline()
        if self.inner is not None:
            self.server.by_handler.pop(self.inner, None)
            self.inner.connection_lost(exc)
        self.server.forget(self)

    # -- phases

    def arm(self, seconds: float) -> None:
        """Close the connection `seconds` from the start of this phase unless a request arrives."""
        self.cancel_deadline()
        loop = asyncio.get_running_loop()
        self.deadline = loop.call_at(loop.time() + max(0.0, self.since + seconds - time.monotonic()), self._expired)

    def cancel_deadline(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _expired(self) -> None:
        self.deadline = None
        if self.closed or self.in_request:
            return
        if self.header_bytes or not self.requests:  # no request, or part of one, never all its headers
            self.server.reject(
                "header_timeout", self.peer, "request headers not complete in time; closed without a response"
            )
        self.abort()

    def begin_request(self) -> None:
        self.in_request = True
        self.requests += 1
        self.header_bytes = 0
        self.cancel_deadline()

    def end_request(self) -> None:
        self.in_request = False
        self.since = time.monotonic()
        # Pipelined requests sent before the half-close wait in aiohttp's queue (a private name:
        # should it change, only the first of them is answered, as before)
        if self.eof and not self.closed and self.transport is not None and not getattr(self.inner, "_messages", ()):
            self.closed = True
            self.cancel_deadline()
            self.transport.close()  # after the response already written (close flushes)
        elif not self.closed:
            self.arm(self.server.limits.idle_timeout_s)

    def close_with(self, answer: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.write(answer)
            self.transport.close()

    def abort(self) -> None:
        self.cancel_deadline()
        if self.transport is not None:
            self.transport.abort()
        else:
            if self.opening is not None:
                self.opening.cancel()
            with contextlib.suppress(OSError):
                self.sock.close()
            self.server.forget(self)
        self.closed = True


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def describe_limits(limits: Limits) -> dict[str, Any]:
    """The limits, for the start-up log line."""
    return {
        "max_connections": limits.max_connections,
        "header_timeout_s": limits.header_timeout_s,
        "idle_timeout_s": limits.idle_timeout_s,
        "max_header_bytes": limits.max_header_bytes,
    }
