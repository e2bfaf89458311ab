"""The HTTP client of the profiling-server sources (`servers`): one request, with retries only
for attempts that never reached the server.

Connection attempts that never reached the server (refused, unreachable) are retried
`max_retries` times with a short doubling pause; requests that may have reached it (time-out,
reset) are not repeated: a start that reached the server twice could start two sessions. A
bearer token is read from the environment variable `token_env` at each request and sent as
`Authorization: Bearer ...`; it is never logged. Redirects are not followed (the token must not
travel to another host) and no HTTP proxy is used. Bodies are read up to `MAX_BODY` bytes: a
hostile or broken server cannot make the agent buffer more.
"""

from __future__ import annotations

import errno
import http.client
import json
import logging
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from .clock import WindowClock

log = logging.getLogger("warpwatch.capture.servers")

MAX_BODY = 1 << 20
"""Bytes of an answer read at most (SGLang's server info is a few KiB)."""


@dataclass(frozen=True)
class Reply:
    status: int
    reason: str
    body: str
    """The answer's text, whitespace folded, cut to 200 characters (for messages)."""
    raw: bytes = b""
    """The answer's bytes, up to `MAX_BODY` (for parsing)."""

    def json(self) -> object:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.raw)
        except ValueError:
            return None


class RequestFailed(Exception):
    """No HTTP answer. `delivered`: the request may have reached the server."""

    def __init__(self, message: str, *, delivered: bool, timed_out: bool = False) -> None:
        super().__init__(message)
        self.delivered = delivered
        self.timed_out = timed_out


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: object,
        code: int,
        msg: str,
        headers: object,
        newurl: str,
    ) -> None:
        return None  # the 3xx surfaces as an HTTPError: a redirect would carry the token along


def excerpt(raw: bytes, limit: int = 200) -> str:
    text = " ".join(raw.decode("utf-8", errors="replace").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe_oserror(err: BaseException) -> str:
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, socket.gaierror):
        return f"cannot resolve host ({err.strerror or err})"
    if isinstance(err, TimeoutError):
        return "timed out"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror.lower()
    return str(err) or type(err).__name__


_NOT_DELIVERED_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ENETUNREACH,
    errno.EHOSTUNREACH,
    errno.EADDRNOTAVAIL,
    errno.ENOENT,
}


class ServerClient:
    """Requests to one server; `closed` interrupts the retry pauses."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        token_env: str,
        max_retries: int,
        retry_pause_s: float,
        closed: threading.Event,
        clock: WindowClock,
    ) -> None:
        self.name = name
        self.url = url
        self.token_env = token_env
        self.max_retries = max_retries
        self.retry_pause_s = retry_pause_s
        self._closed = closed
        self.clock = clock
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        timeout: float,
        deadline: float | None = None,
        *,
        wait_past_deadline: bool = False,
    ) -> Reply:
        """One request, retried while the attempts never reached the server; with a `deadline`
        (a time on `clock`), no retry starts after it, and no attempt waits past it unless
        `wait_past_deadline` (then each attempt waits for its answer up to `timeout`)."""
        attempt = 0
        while True:
            left = timeout if deadline is None or wait_past_deadline else min(timeout, deadline - self.clock.now())
            try:
                return self.request_once(method, path, body, max(left, 0.001))
            except RequestFailed as exc:
                pause = self.retry_pause_s * (2**attempt)
                late = deadline is not None and self.clock.now() + pause >= deadline
                if exc.delivered or attempt >= self.max_retries or self._closed.is_set() or late:
                    if attempt:
                        raise RequestFailed(
                            f"{exc} (after {attempt + 1} attempts)",
                            delivered=exc.delivered,
                            timed_out=exc.timed_out,
                        ) from None
                    raise
                log.debug("%s: %s %s: %s; retrying in %.2f s", self.name, method, path, exc, pause)
                attempt += 1
                if self.clock.sleep(self._closed, pause):
                    raise

    def request_once(self, method: str, path: str, body: bytes | None, timeout: float) -> Reply:
        data = None if method == "GET" else (body if body is not None else b"")
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if body is not None:
            req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json, text/plain, */*")
        token = os.environ.get(self.token_env, "").strip()
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                raw = resp.read(MAX_BODY)
                return Reply(resp.status, str(resp.reason), excerpt(raw[:4096]), raw)
        except urllib.error.HTTPError as err:
            try:
                raw = err.read(MAX_BODY)
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                err.close()
            return Reply(err.code, str(err.reason), excerpt(raw[:4096]), raw)
        except urllib.error.URLError as err:
            # Raised while connecting or sending the request (urllib wraps only that step):
            # refused, unreachable or a connect time-out mean the server never saw it.
            reason = err.reason
            delivered = not (
                isinstance(reason, (ConnectionRefusedError, socket.gaierror, TimeoutError))
                or (isinstance(reason, OSError) and reason.errno in _NOT_DELIVERED_ERRNOS)
            )
            what = _describe_oserror(reason) if isinstance(reason, BaseException) else str(reason)
            raise RequestFailed(what, delivered=delivered) from None
        except TimeoutError:
            raise RequestFailed(f"no answer within {timeout:g} s", delivered=True, timed_out=True) from None
        except (http.client.RemoteDisconnected, ConnectionError) as err:
            raise RequestFailed(f"connection closed by the server ({_describe_oserror(err)})", delivered=True) from None
        except (OSError, http.client.HTTPException) as err:
            raise RequestFailed(_describe_oserror(err), delivered=True) from None


class InFlight:
    """One request awaited in its own thread, so that its answer is never given up on: a caller
    waits for it a while (`wait`), and looks again later (`done`). A stop whose answer is not
    awaited cannot tell when the server has ended the session (vLLM answers after its flush, which
    can take minutes), and a start sent then is queued behind the flush and begins a session
    nobody asked for at that time."""

    def __init__(
        self, client: ServerClient, method: str, path: str, body: bytes | None, timeout: float, retry_deadline: float
    ) -> None:
        self.path = path
        self._clock = client.clock
        self.reply: Reply | None = None
        self.error: RequestFailed | None = None
        self.started_at = time.monotonic()
        self.ended_at: float | None = None
        """When the request ended (answered or failed), on the monotonic clock."""
        self._done = threading.Event()

        def run() -> None:
            try:
                self.reply = client.request(method, path, body, timeout, retry_deadline, wait_past_deadline=True)
            except RequestFailed as exc:
                self.error = exc
            except Exception as exc:  # the thread must always report an end
                self.error = RequestFailed(f"{type(exc).__name__}: {exc}", delivered=True)
            finally:
                self.ended_at = time.monotonic()
                self._done.set()

        threading.Thread(target=run, name=f"server-request {client.name} {path}", daemon=True).start()

    def wait(self, timeout_s: float) -> bool:
        """Whether the request has ended (answered or failed) within `timeout_s`."""
        return self._clock.await_answer(self._done, timeout_s)

    def done(self) -> bool:
        return self._done.is_set()

    def seconds(self) -> float | None:
        """How long the request took, once it ended."""
        return None if self.ended_at is None else self.ended_at - self.started_at


def reply_error(reply: Reply) -> str | None:
    """None for a success; else what the answer says went wrong."""
    if not 200 <= reply.status < 300:
        detail = f": {reply.body}" if reply.body else ""
        return f"HTTP {reply.status} {reply.reason}{detail}"
    doc = reply.json() if reply.raw.lstrip().startswith(b"{") else None
    if isinstance(doc, dict) and (doc.get("success") is False or doc.get("error")):
        return f"HTTP {reply.status} with an error body: {reply.body}"
    return None
