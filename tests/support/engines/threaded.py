"""In-process stand-ins for the vllm/sglang sources' behaviour tests (tests/capture/test_servers.py):
threaded HTTP servers whose behaviour a test can change between requests (slow flushes,
missing ranks, a server going away, bearer tokens). The version families, and the requests
that kill an engine, are the per-process stand-ins next to this file (`vllm_server.py`,
`sglang_server.py`).
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from support.engines.common import write_gzip_in_chunks
from support.paths import HTA
from support.patience import hang_guard

ALEXNET = HTA / "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
INFERENCE_RANK1 = HTA / "trace_file_list/inference_rank_1.json.gz"


def _rank_traces() -> list[bytes]:
    """The uncompressed JSON each stand-in rank writes: rank 0 AlexNet, rank 1 an inference trace."""
    return [gzip.decompress(ALEXNET.read_bytes()), gzip.decompress(INFERENCE_RANK1.read_bytes())]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class StandIn:
    """A stand-in profiling server on 127.0.0.1 (port 0), served from a thread.

    `blocking`: stop_profile answers only after the traces are written (what both real servers
    do); False answers first and writes afterwards (a gateway answering early, or a shared
    folder that shows the data late). Traces are gzip-compressed and written in `chunks` pieces
    `chunk_delay` seconds apart (a slow flush), or, with `write_hold`, each piece after the first
    once the test sets that event (a flush that lasts until the test says). `writes_done` counts
    the files written whole. `write_ranks`: which ranks write a file.
    """

    trace_dir: Path
    enabled: bool = True
    token: str | None = None
    blocking: bool = True
    chunks: int = 1
    chunk_delay: float = 0.0
    write_ranks: tuple[int, ...] = (0, 1)
    write_hold: threading.Event | None = None
    writes_done: int = 0
    requests: list[Recorded] = field(default_factory=list)
    gets: list[Recorded] = field(default_factory=list)
    written: dict[int, Path] = field(default_factory=dict)
    sources: dict[int, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.traces = _rank_traces()
        self._writers: list[threading.Thread] = []
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._answer("POST", self.rfile.read(length) if length else b"", standin.requests, standin.handle)

            def do_GET(self) -> None:
                self._answer("GET", b"", standin.gets, standin.handle_get)

            def _answer(
                self,
                method: str,
                body: bytes,
                log: list[Recorded],
                handle: Callable[[Recorded], tuple[int, str, bytes]],
            ) -> None:
                rec = Recorded(method, self.path, {k: v for k, v in self.headers.items()}, body)
                with standin._lock:
                    log.append(rec)
                status, ctype, payload = handle(rec)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = False  # server_close() waits for handlers still writing
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02})
        self._thread.daemon = True
        self._thread.start()

    # FastAPI's answers
    NOT_FOUND = (404, "application/json", b'{"detail":"Not Found"}')
    UNAUTHORIZED = (401, "application/json", b'{"error":"Unauthorized"}')
    INTERNAL = (500, "text/plain; charset=utf-8", b"Internal Server Error")

    def handle(self, rec: Recorded) -> tuple[int, str, bytes]:
        raise NotImplementedError

    def handle_get(self, rec: Recorded) -> tuple[int, str, bytes]:
        return self.NOT_FOUND

    def authorized(self, rec: Recorded) -> bool:
        return self.token is None or rec.headers.get("Authorization") == f"Bearer {self.token}"

    def write_traces(self, names: dict[int, Path]) -> None:
        hold = self.write_hold
        pause = None if hold is None else (lambda: hold.wait(hang_guard()))

        def write(rank: int, path: Path) -> None:
            write_gzip_in_chunks(path, self.traces[rank], self.chunks, self.chunk_delay, pause)
            with self._lock:
                self.writes_done += 1

        threads = []
        for rank, path in names.items():
            if rank not in self.write_ranks:
                continue
            self.written[rank] = path
            self.sources[rank] = self.traces[rank]
            t = threading.Thread(target=write, args=(rank, path), daemon=True)
            t.start()
            threads.append(t)
        if self.blocking:
            for t in threads:
                t.join()
        else:
            self._writers.extend(threads)

    def go_away(self) -> None:
        """The server process ends: the listening socket closes, connects are refused."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def close(self) -> None:
        if self.write_hold is not None:
            self.write_hold.set()
        for t in self._writers:
            t.join()
        if self._thread.is_alive():
            self.go_away()
        self._thread.join()

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]


