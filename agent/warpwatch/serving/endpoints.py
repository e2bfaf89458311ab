"""What the agent answers on each path (the HTTP handler); `serving.server` decides who gets that far.

- `/metrics`: the Prometheus text format or OpenMetrics, chosen by the scraper's `Accept` header
  (prometheus-client's `choose_encoder`), gzip-compressed when `Accept-Encoding` accepts gzip
  (`gzip;q=0` refuses it, as RFC 9110 says);
- `/healthz`: 200 while the process serves;
- `/readyz`: 200 or 503 with the reason (`Service.readiness`);
- `/evidence`: the kept windows (`--evidence-dir`) as a JSON list, oldest first, each the JSON kept
  beside its trace (`?since=&until=`: kept within these Unix times, 400 when they are not numbers);
  `/evidence/ID`: that window's trace (gzip); 503 with `Retry-After` while it is still being written
  (its id is an exemplar from the start). 404 without `--evidence-dir`, for an unknown id (one never
  kept, failed or pushed out since) and for anything that is not an id (no path is ever built from
  the request);
- `/`: a small index; anything else 404; methods other than GET and HEAD 405.

With a web config, every path first needs the basic-auth credentials (`serving.auth`): 401 with
`WWW-Authenticate` without them, 429 with `Retry-After` while the check queue is full. The
configured `http_server_config.headers` go on every response. Rendering and compression run in
a small thread pool, off the event loop.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from .. import __version__
from ..evidence.store import EvidenceStore
from ..logs import event
from .auth import AuthQueue
from .webconfig import REALM, WebConfig

log = logging.getLogger("warpwatch.http")

Render = Callable[[str], tuple[bytes, str]]
"""`Accept` header -> (body, content type): `Service.render`."""
Readiness = Callable[[], tuple[bool, str]]

INDEX = (
    b"<html><head><title>warpwatch</title></head><body><h1>warpwatch</h1>"
    b'<p><a href="/metrics">/metrics</a> <a href="/healthz">/healthz</a> '
    b'<a href="/readyz">/readyz</a></p></body></html>\n'
)
TEXT = "text/plain; charset=utf-8"


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an `Accept-Encoding` value allows gzip: `gzip` (or `x-gzip`) with a q-value above 0,
    or `*` above 0 when gzip is not listed itself (RFC 9110, 12.5.3)."""
    star: bool | None = None
    for item in accept_encoding.split(","):
        coding, _, params = item.strip().partition(";")
        coding = coding.strip().lower()
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
        if coding in ("gzip", "x-gzip"):
            return q > 0
        if coding == "*":
            star = q > 0
    return bool(star)


class Endpoints:
    """The request handler: `await endpoints.respond(request, client)` -> the response to send."""

    def __init__(
        self,
        render: Render,
        readiness: Readiness,
        web: WebConfig | None = None,
        *,
        render_workers: int = 2,
        auth_workers: int = 2,
        auth_per_client: int = 4,
        auth_total: int = 64,
        evidence: EvidenceStore | None = None,
    ) -> None:
        self.render = render
        self.evidence = evidence
        self.readiness = readiness
        self.web = web
        self.auth = (
            AuthQueue(web, workers=auth_workers, per_client=auth_per_client, total=auth_total)
            if web is not None and web.auth_required
            else None
        )
        self._pool = ThreadPoolExecutor(max_workers=render_workers, thread_name_prefix="warpwatch-render")
        self._headers = dict(web.headers) if web is not None else {}

    def _reply(
        self, status: int, body: bytes, content_type: str = TEXT, headers: dict[str, str] | None = None
    ) -> web.Response:
        all_headers = {
            "Content-Type": content_type,
            "Server": f"warpwatch/{__version__}",
            **self._headers,
            **(headers or {}),
        }
        return web.Response(status=status, body=body, headers=all_headers)

    async def respond(self, request: web.BaseRequest, client: str) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            return self._reply(405, b"method not allowed: use GET\n", headers={"Allow": "GET, HEAD"})
        if self.auth is not None:
            allowed = await self.auth.check(client, request.headers.get("Authorization"))
            if allowed is None:
                return self._reply(
                    429, b"too many authentication attempts waiting; retry later\n", headers={"Retry-After": "1"}
                )
            if not allowed:
                return self._reply(
                    401, b"unauthorized\n", headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'}
                )
        path = request.path
        if path == "/metrics":
            return await self._metrics(request)
        if path == "/healthz":
            return self._reply(200, b"ok\n")
        if path == "/readyz":
            ready, reason = self.readiness()
            return self._reply(200 if ready else 503, (reason + "\n").encode())
        if path == "/":
            return self._reply(200, INDEX, "text/html; charset=utf-8")
        if path == "/evidence" or path.startswith("/evidence/"):
            return await self._evidence(path.removeprefix("/evidence").removeprefix("/"), request.query)
        return self._reply(404, b"not found: try /metrics, /healthz or /readyz\n")

    async def _evidence(self, kid: str, query: Mapping[str, str]) -> web.Response:
        """The list of kept windows (`kid` empty; `since`/`until` in Unix seconds bound when they were
        kept) or one kept trace, read off the event loop."""
        store = self.evidence
        if store is None:
            return self._reply(404, b"not found: no evidence is kept (start the agent with --evidence-dir)\n")
        try:
            since, until = (float(query.get(k, default)) for k, default in (("since", "-inf"), ("until", "inf")))
        except ValueError:
            return self._reply(400, b"bad request: since and until are Unix times in seconds\n")

        def work() -> bytes | None:
            if not kid:
                kept = [k.meta for k in store.windows() if since <= float(k.meta.get("time", 0.0)) <= until]
                return (json.dumps(kept, indent=1) + "\n").encode()
            return store.read_trace(kid)

        body = await asyncio.get_running_loop().run_in_executor(self._pool, work)
        if body is None and store.pending(kid):
            return self._reply(
                503, b"not yet: this window's trace is still being written; try again\n", headers={"Retry-After": "1"}
            )
        if body is None:
            return self._reply(404, b"not found: no kept window has this id (GET /evidence lists them)\n")
        if not kid:
            return self._reply(200, body, "application/json")
        return self._reply(
            200, body, "application/gzip", {"Content-Disposition": f'attachment; filename="{kid}.trace.json.gz"'}
        )

    async def _metrics(self, request: web.BaseRequest) -> web.Response:
        accept = request.headers.get("Accept", "")
        gz = accepts_gzip(request.headers.get("Accept-Encoding", ""))

        def work() -> tuple[bytes, str]:
            body, content_type = self.render(accept)
            return (gzip.compress(body, compresslevel=6) if gz else body), content_type

        try:
            body, content_type = await asyncio.get_running_loop().run_in_executor(self._pool, work)
        except Exception as exc:  # a bug: answer 500, keep serving
            event(log, "scrape_failed", logging.ERROR, exc_info=exc, error=f"{type(exc).__name__}: {exc}")
            return self._reply(500, b"internal error while collecting metrics; see the agent's log\n")
        return self._reply(
            200,
            body,
            content_type,
            {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"} if gz else {"Vary": "Accept-Encoding"},
        )

    def close(self) -> None:
        """Stop the worker threads: what waits is cancelled, what runs finishes (joined)."""
        if self.auth is not None:
            self.auth.close()
        self._pool.shutdown(wait=True, cancel_futures=True)
