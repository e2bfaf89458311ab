"""`warpwatch run`: the long-running agent. Wires capture -> trace -> analysis -> export.

    Service(config).run()  =  startup() -> wait for SIGTERM/SIGINT -> shutdown()

- startup: build and start the sources (`capture.registry`), start NVML (optional), bind the
  HTTP server, start an APScheduler 3 `BackgroundScheduler` with one interval job per `period`
  (`max_instances=1`, `coalesce=True`, `jitter`), the first one at once.
- each round (`run_round`, in its own daemon thread, off the scrape path): NVML sample, every
  source's `capture(window, collect_timeout)` (sources side by side), NVML sample; then every
  `CapturedWindow` is read and analysed, counted by outcome (ok, empty = no kernel launches,
  failed, timed_out), logged in one line and released with `done()`; the round's analyses
  are merged into a new `Snapshot` that replaces the old one in one reference swap. A failing
  window changes no gauge, and no exception leaves a round (it is logged and counted).
- HTTP: `/metrics` (Prometheus text or OpenMetrics, by the scraper's Accept header, gzip
  when accepted), `/healthz` (200 while the process serves), `/readyz` (200 until the first
  round is overdue and afterwards while rounds keep finishing on time; 503 with the reason
  otherwise, and while shutting down).
- shutdown: the round in progress gets `window + 5 s` to finish, then its sources are closed
  (abandoning it); the HTTP server stops; exit status 0.
"""

from __future__ import annotations

import argparse
import gzip
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from . import __version__
from .analysis import analyze
from .capture import CapturedWindow, Outcome, Source
from .config import Config, add_arguments, describe, load_config
from .errors import TraceError, WarpwatchError
from .export import GpuInfo, NvmlSample, Snapshot, SnapshotBuilder, SnapshotCollector, WindowResult
from .logs import configure, event
from .model import DeviceProperties
from .nvml import Nvml, NvmlReading
from .trace import load_gpu_properties, read_trace
from .webconfig import WebConfig, authorize, load_web_config, secure_server

log = logging.getLogger("warpwatch.service")

SHUTDOWN_GRACE_S = 5.0
"""Beyond the window itself, how long shutdown waits for the round in progress."""
CAPTURE_GRACE_S = 5.0
"""Beyond window + collect_timeout, how long a round waits for a source's capture."""
READY_SLACK_S = 10.0


class _DaemonThreadExecutor:
    """APScheduler executor running each job in a new daemon thread.

    The stock thread pool's workers are joined at interpreter exit, so a round stuck in a
    capture would keep the process alive after SIGTERM; a daemon thread cannot.
    """

    def __new__(cls) -> Any:
        from apscheduler.executors.base import BaseExecutor, run_job

        class Executor(BaseExecutor):  # type: ignore[misc]
            def _do_submit_job(self, job: Any, run_times: Any) -> None:
                def target() -> None:
                    try:
                        events = run_job(job, job._jobstore_alias, run_times, self._logger.name)
                    except BaseException as exc:
                        self._run_job_error(job.id, exc, exc.__traceback__)
                    else:
                        self._run_job_success(job.id, events)

                threading.Thread(target=target, name="warpwatch-round", daemon=True).start()

        return Executor()


def process_identity(cw: CapturedWindow, rank: int | None) -> str:
    """Which traced process a window came from: windows of one process are pooled over time."""
    labels = ",".join(f"{k}={v}" for k, v in sorted(cw.labels.items()))
    return f"{cw.source}|{labels}|rank={'' if rank is None else rank}"


