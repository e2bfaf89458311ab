"""TLS for the HTTP server from a loaded `WebConfig`: the SSL context, re-read when its files change
(`_ContextHolder`, checked on each new connection), and the client-SAN check.

How the agent uses it: `serving.server.HttpServer` takes the `WebConfig`, peeks at each new
connection (a plain-HTTP request to the TLS port gets "400 Client sent an HTTP request to an
HTTPS server.", as Go's servers answer), then hands it to asyncio with `_ContextHolder.get()` and a
handshake time limit, so a slow or silent client never blocks the accept loop; `serving.auth`
checks basic auth (`basicauth`) before any path is served.

Every path is protected, `/healthz` and `/readyz` included, as exporter-toolkit does. So in
Kubernetes, with TLS only, the probes need `scheme: HTTPS` (the kubelet does not verify the
certificate); with basic auth they need an `Authorization` header in `httpHeaders` (the
credential then sits in the pod spec) or `tcpSocket` probes instead; with client certificates
required, only `tcpSocket` probes work (the kubelet has no client certificate). An unauthorized
request is answered 401, and never logged with its credentials.

Secrets (passwords, hashes, private keys) never appear in errors or logs: a bad hash is reported
by user name only, a YAML syntax error by line and column only (no excerpt of the file).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import ssl
import threading
from typing import Any

from ..errors import ConfigError
from ..logs import event
from .webconfig import CIPHER_SUITES, CURVES, TLS_VERSIONS, ConfigReader, TLSServerConfig, WebConfig

log = logging.getLogger("warpwatch.webconfig")


def server_ssl_context(cfg: WebConfig) -> ssl.SSLContext | None:
    """The server-side SSL context for `cfg`, or None when the file turns TLS off."""
    return None if cfg.tls is None else build_context(cfg, cfg.tls)


class _KeyIsEncrypted(Exception):
    pass


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    raise _KeyIsEncrypted


def _load_client_ca(ctx: ssl.SSLContext, r: ConfigReader, tls: TLSServerConfig) -> None:
    """Verify clients against the configured CA (`client_ca_file` or inline `client_ca`)."""
    ca_key = f"tls_server_config.{'client_ca_file' if tls.client_ca_file else 'client_ca'}"
    try:
        if tls.client_ca_file is not None:
            ctx.load_verify_locations(cafile=tls.client_ca_file)
        else:
            ctx.load_verify_locations(cadata=tls.client_ca)
    except (ssl.SSLError, ValueError) as exc:
        raise r.fail(ca_key, f"no usable CA certificate: {_ssl_reason(exc)}") from None
    except OSError as exc:
        raise r.fail(ca_key, f"cannot read: {exc.strerror or exc}") from None
    if not ctx.get_ca_certs():
        raise r.fail(ca_key, "no CA certificate found in it")
    ctx.verify_mode = ssl.CERT_REQUIRED if tls.client_auth_type == "RequireAndVerifyClientCert" else ssl.CERT_OPTIONAL


def build_context(cfg: WebConfig, tls: TLSServerConfig) -> ssl.SSLContext:
    r = ConfigReader(cfg.path)
    k = "tls_server_config"
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.minimum_version = TLS_VERSIONS[tls.min_version]
        ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    except (ValueError, ssl.SSLError) as exc:
        raise r.fail(f"{k}.min_version", f"not supported by this OpenSSL: {exc}") from None
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file, password=_no_password)
    except _KeyIsEncrypted:
        raise r.fail(
            f"{k}.key_file",
            f"{os.fspath(tls.key_file)!r} is encrypted; give an unencrypted key (protect it with file permissions)",
        ) from None
    except ssl.SSLError as exc:
        raise r.fail(
            f"{k}.cert_file",
            f"cannot load the certificate {os.fspath(tls.cert_file)!r} with the key "
            f"{os.fspath(tls.key_file)!r}: {_ssl_reason(exc)}",
        ) from None
    except OSError as exc:
        raise r.fail(f"{k}.cert_file", f"cannot read: {exc.strerror or exc}") from None
    if tls.client_auth_type != "NoClientCert":
        _load_client_ca(ctx, r, tls)
    if tls.cipher_suites:
        names = [n for n in (CIPHER_SUITES[s] for s in tls.cipher_suites) if n is not None]
        if names:
            try:
                ctx.set_ciphers(":".join(names))
            except ssl.SSLError:
                raise r.fail(
                    f"{k}.cipher_suites",
                    f"none of these cipher suites is available in this OpenSSL ({ssl.OPENSSL_VERSION})",
                ) from None
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    for curve in tls.curve_preferences:
        try:
            ctx.set_ecdh_curve(CURVES[curve])
        except (ValueError, ssl.SSLError) as exc:
            raise r.fail(f"{k}.curve_preferences", f"{curve} is not available: {exc}") from None
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _ssl_reason(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason) if reason else str(exc)


class _ContextHolder:
    """The current SSL context, rebuilt when the certificate, key or CA files change on disk."""

    def __init__(self, cfg: WebConfig, tls: TLSServerConfig) -> None:
        self.cfg = cfg
        self.tls = tls
        self.lock = threading.Lock()
        self.stamp = self._stamp()
        self.context = build_context(cfg, tls)
        self.failed_stamp: tuple[Any, ...] | None = None

    def _stamp(self) -> tuple[Any, ...]:
        out: list[Any] = []
        for p in (self.tls.cert_file, self.tls.key_file, self.tls.client_ca_file):
            if p is None:
                continue
            try:
                st = os.stat(p)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def get(self) -> ssl.SSLContext:
        stamp = self._stamp()
        if stamp == self.stamp or stamp == self.failed_stamp:
            return self.context
        with self.lock:
            if stamp != self.stamp and stamp != self.failed_stamp:
                try:
                    self.context = build_context(self.cfg, self.tls)
                    self.stamp = stamp
                    self.failed_stamp = None
                    event(
                        log,
                        "tls_reloaded",
                        web_config=os.fspath(self.cfg.path),
                        cert_file=os.fspath(self.tls.cert_file),
                    )
                except ConfigError as exc:  # e.g. a half-written rotation: keep serving the old one
                    self.failed_stamp = stamp
                    event(
                        log,
                        "tls_reload_failed",
                        logging.WARNING,
                        error=str(exc),
                        action="kept the previous certificate",
                    )
            return self.context


def _san_allowed(cert: Any, allowed: tuple[str, ...]) -> bool:
    wanted = set(allowed)
    for kind, value in (cert or {}).get("subjectAltName", ()):
        if kind == "IP Address":
            try:
                value = str(ipaddress.ip_address(value.strip()))
            except ValueError:
                continue
        if kind in ("DNS", "IP Address", "email", "URI") and value in wanted:
            return True
    return False


PLAIN_HTTP_ANSWER = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)
"""The answer to plain HTTP on the TLS port, as Go's servers give it."""


async def peek_first_byte(sock: socket.socket) -> bytes:
    """The connection's first byte, left in the socket (b"": closed before sending anything)."""
    loop = asyncio.get_running_loop()
    while True:
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(sock.fileno(), _settle, ready)
        try:
            await ready
        finally:
            loop.remove_reader(sock.fileno())
        try:
            return sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            continue


async def answer_plain_http(sock: socket.socket) -> None:
    """`PLAIN_HTTP_ANSWER`, then what the client still sends (at most 64 KiB, 1 s a read) is read
    and dropped, so that closing does not reset the answer away."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError):
        await loop.sock_sendall(sock, PLAIN_HTTP_ANSWER)
        sock.shutdown(socket.SHUT_WR)
        drained = 0
        with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
            while drained < 65536:
                chunk = await asyncio.wait_for(loop.sock_recv(sock, 4096), 1.0)
                if not chunk:
                    break
                drained += len(chunk)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
