"""Capture through vLLM's and SGLang's profiling endpoints, against stand-in HTTP servers.

vLLM and SGLang cannot run here; the stand-ins below follow their documented endpoint
behaviour (named in each docstring) and write real Kineto traces from /work/shared/traces.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from warpwatch.capture import CapturedWindow, Source
from warpwatch.capture.files import SettleTracker, is_complete_gzip, is_complete_trace_file
from warpwatch.capture.servers import SglangSource, VllmSource
from warpwatch.errors import CaptureError, ConfigError

TRACES = Path("/work/shared/traces")
ALEXNET = TRACES / (
    "facebookresearch__HolisticTraceAnalysis/tests/data/critical_path/alexnet/"
    "benchmark_result_2869224_1695835535_trace.json.gz"
)
INFERENCE_RANK1 = (
    TRACES / "facebookresearch__HolisticTraceAnalysis/tests/data/trace_file_list/inference_rank_1.json.gz"
)
PLAIN_JSON = TRACES / "pytorch__kineto/docs/traces/after_fix_trace.json"

pytestmark = pytest.mark.skipif(not ALEXNET.exists(), reason="shared traces not present")

LOGGER = "warpwatch.capture.servers"
TOKEN = "s3cret-t0ken-value"


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
    `chunk_delay` seconds apart (a slow flush). `write_ranks`: which ranks write a file.
    """

    trace_dir: Path
    enabled: bool = True
    token: str | None = None
    blocking: bool = True
    chunks: int = 1
    chunk_delay: float = 0.0
    write_ranks: tuple[int, ...] = (0, 1)
    requests: list[Recorded] = field(default_factory=list)
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
                body = self.rfile.read(length) if length else b""
                rec = Recorded("POST", self.path, {k: v for k, v in self.headers.items()}, body)
                with standin._lock:
                    standin.requests.append(rec)
                status, ctype, payload = standin.handle(rec)
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

    def authorized(self, rec: Recorded) -> bool:
        return self.token is None or rec.headers.get("Authorization") == f"Bearer {self.token}"

    def write_traces(self, names: dict[int, Path]) -> None:
        def write(rank: int, path: Path) -> None:
            data = gzip.compress(self.traces[rank], mtime=0)
            step = -(-len(data) // self.chunks)
            with open(path, "wb") as f:
                for i in range(0, len(data), step):
                    if i:
                        time.sleep(self.chunk_delay)
                    f.write(data[i : i + step])
                    f.flush()

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
                r: self.trace_dir / f"{self.instance_id}-rank-{r}.{time.time_ns()}.pt.trace.json.gz"
                for r in range(2)
            }
            self.trace_dir.mkdir(parents=True, exist_ok=True)
            self.write_traces(names)
        return 200, "text/plain", b""