@dataclass
class VllmStandIn(StandIn):
    """vLLM v0.13+ (`vllm/entrypoints/serve/profile/api_router.py`; older
    `entrypoints/openai/api_server.py` behaves the same).

    The routes exist only when profiling is enabled (`--profiler-config` with a
    `torch_profiler_dir`, or `VLLM_TORCH_PROFILER_DIR`): otherwise FastAPI's 404. POST
    /start_profile and /stop_profile take no body and answer 200 with an empty body; a second
    start, or a stop while inactive, is ignored (`WorkerProfiler.start/stop`). Each worker's
    `tensorboard_trace_handler(dir, worker_name=f"{instance_id}-rank-{rank}", use_gzip=True)`
    writes `{worker}.{time.time_ns()}.pt.trace.json.gz` during stop.
    """

    instance_id: str = "7f3a9c21"
    active: bool = False

    def handle(self, rec: Recorded) -> tuple[int, str, bytes]:
        if not self.authorized(rec):
            return self.UNAUTHORIZED
        if not self.enabled or rec.path not in ("/start_profile", "/stop_profile"):
            return self.NOT_FOUND
        if rec.path == "/start_profile":
            self.active = True
        elif self.active:
            self.active = False
            names = {
                r: self.trace_dir / f"{self.instance_id}-rank-{r}.{time.time_ns()}.pt.trace.json.gz" for r in range(2)
            }
            self.trace_dir.mkdir(parents=True, exist_ok=True)
            self.write_traces(names)
        return 200, "text/plain", b""


@dataclass
class SglangStandIn(StandIn):
    """SGLang 0.4.4-0.4.6 (`srt/entrypoints/http_server.py`, `srt/managers/scheduler.py`); the
    other version families, and the requests that kill them, are in tests/support/engines/sglang_server.py.

    GET /get_server_info reports `version` and the server arguments (`tp_size`).

    POST /start_profile takes an optional JSON `ProfileReqInput` (output_dir, num_steps,
    activities, with_stack, record_shapes, ...) and answers 200 "Start profiling.\\n"; starting
    while a profile runs raises in the tokenizer manager: 500 "Internal Server Error". POST
    /stop_profile makes every TP rank write `{profile_id}-TP-{rank}.trace.json.gz` into
    output_dir (default SGLANG_TORCH_PROFILER_DIR, else /tmp) and answers 200 "Stop profiling.
    This will take some time.\\n" after that; stop without a running profile: 500.
    `enabled=False` stands for a router or gateway that does not forward the routes (404).
    """

    in_progress: bool = False
    output_dir: Path | None = None
    profile_id: str = ""
    version: str = "0.4.6.post1"

    def handle_get(self, rec: Recorded) -> tuple[int, str, bytes]:
        if not self.enabled or rec.path != "/get_server_info":
            return self.NOT_FOUND
        info = {"version": self.version, "tp_size": 2, "dp_size": 1, "model_path": "m"}
        return 200, "application/json", json.dumps(info).encode()

    def handle(self, rec: Recorded) -> tuple[int, str, bytes]:
        if not self.authorized(rec):
            return self.UNAUTHORIZED
        if not self.enabled or rec.path not in ("/start_profile", "/stop_profile"):
            return self.NOT_FOUND
        if rec.path == "/start_profile":
            if self.in_progress:
                return self.INTERNAL
            req = json.loads(rec.body) if rec.body else {}
            self.output_dir = Path(req.get("output_dir") or self.trace_dir)
            self.profile_id = str(time.time())
            self.in_progress = True
            return 200, "text/plain", b"Start profiling.\n"
        if not self.in_progress:
            return self.INTERNAL
        self.in_progress = False
        assert self.output_dir is not None
        self.output_dir.mkdir(parents=True, exist_ok=True)
        names = {r: self.output_dir / f"{self.profile_id}-TP-{r}.trace.json.gz" for r in range(2)}
        self.write_traces(names)
        return 200, "text/plain", b"Stop profiling. This will take some time.\n"