class Service:
    """The agent: startup -> rounds on a schedule -> shutdown (module doc)."""

    def __init__(
        self,
        config: Config,
        *,
        sources: Sequence[Source] | None = None,
        nvml: Nvml | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._build_sources = sources is None
        self.sources: list[Source] = list(sources) if sources is not None else []
        self.nvml = nvml if nvml is not None else Nvml()
        self.clock = clock
        self.registry = CollectorRegistry()
        """The warpwatch_* metrics: the current snapshot, rendered once per snapshot and format."""
        self.collector = SnapshotCollector()
        self.registry.register(self.collector)
        self.self_registry = CollectorRegistry()
        """The agent's own footprint (RSS, CPU, GC), next to what it measures; rendered per scrape."""
        ProcessCollector(registry=self.self_registry)
        PlatformCollector(registry=self.self_registry)
        GCCollector(registry=self.self_registry)
        self._rendered: dict[str, tuple[Snapshot, bytes]] = {}
        self.builder = SnapshotBuilder(top_kernels=config.top_kernels, capture_duty=config.duty)
        self.collector.publish(self.builder.snapshot())
        self._gpu_properties: dict[int, DeviceProperties] | None = None
        self._server: ThreadingHTTPServer | None = None
        self.web: WebConfig | None = None
        """TLS / basic auth for every HTTP path (exporter-toolkit web config), when configured."""
        self._server_thread: threading.Thread | None = None
        self._scheduler: Any = None
        self._stopping = threading.Event()
        self._round_lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._busy_sources: set[int] = set()
        self._busy_lock = threading.Lock()
        self._started_at: float | None = None
        self._last_round_end: float | None = None
        self._rounds = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None, "not started"
        return int(self._server.server_address[1])

    def startup(self) -> None:
        """Start everything; raise WarpwatchError (nothing left running) when that is impossible."""
        c = self.config
        event(log, "starting", version=__version__, **describe(c))
        if c.web_config is not None:
            self.web = load_web_config(c.web_config)
        if c.gpu_properties is not None:
            self._gpu_properties = load_gpu_properties(c.gpu_properties)
        try:
            self._start_sources()
            if self.nvml.start():
                self._publish_nvml(NvmlReading(True))
            self._start_http()
        except BaseException:
            self._close_sources()
            self.nvml.close()
            raise
        self._started_at = self.clock()
        self._start_scheduler()

    def _start_sources(self) -> None:
        if self._build_sources:
            from .capture.registry import build_source

            self.sources = [build_source(spec, self.config) for spec in self.config.source]
        for src in self.sources:
            src.start()
            event(log, "source_started", source=src.name)

    def _start_http(self) -> None:
        c = self.config
        handler = _make_handler(self)
        try:
            server = ThreadingHTTPServer((c.address, c.port), handler)
        except OSError as exc:
            raise WarpwatchError(
                f"cannot listen on {c.address}:{c.port}: {exc.strerror or exc}; "
                "choose another address or port with --address / --port") from None
        server.daemon_threads = True
        if self.web is not None:
            secure_server(server, self.web)
        self._server = server
        self._server_thread = threading.Thread(target=server.serve_forever, name="warpwatch-http", daemon=True)
        self._server_thread.start()
        host = c.address
        scheme = "https" if self.web is not None and self.web.tls is not None else "http"
        event(log, "listening", address=host, port=self.port,
              url=f"{scheme}://{'localhost' if host in ('0.0.0.0', '::') else host}:{self.port}/metrics")

    def _start_scheduler(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        c = self.config
        scheduler = BackgroundScheduler(
            executors={"default": _DaemonThreadExecutor()},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=timezone.utc,
        )
        scheduler.add_job(
            self.run_round,
            IntervalTrigger(seconds=c.period, jitter=c.jitter or None, timezone=timezone.utc),
            id="round",
            name="capture window",
            next_run_time=datetime.now(timezone.utc),
        )
        scheduler.start()
        self._scheduler = scheduler

    def run(self, stop: threading.Event | None = None) -> int:
        """startup, wait until `stop` is set (or SIGTERM/SIGINT), shutdown; returns 0."""
        stop = stop or threading.Event()
        with handle_signals(stop):
            self.startup()
            try:
                while not stop.wait(0.5):
                    pass
            finally:
                self.shutdown()
        return 0

    def shutdown(self) -> None:
        """Stop scheduling, give the round in progress `window + 5 s`, then abandon it; stop HTTP."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        event(log, "stopping")
        if self._scheduler is not None:
            try:
                self._scheduler.shutdown(wait=False)
            except Exception as exc:  # already stopped
                event(log, "scheduler_stop_failed", logging.DEBUG, error=str(exc))
        finished = self._idle.wait(self.config.window + SHUTDOWN_GRACE_S)
        self._close_sources()
        if not finished:
            event(log, "window_abandoned", logging.WARNING,
                  reason=f"still running {self.config.window + SHUTDOWN_GRACE_S:g}s after the stop request")
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.nvml.close()
        event(log, "stopped", rounds=self._rounds)

    def _close_sources(self) -> None:
        for src in self.sources:
            try:
                src.close()
            except Exception as exc:
                event(log, "source_close_failed", logging.WARNING, source=src.name, error=str(exc))

    # ------------------------------------------------------------------ scrapes

    def render(self, accept: str) -> tuple[bytes, str]:
        """The /metrics body for an Accept header, and its content type.

        The snapshot's part is rendered once per snapshot and format (a scrape of an unchanged
        snapshot only copies bytes); the agent's own process metrics are rendered each time.
        """
        encoder, content_type = choose_encoder(accept)
        snapshot = self.collector.snapshot
        cached = self._rendered.get(content_type)
        if cached is None or cached[0] is not snapshot:
            body = encoder(self.registry)
            if body.endswith(_EOF):
                body = body[: -len(_EOF)]  # OpenMetrics: one "# EOF", at the very end
            cached = (snapshot, body)
            self._rendered[content_type] = cached  # benign race: two scrapes may render twice
        return cached[1] + encoder(self.self_registry), content_type

    # ------------------------------------------------------------------ readiness

    def readiness(self) -> tuple[bool, str]:
        """(ready, reason) for /readyz."""
        if self._stopping.is_set():
            return False, "shutting down"
        c = self.config
        slack = c.period + c.jitter + c.window + c.collect_timeout + READY_SLACK_S
        now = self.clock()
        if self._last_round_end is None:
            started = self._started_at if self._started_at is not None else now
            if now - started <= slack:
                return True, "no window expected yet"
            return False, f"no round finished in the {now - started:.0f}s since start"
        age = now - self._last_round_end
        if age <= slack:
            return True, f"last round finished {age:.0f}s ago"
        return False, f"last round finished {age:.0f}s ago (expected every {c.period:g}s)"

    # ------------------------------------------------------------------ rounds

    def run_round(self) -> None:
        """One scheduled round. Never raises (module doc)."""
        if self._stopping.is_set() or not self._round_lock.acquire(blocking=False):
            return
        self._idle.clear()
        try:
            self._round()
        except Exception as exc:
            # A bug, not an expected failure: one line (traceback at debug level), counted.
            event(log, "round_failed", logging.ERROR, exc_info=exc, error=f"{type(exc).__name__}: {exc}")
            try:
                self.builder.record(WindowResult("round", "round", "failed"), self.clock())
                self.collector.publish(self.builder.snapshot())
            except Exception as exc2:
                event(log, "publish_failed", logging.ERROR, error=str(exc2))
        finally:
            self._rounds += 1
            self._last_round_end = self.clock()
            self._round_lock.release()
            self._idle.set()

    def _round(self) -> None:
        self.nvml.begin()
        windows = self._capture_all()
        reading = self.nvml.end()
        results: list[WindowResult] = []
        for cw in windows:
            if self._stopping.is_set():
                cw.done(False)  # abandoned: the source may offer it again
                continue
            result = self.process_window(cw)
            self.builder.record(result, self.clock())
            results.append(result)
        self.builder.apply_round(results)
        self._publish_nvml(reading)

    def _publish_nvml(self, reading: NvmlReading) -> None:
        info = {
            str(g.index): GpuInfo(str(g.index), g.name, g.compute_capability, "" if g.sms is None else str(g.sms))
            for g in self.nvml.gpus
        }
        samples = [NvmlSample(str(r.index), r.sm_occupancy, r.utilization) for r in reading.gpus]
        self.builder.set_nvml(reading.up, samples, info)
        self.collector.publish(self.builder.snapshot())

    def _capture_all(self) -> list[CapturedWindow]:
        """Every source's capture, side by side; a source still busy from an overrun round is skipped."""
        c = self.config
        out: dict[int, list[CapturedWindow]] = {}
        threads: list[threading.Thread] = []
        started: set[int] = set()
        for i, src in enumerate(self.sources):
            with self._busy_lock:
                if id(src) in self._busy_sources:
                    event(log, "source_busy", logging.WARNING, source=src.name,
                          reason="its previous capture has not returned; skipping this round")
                    continue
                started.add(i)
                self._busy_sources.add(id(src))

            def target(i: int = i, src: Source = src) -> None:
                try:
                    out[i] = src.capture(c.window, c.collect_timeout)
                except Exception as exc:
                    out[i] = [CapturedWindow(source=src.name, path=None, outcome="failed",
                                             error=f"capture raised {type(exc).__name__}: {exc}")]
                finally:
                    with self._busy_lock:
                        self._busy_sources.discard(id(src))

            t = threading.Thread(target=target, name=f"warpwatch-capture-{i}", daemon=True)
            t.start()
            threads.append(t)
        deadline = time.monotonic() + c.window + c.collect_timeout + CAPTURE_GRACE_S
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        windows: list[CapturedWindow] = []
        for i, src in enumerate(self.sources):
            if i in out:
                windows.extend(out[i])
            elif i in started:
                windows.append(CapturedWindow(source=src.name, path=None, outcome="timed_out",
                                              error=f"capture did not return within "
                                                    f"{c.window + c.collect_timeout + CAPTURE_GRACE_S:g}s"))
        return windows

    def process_window(self, cw: CapturedWindow) -> WindowResult:
        """Read and analyse one window; count nothing here (the caller records the result)."""
        if cw.path is None or cw.error is not None:
            outcome: Outcome = "timed_out" if cw.outcome == "timed_out" else "failed"
            event(log, "window", logging.WARNING, source=cw.source, outcome=outcome,
                  error=cw.error or "no trace file")
            cw.done(True)
            return WindowResult(cw.source, process_identity(cw, None), outcome)
        t0 = time.perf_counter()
        fields: dict[str, Any] = {"source": cw.source, "file": cw.path.name}
        try:
            trace = read_trace(cw.path, max_bytes=self.config.max_trace_bytes, gpu_properties=self._gpu_properties)
            analysis = analyze(trace, requested=cw.requested)
        except TraceError as exc:
            seconds = time.perf_counter() - t0
            event(log, "window", logging.WARNING, **fields, outcome="failed", seconds=round(seconds, 4),
                  error=exc.reason)
            cw.done(True)
            return WindowResult(cw.source, process_identity(cw, None), "failed", seconds)
        except Exception as exc:
            seconds = time.perf_counter() - t0
            event(log, "window", logging.ERROR, exc_info=exc, **fields, outcome="failed",
                  seconds=round(seconds, 4), error=f"unexpected {type(exc).__name__}: {exc}")
            cw.done(True)
            return WindowResult(cw.source, process_identity(cw, None), "failed", seconds)
        seconds = time.perf_counter() - t0
        outcome = "ok" if analysis.launch_count > 0 else "empty"
        event(log, "window", **fields, outcome=outcome, seconds=round(seconds, 4),
              launches=analysis.launch_count, kernels=len(analysis.kernels),
              gpus=",".join(str(d.device) for d in analysis.devices) or "none",
              window_ms=round(analysis.window.duration / 1000.0, 3), bounds=analysis.window.bounds,
              rank=analysis.rank)
        cw.done(True)
        return WindowResult(cw.source, process_identity(cw, analysis.rank), outcome, seconds, analysis)


# ---------------------------------------------------------------------------------------------
# HTTP


_EOF = b"# EOF\n"
_INDEX = (b"<html><head><title>warpwatch</title></head><body><h1>warpwatch</h1>"
          b'<p><a href="/metrics">/metrics</a> <a href="/healthz">/healthz</a> '
          b'<a href="/readyz">/readyz</a></p></body></html>\n')


def _make_handler(service: Service) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = f"warpwatch/{__version__}"

        _extra: dict[str, str] = {}  # noqa: RUF012 - per request, reset in do_GET

        def do_GET(self) -> None:
            self._extra = {}
            if service.web is not None:
                allowed, self._extra = authorize(service.web, self.headers)
                if not allowed:
                    self._send(401, b"unauthorized\n")
                    return
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                try:
                    body, content_type = service.render(self.headers.get("Accept", ""))
                except Exception as exc:  # a bug: answer 500, keep serving
                    event(log, "scrape_failed", logging.ERROR, exc_info=exc, error=f"{type(exc).__name__}: {exc}")
                    self._send(500, b"internal error while collecting metrics; see the agent's log\n")
                    return
                gz = "gzip" in self.headers.get("Accept-Encoding", "")
                self._send(200, gzip.compress(body) if gz else body, content_type,
                           {"Content-Encoding": "gzip"} if gz else None)
            elif path == "/healthz":
                self._send(200, b"ok\n")
            elif path == "/readyz":
                ready, reason = service.readiness()
                self._send(200 if ready else 503, (reason + "\n").encode())
            elif path == "/":
                self._send(200, _INDEX, "text/html; charset=utf-8")
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

        def do_HEAD(self) -> None:
            self.do_GET()

        def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in {**self._extra, **(headers or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            event(log, "http_request", logging.DEBUG, client=self.client_address[0], request=format % args)

    return Handler


# ---------------------------------------------------------------------------------------------
# Signals and CLI


@contextmanager
def handle_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` while inside (main thread only); previous handlers restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        event(log, "signal", name=signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `run` subcommand."""
    parser = subparsers.add_parser(
        "run",
        help="run the agent: capture windows on a schedule, export Prometheus metrics",
        description="Capture a window every period, analyse it, serve /metrics, /healthz, /readyz. "
                    "Every flag can also be set as an environment variable or a YAML key "
                    "(precedence: flag > environment > file > default).",
    )
    add_arguments(parser)
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    config = load_config(args, os.environ)
    configure(config.log_level, config.log_format)
    return Service(config).run()