@dataclass
class SglangStandIn(StandIn):
    """SGLang v0.5 (`srt/entrypoints/http_server.py`, `srt/managers/scheduler_profiler_mixin.py`).

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


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    d = tmp_path / "profiles"
    d.mkdir()
    return d


@pytest.fixture
def standins() -> Iterator[list[StandIn]]:
    made: list[StandIn] = []
    yield made
    for s in made:
        s.close()


@pytest.fixture(autouse=True)
def _no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARPWATCH_SERVER_TOKEN", raising=False)


FAST = {"poll_interval_s": 0.05, "retry_pause_s": 0.05, "request_timeout_s": 5.0}


def _vllm(standins: list[StandIn], trace_dir: Path, **kw: Any) -> VllmStandIn:
    s = VllmStandIn(trace_dir, **kw)
    standins.append(s)
    return s


def _sglang(standins: list[StandIn], trace_dir: Path, **kw: Any) -> SglangStandIn:
    s = SglangStandIn(trace_dir, **kw)
    standins.append(s)
    return s


def _ok(windows: list[CapturedWindow]) -> list[CapturedWindow]:
    return [w for w in windows if w.path is not None]


def _check_files(windows: list[CapturedWindow], standin: StandIn) -> None:
    for w in _ok(windows):
        rank = int(w.labels["rank"])
        assert w.path == standin.written[rank]
        assert w.error is None and w.outcome is None
        assert gzip.decompress(w.path.read_bytes()) == standin.sources[rank]


# -- happy paths -------------------------------------------------------------------------


def test_vllm_two_ranks(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir)
    # Older traces already in the folder are never this window's.
    old = trace_dir / f"{server.instance_id}-rank-0.1000.pt.trace.json.gz"
    shutil.copy(ALEXNET, old)
    (trace_dir / "profiler_out_0.txt").write_text("table")
    src = VllmSource(server.url, trace_dir, delete_processed=True, **FAST)
    assert isinstance(src, Source)
    assert src.name == f"vllm:{server.url}"
    src.start()

    t0 = time.time()
    windows = src.capture(0.2, 10)
    t1 = time.time()

    assert server.paths() == ["/start_profile", "/stop_profile"]
    assert all(r.body == b"" for r in server.requests)
    assert "Authorization" not in server.requests[0].headers
    assert [w.labels for w in windows] == [{"rank": "0"}, {"rank": "1"}]
    _check_files(windows, server)
    for w in windows:
        assert w.source == src.name
        assert w.requested is not None
        start_us, stop_us = w.requested
        assert t0 * 1e6 <= start_us < stop_us <= t1 * 1e6
        assert stop_us - start_us >= 0.2e6 - 1e4
    # delete_processed: the file goes once analysed; an unprocessed window keeps it.
    windows[0].done(False)
    assert windows[0].path is not None and windows[0].path.exists()
    windows[0].done()
    assert not windows[0].path.exists()
    assert old.exists()


def test_sglang_two_ranks(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _sglang(standins, trace_dir)
    shutil.copy(ALEXNET, trace_dir / "1690000000.5-TP-0.trace.json.gz")  # an older window's
    src = SglangSource(server.url, trace_dir, **FAST)
    assert src.name == f"sglang:{server.url}"

    windows = src.capture(0.1, 10)

    assert server.paths() == ["/start_profile", "/stop_profile"]
    start = server.requests[0]
    assert start.headers["Content-Type"] == "application/json"
    assert json.loads(start.body) == {
        "output_dir": str(trace_dir),
        "activities": ["GPU"],
        "with_stack": False,
        "record_shapes": False,
    }
    assert [w.labels for w in windows] == [{"rank": "0"}, {"rank": "1"}]
    _check_files(windows, server)
    assert all(w.path is not None and w.path.name.startswith(server.profile_id) for w in windows)


def test_sglang_server_side_folder(tmp_path: Path, standins: list[StandIn]) -> None:
    """output_dir is the folder as the server sees it; the agent reads its own mount of it."""
    agent_view = tmp_path / "agent-mount"
    agent_view.mkdir()
    server = _sglang(standins, agent_view)
    src = SglangSource(server.url, agent_view, server_trace_dir="/srv/profiles", **FAST)
    server_dir_seen: list[Any] = []
    real_handle = server.handle

    def handle(rec: Recorded) -> tuple[int, str, bytes]:
        if rec.path == "/start_profile":
            server_dir_seen.append(json.loads(rec.body)["output_dir"])
            rec = Recorded(
                rec.method, rec.path, rec.headers, json.dumps({"output_dir": str(agent_view)}).encode()
            )
        return real_handle(rec)

    server.handle = handle  # type: ignore[method-assign]
    windows = src.capture(0.05, 10)
    assert server_dir_seen == ["/srv/profiles"]
    assert len(_ok(windows)) == 2


# -- profiling disabled ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "hints"),
    [
        ("vllm", ["--profiler-config", "torch_profiler_dir", "VLLM_TORCH_PROFILER_DIR"]),
        ("sglang", ["SGLANG_TORCH_PROFILER_DIR", "output_dir"]),
    ],
)
def test_disabled_logs_once_and_backs_off(
    kind: str, hints: list[str], trace_dir: Path, standins: list[StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    if kind == "vllm":
        server: StandIn = _vllm(standins, trace_dir, enabled=False)
        src: VllmSource | SglangSource = VllmSource(server.url, trace_dir, backoff_s=60, **FAST)
    else:
        server = _sglang(standins, trace_dir, enabled=False)
        src = SglangSource(server.url, trace_dir, backoff_s=60, **FAST)

    first = src.capture(0.05, 5)
    assert len(first) == 1 and first[0].path is None and first[0].outcome == "failed"
    assert first[0].error is not None and "404" in first[0].error
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    line = warnings[0].getMessage()
    assert "\n" not in line and "disabled" in line
    for hint in hints:
        assert hint in line
    assert warnings[0].exc_info is None

    # Backing off: the next window sends nothing at all.
    assert src.capture(0.05, 5) == []
    assert server.paths() == ["/start_profile"]
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


def test_backoff_doubles_and_recovers(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir, enabled=False)
    src = VllmSource(server.url, trace_dir, backoff_s=0.15, max_backoff_s=10, **FAST)
    assert src.capture(0.01, 5)[0].outcome == "failed"  # next try after 0.15 s
    time.sleep(0.2)
    assert src.capture(0.01, 5)[0].outcome == "failed"  # now 0.3 s
    time.sleep(0.2)
    assert src.capture(0.01, 5) == []
    assert len(server.requests) == 2
    time.sleep(0.15)
    server.enabled = True  # profiling switched on (server restarted with the flag)
    windows = src.capture(0.05, 10)
    assert len(_ok(windows)) == 2
    assert server.paths()[-2:] == ["/start_profile", "/stop_profile"]


# -- slow flush --------------------------------------------------------------------------


@pytest.mark.parametrize("blocking", [True, False], ids=["stop-waits", "stop-answers-early"])
def test_slow_flush_waits_then_succeeds(trace_dir: Path, standins: list[StandIn], blocking: bool) -> None:
    server = _vllm(standins, trace_dir, blocking=blocking, chunks=5, chunk_delay=0.2)
    src = VllmSource(server.url, trace_dir, flush_timeout_s=15, **FAST)
    t = time.monotonic()
    windows = src.capture(0.05, 30)
    assert time.monotonic() - t >= 0.8  # it did wait for the flush
    assert [w.labels for w in windows] == [{"rank": "0"}, {"rank": "1"}]
    _check_files(windows, server)


@pytest.mark.parametrize("blocking", [True, False], ids=["stop-waits", "stop-answers-early"])
def test_too_slow_flush_times_out(
    trace_dir: Path, standins: list[StandIn], blocking: bool, caplog: pytest.LogCaptureFixture
) -> None:
    server = _vllm(standins, trace_dir, blocking=blocking, chunks=6, chunk_delay=0.4)
    src = VllmSource(server.url, trace_dir, flush_timeout_s=0.6, **FAST)
    t = time.monotonic()
    windows = src.capture(0.05, 30)
    assert time.monotonic() - t < 2.0  # bounded by flush_timeout_s, not by the writer
    assert windows
    assert all(w.path is None and w.outcome == "timed_out" for w in windows)
    assert all(w.error and ("incomplete" in w.error or "no new trace file" in w.error) for w in windows)
    assert any(r.levelno == logging.WARNING for r in caplog.records)


def test_flush_bounded_by_service_timeout(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir, blocking=False, chunks=4, chunk_delay=0.5)
    src = VllmSource(server.url, trace_dir, flush_timeout_s=60, **FAST)
    t = time.monotonic()
    windows = src.capture(0.05, 0.5)
    assert time.monotonic() - t < 1.5
    assert all(w.outcome == "timed_out" for w in windows)


# -- missing rank, server gone -----------------------------------------------------------


def test_missing_rank_file(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _sglang(standins, trace_dir, write_ranks=(0,))
    src = SglangSource(server.url, trace_dir, expected_files=2, flush_timeout_s=0.5, **FAST)
    windows = src.capture(0.05, 10)
    assert len(windows) == 2
    ok, missing = windows
    assert ok.labels == {"rank": "0"} and ok.path == server.written[0]
    assert missing.labels == {"rank": "1"}
    assert missing.path is None and missing.outcome == "timed_out"
    assert missing.error is not None and "rank 1" in missing.error


def test_expected_files_all_present_returns_early(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _sglang(standins, trace_dir)
    src = SglangSource(server.url, trace_dir, expected_files=2, flush_timeout_s=20, **FAST)
    t = time.monotonic()
    windows = src.capture(0.05, 30)
    assert time.monotonic() - t < 2
    assert len(_ok(windows)) == 2


def test_server_goes_away_mid_window(
    trace_dir: Path, standins: list[StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    server = _vllm(standins, trace_dir)
    src = VllmSource(server.url, trace_dir, backoff_s=60, max_retries=2, **FAST)
    threading.Timer(0.1, server.go_away).start()
    windows = src.capture(0.4, 10)
    assert len(windows) == 1
    (w,) = windows
    assert w.path is None and w.outcome == "failed"
    assert w.error is not None and "went away mid-window" in w.error and "/stop_profile" in w.error
    assert "refused" in w.error and "3 attempts" in w.error
    assert server.paths() == ["/start_profile"]
    assert not any(r.exc_info for r in caplog.records)  # one line, no traceback
    assert [r.levelno for r in caplog.records if r.levelno >= logging.WARNING] == [logging.WARNING]
    t = time.monotonic()
    assert src.capture(0.4, 10) == []  # backing off: no connection attempt, no wait
    assert time.monotonic() - t < 0.1


def test_unreachable_server_fails_and_backs_off(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir)
    url = server.url
    server.go_away()
    src = VllmSource(url, trace_dir, max_retries=1, **FAST)
    (w,) = src.capture(0.05, 5)
    assert w.outcome == "failed" and w.error is not None
    assert "cannot reach the server" in w.error and "2 attempts" in w.error
    assert src.capture(0.05, 5) == []


def test_start_refused_with_error(trace_dir: Path, standins: list[StandIn]) -> None:
    """SGLang answers 500 when a profile (someone else's) is already running."""
    server = _sglang(standins, trace_dir)
    server.in_progress = True
    server.output_dir = trace_dir
    src = SglangSource(server.url, trace_dir, **FAST)
    (w,) = src.capture(0.05, 5)
    assert w.outcome == "failed" and w.error is not None and "HTTP 500" in w.error
    assert server.paths() == ["/start_profile"]  # we never stop a session we did not start


def test_close_mid_window_stops_profiling(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir)
    src = VllmSource(server.url, trace_dir, **FAST)
    threading.Timer(0.1, src.close).start()
    t = time.monotonic()
    assert src.capture(30, 10) == []
    assert time.monotonic() - t < 2
    assert server.paths() == ["/start_profile", "/stop_profile"]
    assert not server.active


# -- bearer token ------------------------------------------------------------------------


def test_bearer_token_sent_never_logged(
    trace_dir: Path,
    standins: list[StandIn],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    monkeypatch.setenv("GATEWAY_TOKEN", TOKEN)
    server = _sglang(standins, trace_dir, token=TOKEN)
    src = SglangSource(server.url, trace_dir, token_env="GATEWAY_TOKEN", **FAST)
    windows = src.capture(0.05, 10)
    assert len(_ok(windows)) == 2
    assert [r.headers.get("Authorization") for r in server.requests] == [f"Bearer {TOKEN}"] * 2
    assert TOKEN not in caplog.text
    assert all(TOKEN not in (w.error or "") for w in windows)


def test_missing_token_is_explained(
    trace_dir: Path, standins: list[StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    server = _vllm(standins, trace_dir, token=TOKEN)
    src = VllmSource(server.url, trace_dir, **FAST)
    (w,) = src.capture(0.05, 5)
    assert w.outcome == "failed" and w.error is not None
    assert "401" in w.error and "WARPWATCH_SERVER_TOKEN" in w.error and "is not set" in w.error
    assert server.paths() == ["/start_profile"]


# -- configuration and labels ------------------------------------------------------------


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        VllmSource("localhost:8000", tmp_path)
    with pytest.raises(ConfigError):
        VllmSource("http://localhost:8000", tmp_path, flush_timeout_s=0)
    with pytest.raises(ConfigError):
        SglangSource("http://localhost:30000", tmp_path, activities=["CPU"])
    with pytest.raises(ConfigError):
        SglangSource("http://localhost:30000", tmp_path, expected_files=0)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(CaptureError):
        VllmSource("http://localhost:8000", not_a_dir).start()
    VllmSource("http://localhost:8000/", tmp_path / "later").start()  # created by the server later


def test_labels_from_file_names(tmp_path: Path) -> None:
    v = VllmSource("http://h:1", tmp_path)
    assert v._labels_for("0a1b-rank-3.1723456789123456789.pt.trace.json.gz") == {"rank": "3"}
    assert v._labels_for("gpu-node-7_4242.1723456789123456789.pt.trace.json.gz") == {
        "process": "gpu-node-7_4242"
    }
    assert v._labels_for("worker0.pt.trace.json") == {"process": "worker0"}
    s = SglangSource("http://h:1", tmp_path)
    assert s._labels_for("1723456789.123-TP-1.trace.json.gz") == {"rank": "1"}
    assert s._labels_for("exp-1723456789.123-TP-2-DP-1-EP-3.trace.json.gz") == {
        "rank": "2",
        "dp_rank": "1",
        "ep_rank": "3",
    }
    assert s._labels_for("rank0.trace.json.gz") == {"process": "rank0"}
    assert not s._is_trace_name("merged-1723.1.trace.json.gz")
    assert not s._is_trace_name("1723.1-TP-0-memory.pickle")


# -- is_complete_trace_file --------------------------------------------------------------


def test_complete_gzip(tmp_path: Path) -> None:
    p = tmp_path / "a.pt.trace.json.gz"
    shutil.copy(ALEXNET, p)
    assert is_complete_trace_file(p) and is_complete_gzip(p)


def test_truncated_gzip(tmp_path: Path) -> None:
    data = ALEXNET.read_bytes()
    for cut in (1, 10, len(data) // 2, len(data) - 4, len(data) - 1):
        p = tmp_path / f"t{cut}.json.gz"
        p.write_bytes(data[:cut])
        assert not is_complete_trace_file(p), cut


def test_growing_gzip(tmp_path: Path) -> None:
    p = tmp_path / "growing.pt.trace.json.gz"
    payload = gzip.decompress(ALEXNET.read_bytes())
    with open(p, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb") as gz:
        gz.write(payload[: len(payload) // 2])
        gz.flush()  # a readable prefix, no trailer yet
        raw.flush()
        assert not is_complete_trace_file(p)
        gz.write(payload[len(payload) // 2 :])
        gz.flush()
        raw.flush()
        assert not is_complete_trace_file(p)
    assert is_complete_trace_file(p)


def test_gzip_edge_cases(tmp_path: Path) -> None:
    data = ALEXNET.read_bytes()
    bad_crc = bytearray(data)
    bad_crc[-6] ^= 0xFF
    cases = {
        "bad-crc": (bytes(bad_crc), False),
        "two-members": (data + gzip.compress(b'{"x": 1}'), True),
        "zero-padding": (data + b"\0" * 512, True),
        "garbage-after": (data + b"garbage", False),
        "half-second-member": (data + gzip.compress(b'{"x": 1}')[:10], False),
        "not-gzip": (b'{"traceEvents": []}', False),
        "empty": (b"", False),
    }
    for name, (content, expected) in cases.items():
        p = tmp_path / f"{name}.json.gz"
        p.write_bytes(content)
        assert is_complete_gzip(p) is expected, name
    assert not is_complete_trace_file(tmp_path / "missing.json.gz")


def test_large_gzip_streamed(tmp_path: Path) -> None:
    """Output far larger than the decompressor's per-call limit (4 MiB per call)."""
    payload = b'{"traceEvents": [' + b'{"ph": "X", "cat": "kernel"},' * 600_000 + b"{}]}"
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = comp.compress(payload) + comp.flush()
    p = tmp_path / "big.json.gz"
    p.write_bytes(data)
    assert is_complete_gzip(p)
    p.write_bytes(data[:-3])
    assert not is_complete_gzip(p)


def test_json_traces(tmp_path: Path) -> None:
    p = tmp_path / "trace.json"
    shutil.copy(PLAIN_JSON, p)
    assert is_complete_trace_file(p)
    text = PLAIN_JSON.read_bytes()
    p.write_bytes(text[: len(text) // 2])
    assert not is_complete_trace_file(p)
    p.write_bytes(b"")
    assert not is_complete_trace_file(p)
    tmp = tmp_path / "trace.json.tmp"
    shutil.copy(PLAIN_JSON, tmp)
    assert not is_complete_trace_file(tmp)
    other = tmp_path / "trace.txt"
    shutil.copy(PLAIN_JSON, other)
    assert not is_complete_trace_file(other)


def test_settle_tracker(tmp_path: Path) -> None:
    p = tmp_path / "x.json.gz"
    data = ALEXNET.read_bytes()
    p.write_bytes(data[:100])
    tracker = SettleTracker()
    assert not tracker.observe(p)  # first sight
    assert not tracker.observe(p)  # stable but incomplete
    with open(p, "ab") as f:
        f.write(data[100:])
    os.utime(p, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert not tracker.observe(p)  # changed
    assert tracker.observe(p)  # stable and complete
    assert tracker.size(p) == len(data)
    p.unlink()
    assert not tracker.observe(p)
