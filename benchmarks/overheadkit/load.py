"""The steady load: `streams` threads, each sending one completion after the other (closed
loop; streamed, or whole with `LoadShape(stream=False)`) with a fixed prompt length (token ids
drawn from a seeded generator), a fixed output length (`max_tokens`, `min_tokens` and
`ignore_eos`) and greedy sampling.

Every chunk a stream receives is timed on the monotonic clock with the tokens it carries (the
server's running `usage.completion_tokens`, `continuous_usage_stats`), so a chunk holding two
tokens counts two. What was received is kept per request (`Request`).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

READ_TIMEOUT_S = 600.0
"""A stop with stacks on stalls the server for minutes: the client waits."""


@dataclass
class Request:
    stream: int
    sent: float
    chunks: list[tuple[float, int]] = field(default_factory=list)
    """(arrival, tokens in this chunk), in order."""
    error: str | None = None

    @property
    def first(self) -> float | None:
        return self.chunks[0][0] if self.chunks else None


@dataclass(frozen=True)
class LoadShape:
    streams: int = 4
    prompt_tokens: int = 32
    output_tokens: int = 32
    seed: int = 0
    vocab: int = 1024
    stream: bool = True
    """False: each completion comes whole, its tokens counted when it arrives (a non-streaming client)."""


class StreamLoad:
    """The load generator against `url` (an OpenAI-compatible server) serving `model`."""

    def __init__(self, url: str, model: str, shape: LoadShape) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.model = model
        self.shape = shape
        self.requests: list[Request] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"load-{i}", daemon=True) for i in range(shape.streams)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(READ_TIMEOUT_S)

    def errors(self) -> int:
        return sum(r.error is not None for r in self.requests)

    def _body(self, rng: random.Random) -> bytes:
        s = self.shape
        prompt = [rng.randrange(3, s.vocab) for _ in range(s.prompt_tokens)]  # 0-2: <unk>, <s>, </s>
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": s.output_tokens,
            "min_tokens": s.output_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": s.stream,
        }
        if s.stream:
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        return json.dumps(body).encode()

    def _run(self, stream: int) -> None:
        rng = random.Random(self.shape.seed * 1_000_003 + stream)
        while not self._stop.is_set():
            # A connection per request (as tests/support/vllmreal's load, which never saw an
            # error): on a kept-alive one a request sent as the server closes it (uvicorn's 5-s
            # keep-alive) fails with RemoteDisconnected, a client artefact. One error in CI's
            # duty10 arm (its text not kept then: now `error_kinds`) was likely that.
            conn = http.client.HTTPConnection(self.host, self.port, timeout=READ_TIMEOUT_S)
            req = Request(stream, time.monotonic())
            self.requests.append(req)
            try:
                self._one(conn, self._body(rng), req)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                req.error = f"{type(exc).__name__}: {exc}"
                self._stop.wait(0.5)
            finally:
                conn.close()

    def _one(self, conn: http.client.HTTPConnection, body: bytes, req: Request) -> None:
        conn.request(
            "POST", "/v1/completions", body=body, headers={"Content-Type": "application/json", "Connection": "close"}
        )
        resp = conn.getresponse()
        if resp.status != 200:
            raise ValueError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
        if not self.shape.stream:
            doc = json.loads(resp.read())
            req.chunks.append((time.monotonic(), int(doc["usage"]["completion_tokens"])))
            return
        seen = 0
        while line := resp.readline():
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            now = time.monotonic()
            doc = json.loads(line[6:])
            usage = doc.get("usage") or {}
            total = usage.get("completion_tokens")
            got = (total - seen) if isinstance(total, int) else int(bool(doc.get("choices")))
            if got > 0:
                req.chunks.append((now, got))
                seen += got
        with contextlib.suppress(OSError):
            resp.close()

    def wait_steady(self, quiet_s: float = 2.0, max_gap_s: float = 1.0, timeout_s: float = 600.0) -> float:
        """Waits until, for `quiet_s`, no stream went more than `max_gap_s` without a chunk; returns
        the end of that quiet span (the moment it was seen)."""
        deadline = time.monotonic() + timeout_s
        since = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = time.monotonic()
            if self._longest_silence(now) > max_gap_s:
                since = now
            elif now - since >= quiet_s:
                return now
        raise RuntimeError(f"the load did not flow steadily within {timeout_s:g} s ({self.errors()} errors)")

    def _longest_silence(self, now: float) -> float:
        last: dict[int, float] = {}
        for r in self.requests[-4 * self.shape.streams :]:
            t = r.chunks[-1][0] if r.chunks else r.sent
            last[r.stream] = max(last.get(r.stream, 0.0), t)
        return max((now - t for t in last.values()), default=float("inf"))
