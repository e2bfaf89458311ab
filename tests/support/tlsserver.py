"""A minimal threaded TLS server for the web-config tests: the agent's own TLS contexts
(`serving.tls._ContextHolder`, so rotation and every setting are the product's) behind a
socketserver, handshakes in the connection's thread. The agent itself serves with
`serving.server.HttpServer` (asyncio); tests/serving/test_serving.py covers TLS there."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import socketserver
import ssl
import time
from typing import Any

from warpwatch.logs import event
from warpwatch.serving.tls import _ContextHolder, _san_allowed, _ssl_reason
from warpwatch.serving.webconfig import TLSServerConfig, WebConfig

log = logging.getLogger("warpwatch.webconfig")

HANDSHAKE_TIMEOUT = 10.0
"""Seconds a new connection may take to finish its TLS handshake."""


_PLAIN_HTTP_ANSWER = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)


def secure_server(
    server: socketserver.BaseServer, cfg: WebConfig, *, handshake_timeout: float = HANDSHAKE_TIMEOUT
) -> None:
    """Serve TLS on `server` (a bound, not yet serving TCP server) when `cfg` turns TLS on.

    Each accepted connection is wrapped and handshaken in `finish_request`, which a
    ThreadingMixIn server runs in the connection's own thread: a slow client cannot stall the
    accept loop. Handshakes that fail or take longer than `handshake_timeout` close the connection
    (logged at debug level). Call before `serve_forever()`. No-op when `cfg.tls` is None."""
    tls = cfg.tls
    if tls is None:
        event(log, "tls_disabled", web_config=os.fspath(cfg.path))
        return
    if not isinstance(server, socketserver.ThreadingMixIn):
        event(
            log,
            "tls_handshake_in_accept_loop",
            logging.WARNING,
            reason=f"{type(server).__name__} is not threaded: a slow TLS client delays the others",
        )
    holder = _ContextHolder(cfg, tls)
    finish_request = server.finish_request

    def tls_finish_request(request: Any, client_address: Any) -> None:
        conn = _handshake(holder, tls, request, client_address, handshake_timeout)
        if conn is None:
            return
        try:
            finish_request(conn, client_address)
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)
            conn.close()

    server.finish_request = tls_finish_request  # type: ignore[method-assign]
    event(
        log,
        "tls_enabled",
        web_config=os.fspath(cfg.path),
        client_auth=tls.client_auth_type,
        min_version=tls.min_version,
        max_version=tls.max_version,
        http2=False,
    )


def _handshake(
    holder: _ContextHolder, tls: TLSServerConfig, sock: socket.socket, client_address: Any, timeout: float
) -> ssl.SSLSocket | None:
    client = client_address[0] if isinstance(client_address, tuple) else str(client_address)
    previous = sock.gettimeout()
    sock.settimeout(timeout)
    try:
        first = sock.recv(1, socket.MSG_PEEK)
        if not first:
            return None  # connected and closed (a TCP probe)
        if first != b"\x16":  # not a TLS handshake record: most likely plain HTTP
            event(log, "tls_handshake_failed", logging.DEBUG, client=client, reason="not TLS (plain HTTP?)")
            if first.isalpha():
                sock.sendall(_PLAIN_HTTP_ANSWER)
                _close_gently(sock)
            return None
        conn = holder.get().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
    except OSError as exc:
        event(log, "tls_handshake_failed", logging.DEBUG, client=client, reason=_ssl_reason(exc))
        return None
    try:
        conn.do_handshake()
        if tls.client_allowed_sans and not _san_allowed(conn.getpeercert(), tls.client_allowed_sans):
            event(
                log,
                "tls_client_rejected",
                logging.INFO,
                client=client,
                reason="no subject alternative name of the client certificate is in client_allowed_sans",
            )
            _close_gently(conn)
            return None
        conn.settimeout(previous)
        return conn
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError; timeouts too
        event(log, "tls_handshake_failed", logging.DEBUG, client=client, reason=_ssl_reason(exc))
        _close_gently(conn)
        return None


def _close_gently(conn: socket.socket, linger: float = 1.0) -> None:
    """Close after a failed handshake so that the client reads OpenSSL's alert (e.g. "certificate
    required") rather than a reset: send FIN, then drain what the client already sent."""
    try:
        conn.shutdown(socket.SHUT_WR)  # on an SSLSocket this also drops the TLS layer
        deadline = time.monotonic() + linger
        drained = 0
        while drained < 65536:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            conn.settimeout(left)
            chunk = conn.recv(4096)
            if not chunk:
                break
            drained += len(chunk)
    except (OSError, ValueError):
        pass
    finally:
        conn.close()
