"""A pass-through HTTP proxy in front of vLLM for the agent: every request is forwarded as it came
(method, path, body, content type) and timed on the monotonic clock.

vLLM 0.32 logs `Profiler started.` and `Profiler stopped successfully.` only once per process
(`info_once`), with second-resolution times, so its log cannot say when each window ran. The proxy
can: a window runs from the agent's `POST /start_profile` (as the proxy received it) to the answer to
its `POST /stop_profile` (as vLLM gave it), the span the agent itself counts as inside a window. The
stop's time from request to answer is the engine's stop time. The agent's reads of vLLM's /metrics
around each window say which span its served-latency reading counts as inside (`agent_spans`).
The proxy keeps waiting for vLLM's answer even when the agent stopped waiting or exited.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from warpwatch.capture.servers import VllmDialect
from warpwatch.capture.servers.servedlatency import histogram_sums

PROFILE_PATHS = ("/start_profile", "/stop_profile")
FORWARDED = ("content-type", "authorization", "accept")


@dataclass(frozen=True)
class Call:
    path: str
    sent: float
    answered: float
    status: int
    totals: tuple[float, float] | None = None
    """For a read of /metrics: vLLM's inter-token latency histogram, its sum and count (the
    agent's own parser, `servedlatency.histogram_sums`)."""


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    stop_s: float | None
    """The stop's request to answer; None for a window whose stop was never answered."""


class ProfileProxy:
    """`url` is what the agent is given; `calls` what it asked of the profiler."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.calls: list[Call] = []
        self._pending: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._keys = itertools.count()
        self._server = ThreadingHTTPServer(
            ("127.0.0.1", 0), _handler(self, parts.hostname or "127.0.0.1", parts.port or 80)
        )
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="proxy", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def began(self, path: str, sent: float) -> int:
        with self._lock:
            key = next(self._keys)
            self._pending[key] = (path, sent)
            return key

    def ended(self, key: int, status: int, totals: tuple[float, float] | None = None) -> None:
        with self._lock:
            path, sent = self._pending.pop(key)
            self.calls.append(Call(path, sent, time.monotonic(), status, totals))

    def _sorted(self, paths: tuple[str, ...] = PROFILE_PATHS) -> list[Call]:
        with self._lock:
            return sorted((c for c in self.calls if c.path in paths), key=lambda c: c.sent)

    def busy(self) -> bool:
        """A profiler call is waiting for vLLM, or a started window has no stop answered yet."""
        with self._lock:
            if any(path in PROFILE_PATHS for path, _ in self._pending.values()):
                return True
        calls = self._sorted()
        open_ = False
        for c in calls:
            if c.path == "/start_profile" and c.status == 200:
                open_ = True
            elif c.path == "/stop_profile":
                open_ = False
        return open_

    def windows(self, since: float, until: float) -> list[Window]:
        """Windows that began in [since, until): a successful start to the next stop's answer."""
        calls = self._sorted()
        out: list[Window] = []
        start: float | None = None
        for c in calls:
            if c.path == "/start_profile" and c.status == 200:
                start = c.sent
            elif c.path == "/stop_profile" and start is not None:
                if since <= start < until:
                    out.append(Window(start, c.answered, c.answered - c.sent))
                start = None
        if start is not None and since <= start < until:
            out.append(Window(start, until, None))
        return out

    def agent_reads(self, windows: list[Window]) -> list[tuple[Call, Call]]:
        """Per window, the agent's reads of the server's /metrics around it: its last before the
        start and its first after the stop's answer (`servedlatency`: the histogram is read just
        before a window starts and just after it ended). Windows without both are left out."""
        reads = self._sorted(("/metrics",))
        out = []
        for w in windows:
            before = [c for c in reads if c.answered <= w.start]
            after = [c for c in reads if c.sent >= w.end]
            if before and after and w.stop_s is not None:
                out.append((before[-1], after[0]))
        return out

    def agent_spans(self, windows: list[Window]) -> list[tuple[float, float]]:
        """The spans the agent counts as inside its windows, each read taken when answered."""
        return [(a.answered, b.answered) for a, b in self.agent_reads(windows)]

    def server_slowdown(self, windows: list[Window]) -> float | None:
        """What the agent's reading should find: the server's mean inter-token latency inside the
        agent's spans ÷ between them − 1, from the histogram values the proxy passed to it."""
        pairs = [(a.totals, b.totals) for a, b in self.agent_reads(windows) if a.totals and b.totals]
        inside = [(b[0] - a[0], b[1] - a[1]) for a, b in pairs]
        outside = [(nxt[0][0] - cur[1][0], nxt[0][1] - cur[1][1]) for cur, nxt in itertools.pairwise(pairs)]
        i_s, i_n = sum(v[0] for v in inside), sum(v[1] for v in inside)
        o_s, o_n = sum(v[0] for v in outside), sum(v[1] for v in outside)
        return (i_s / i_n) / (o_s / o_n) - 1.0 if i_n > 0 and o_n > 0 and o_s > 0 else None


def _handler(proxy: ProfileProxy, host: str, port: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            path = self.path.split("?", 1)[0]
            key = proxy.began(path, time.monotonic())
            status, ctype, data = _upstream(
                host,
                port,
                self.command,
                self.path,
                body,
                {k: v for k, v in self.headers.items() if k.lower() in FORWARDED},
            )
            totals = None
            if path == "/metrics" and status == 200:
                found = histogram_sums(data.decode("utf-8", "replace"), VllmDialect.inter_token_histograms)
                totals = None if found is None else (found.seconds, found.tokens)
            proxy.ended(key, status, totals)
            with contextlib.suppress(OSError):  # the agent may have given up on this call
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

    return Handler


def _upstream(
    host: str, port: int, method: str, path: str, body: bytes | None, headers: dict[str, str]
) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=900)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "application/octet-stream", resp.read()
    except (OSError, http.client.HTTPException) as exc:
        return 502, "text/plain", f"proxy: {exc}".encode()
    finally:
        conn.close()
