"""What the engine stand-ins share: an aiohttp server in its own process, and trace writing.

Each stand-in (`vllm_server.py`, `sglang_server.py`) is a separate process, started by
`launch.Engine`, so that "this request kills the server" is what it is upstream: the process
exits (SGLang sends SIGQUIT to its whole process tree when a scheduler raises), its port closes
and the test sees the exit status. The traces they write are real Kineto traces (from
shared/traces, or a CPU-only trace recorded by torch.profiler in the test run), gzipped the
way `torch.profiler`'s `export_chrome_trace(".../x.json.gz")` does: the file grows while it is
compressed, so a reader can see it incomplete.

Test-only routes (no engine has them): `GET /_standin/state` (what the stand-in did: starts,
profiles replaced, files written) and `POST /_standin/traffic` (requests arrive: forward steps
run, which step-bounded profiles wait for).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

EXIT_KILLED = 3
"""Exit status of a stand-in that a request killed (upstream: the scheduler died)."""


def base_args(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--rank-trace", action="append", required=True, help="one real trace per rank")
    p.add_argument("--write-delay", type=float, default=0.0, help="seconds before each rank's file is written")
    p.add_argument("--chunks", type=int, default=1, help="pieces each file is written in")
    p.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between pieces (a slow flush)")
    return p


def read_trace(path: str) -> bytes:
    data = Path(path).read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def write_gzip_in_chunks(
    path: Path, payload: bytes, chunks: int, chunk_delay: float, pause: Callable[[], object] | None = None
) -> None:
    """`payload` gzipped into `path` in `chunks` writes `chunk_delay` apart (or each after `pause`
    returns), as a profiler's exporter grows the file while it compresses."""
    data = gzip.compress(payload, mtime=0)
    step = -(-len(data) // chunks)
    with open(path, "wb") as f:
        for i in range(0, len(data), step):
            if i and pause is not None:
                pause()
            elif i:
                time.sleep(chunk_delay)
            f.write(data[i : i + step])
            f.flush()


class Writer:
    """Writes rank files; `pending` threads, joined when a route must answer after them."""

    def __init__(self, args: argparse.Namespace, state: dict[str, Any]) -> None:
        self.traces = [read_trace(p) for p in args.rank_trace]
        self.write_delay = args.write_delay
        self.chunks = max(1, args.chunks)
        self.chunk_delay = args.chunk_delay
        self.state = state

    def write(self, path: Path, payload: bytes, delay: float = 0.0) -> None:
        if delay:
            time.sleep(delay)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_gzip_in_chunks(path, payload, self.chunks, self.chunk_delay)
        self.state.setdefault("written", []).append(path.name)

    def write_all(self, paths: dict[int, Path], *, wait: bool, staggered: bool = False) -> list[threading.Thread]:
        """One file per rank; `staggered`: rank r waits (r + 1) x write_delay (ranks finish apart)."""
        threads = []
        for rank, path in paths.items():
            delay = self.write_delay * (rank + 1 if staggered else 1)
            t = threading.Thread(target=self.write, args=(path, self.traces[rank % len(self.traces)], delay))
            t.start()
            threads.append(t)
        if wait:
            for t in threads:
                t.join()
        return threads


def die(state: dict[str, Any], why: str) -> None:
    """The engine process ends, as upstream does when its scheduler raises."""
    print(f"stand-in: killed: {why}", file=sys.stderr, flush=True)
    os._exit(EXIT_KILLED)


def text(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/plain")


INTERNAL_ERROR = "Internal Server Error"
"""Starlette's plain-text answer to an unhandled exception (what FastAPI routes give)."""


def not_found() -> web.Response:
    return web.json_response({"detail": "Not Found"}, status=404)


def serve(app: web.Application, state: dict[str, Any]) -> None:
    """Serve on 127.0.0.1, an ephemeral port, printed as `PORT n` on stdout."""

    async def standin_state(request: web.Request) -> web.Response:
        return web.json_response({k: v for k, v in state.items() if not k.startswith("_")})

    app.router.add_get("/_standin/state", standin_state)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        port = server.sockets[0].getsockname()[1]
        print(f"PORT {port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
