"""The agent's `Service`: startup -> rounds on a schedule -> shutdown (the package doc says how)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from .. import __version__, native
from ..capture import CapturedWindow, Source
from ..config import MAX_DUTY, Config, describe
from ..export.builder import GpuInfo, NvmlSample, Snapshot, SnapshotBuilder, SnapshotCollector, WindowResult
from ..export.nvml import Nvml, NvmlReading
from ..export.selfmetrics import AgentCollector
from ..logs import RepeatFilter, event, limited_event
from ..membudget import MemoryBudget
from ..model import DeviceProperties, Fault
from ..serving import Endpoints, HttpServer, Limits, describe_limits, http_limits, raise_nofile
from ..serving.webconfig import WebConfig
from ..serving.webfile import load_web_config
from ..trace import load_gpu_properties
from .signals import handle_signals
from .ticker import CLOCK_JUMP_S, Ticker
from .window import WindowReading, read_window, repeat_key
from .windowplan import WindowPlanner, agent_chooses_window

log = logging.getLogger("warpwatch.service")

SHUTDOWN_GRACE_S = 5.0
"""Beyond the window itself, how long shutdown waits for the round in progress."""
CAPTURE_GRACE_S = 5.0
"""Beyond window + collect_timeout, how long a round waits for a source's capture."""
READY_SLACK_S = 10.0
_EOF = b"# EOF\n"


class Service:
    """The agent: startup -> rounds on a schedule -> shutdown (module doc)."""

    def __init__(
        self,
        config: Config,
        *,
        sources: Sequence[Source] | None = None,
        nvml: Nvml | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        """`clock` (wall, Unix seconds) stamps windows; `monotonic` measures ages (readiness) and
        clock steps. `monotonic` defaults to `time.monotonic`, or to `clock` when only `clock` is
        given (a test then drives both with one fake)."""
        self.config = config
        self._build_sources = sources is None
        self.sources: list[Source] = list(sources) if sources is not None else []
        self.nvml = nvml if nvml is not None else Nvml()
        self.clock = clock
        self.monotonic = monotonic or (time.monotonic if clock is time.time else clock)
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
        self.builder = SnapshotBuilder(top_kernels=config.top_kernels, capture_duty=config.duty,
                                       capture_period=config.period, capture_window=config.window,
                                       max_gpus=config.max_gpus, kernel_gauges=config.kernel_gauges)
        self.planner = (WindowPlanner(config.window, config.period, max(MAX_DUTY, config.duty))
                        if config.adaptive_window else None)
        """--adaptive-window: each round's window (windowplan)."""
        self.collector.publish(self.builder.snapshot())
        self._gpu_properties: dict[int, DeviceProperties] | None = None
        self._server: HttpServer | None = None
        self.web: WebConfig | None = None
        """TLS / basic auth for every HTTP path (exporter-toolkit web config), when configured."""
        self._scheduler: Ticker | None = None
        self._stopping = threading.Event()
        self._round_lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()
        self._busy_sources: set[int] = set()
        self._busy_lock = threading.Lock()
        self._started_at: float | None = None
        self._last_round_end: float | None = None
        self._rounds = 0
        self._repeats = RepeatFilter()
        self._faults: list[Fault] = []
        """Faults noted outside the round thread (overruns), counted by the next round."""
        self._faults_lock = threading.Lock()
        self._clock_mark: tuple[float, float] | None = None
        self.memory = MemoryBudget.detect()
        """The cgroup memory limit, which sizes each window's read (`membudget`)."""

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None, "not started"
        return self._server.port

    def startup(self) -> None:
        """Start everything; raise WarpwatchError (nothing left running) when that is impossible."""
        c = self.config
        self._build()  # a bad --source is its one-line error, before any start-up line
        event(log, "starting", version=__version__, compiled=native.describe(), **describe(c))
        event(log, "memory_budget", **self.memory.describe(c.max_trace_bytes))
        raise_nofile()  # before anything holds descriptors; the HTTP server is sized from the result
        if c.web_config is not None:
            self.web = load_web_config(c.web_config)
        if c.gpu_properties is not None:
            self._gpu_properties = load_gpu_properties(c.gpu_properties)
        try:
            self._start_sources()
            if self.nvml.start():
                self._publish_nvml(NvmlReading(True))
            self._start_http()
            self._started_at = self.monotonic()
            self._start_scheduler()
        except BaseException:
            if self._scheduler is not None:
                self._scheduler.stop()
            if self._server is not None:
                self._server.stop()
            self._close_sources()
            self.nvml.close()
            raise

    def _build(self) -> None:
        if self._build_sources:
            from ..capture.registry import build_source

            self.sources = [build_source(spec, self.config) for spec in self.config.source]
            self._build_sources = False

    def _start_sources(self) -> None:
        self._build()
        for src in self.sources:
            src.start()
            event(log, "source_started", source=src.name)

    def _start_http(self) -> None:
        c = self.config
        endpoints = Endpoints(self.render, self.readiness, self.web)
        server = HttpServer(endpoints, c.address, c.port, web=self.web, limits=http_limits(Limits()))
        self.self_registry.register(AgentCollector(http=server, sources=self.sources))
        server.start()
        self._server = server
        host = c.address
        scheme = "https" if self.web is not None and self.web.tls is not None else "http"
        event(log, "listening", address=host, port=self.port,
              url=f"{scheme}://{'localhost' if host in ('0.0.0.0', '::') else host}:{self.port}/metrics",
              **describe_limits(server.limits))

    def _start_scheduler(self) -> None:
        self._scheduler = Ticker(self._tick, self.config.period, self.config.jitter)
        self._scheduler.start()

    def _tick(self) -> None:
        """A round is due: start it in its own daemon thread (a round stuck in a capture must not
        keep the process alive after SIGTERM), or count an overrun if one still runs."""
        if self._stopping.is_set():
            return
        if self._round_lock.locked():
            self._note_fault("round", "overrun")
            limited_event(log, self._repeats, ("round_skipped",), "round_skipped", logging.WARNING,
                          reason=f"the previous round is still running after the {self.config.period:g}s period")
            return
        threading.Thread(target=self.run_round, name="warpwatch-round", daemon=True).start()

    def _note_fault(self, stage: str, reason: str) -> None:
        with self._faults_lock:
            self._faults.append((stage, reason))

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
            self._scheduler.stop()
        finished = self._idle.wait(self.config.window + SHUTDOWN_GRACE_S)
        self._close_sources()
        if not finished:
            event(log, "window_abandoned", logging.WARNING,
                  reason=f"still running {self.config.window + SHUTDOWN_GRACE_S:g}s after the stop request")
        if self._server is not None:
            self._server.stop()
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
        now = self.monotonic()
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
            error = f"{type(exc).__name__}: {exc}"
            limited_event(log, self._repeats, repeat_key("round_failed", error), "round_failed", logging.ERROR,
                          exc_info=exc, error=error)
            try:
                self.builder.record(WindowResult("round", "round", "failed", fault=("round", "unexpected")),
                                    self.clock())
                self.collector.publish(self.builder.snapshot())
            except Exception as exc2:
                event(log, "publish_failed", logging.ERROR, error=str(exc2))
        finally:
            self._rounds += 1
            self._last_round_end = self.monotonic()
            self._round_lock.release()
            self._idle.set()

    def _round(self) -> None:
        self._check_clock()
        self.nvml.begin()
        windows = self._capture_all()
        reading = self.nvml.end()
        with self._faults_lock:
            faults, self._faults = self._faults, []
        for stage, reason in faults:
            self.builder.add_fault(stage, reason)
        for reason, count in self.nvml.take_errors().items():
            self.builder.add_fault("nvml", reason, count)
        results: list[WindowResult] = []
        for cw in windows:
            if self._stopping.is_set():
                cw.done(False)  # abandoned: the source may offer it again
                continue
            result = self.process_window(cw)
            self.builder.record(result, self.clock())
            results.append(result)
        self.builder.apply_round(results)
        self._adapt_window(results)
        self._publish_nvml(reading)

    def _adapt_window(self, results: Sequence[WindowResult]) -> None:
        """--adaptive-window: lengthen the window after a round that captured long kernels."""
        longest = max((d.longest_kernel / 1e6 for r in results if r.analysis is not None
                       and agent_chooses_window(r.source) for d in r.analysis.devices), default=0.0)
        if self.planner is not None and self.planner.observe(longest):
            self.builder.capture_window = self.planner.window
            event(log, "window_lengthened", window_s=round(self.planner.window, 6),
                  longest_kernel_s=round(longest, 6))

    def _check_clock(self) -> None:
        """Count and log a step of the wall clock against the monotonic clock since the last round."""
        wall, mono = self.clock(), self.monotonic()
        if self._clock_mark is not None:
            step = (wall - self._clock_mark[0]) - (mono - self._clock_mark[1])
            if abs(step) > CLOCK_JUMP_S:
                self.builder.add_fault("clock", "jump")
                limited_event(log, self._repeats, ("clock_jump",), "clock_jump", logging.WARNING,
                              seconds=round(step, 3),
                              reason="the wall clock was stepped; window timestamps follow it, "
                                     "scheduling and durations do not")
        self._clock_mark = (wall, mono)

    def _publish_nvml(self, reading: NvmlReading) -> None:
        info = {
            str(g.index): GpuInfo(str(g.index), g.name, g.compute_capability, "" if g.sms is None else str(g.sms),
                                  "nvidia", g.uuid or "")
            for g in self.nvml.gpus
        }
        samples = [NvmlSample(str(r.index), r.sm_occupancy, r.utilization) for r in reading.gpus]
        self.builder.set_nvml(reading.up, samples, info)
        self.collector.publish(self.builder.snapshot())

    def _capture_all(self) -> list[CapturedWindow]:
        """Every source's capture, side by side; a source still busy from an overrun round is skipped."""
        c = self.config
        window = self.planner.next()[0] if self.planner is not None else c.window
        out: dict[int, list[CapturedWindow]] = {}
        threads: list[threading.Thread] = []
        started: set[int] = set()
        for i, src in enumerate(self.sources):
            with self._busy_lock:
                if id(src) in self._busy_sources:
                    self.builder.add_fault("capture", "skipped_busy")
                    limited_event(log, self._repeats, ("source_busy", src.name), "source_busy", logging.WARNING,
                                  source=src.name, reason="its previous capture has not returned; skipping this round")
                    continue
                started.add(i)
                self._busy_sources.add(id(src))

            def target(i: int = i, src: Source = src) -> None:
                try:
                    out[i] = src.capture(window if agent_chooses_window(src.name) else c.window,
                                         c.collect_timeout)
                except Exception as exc:
                    out[i] = [CapturedWindow(source=src.name, path=None, outcome="failed", failure="raised",
                                             error=f"capture raised {type(exc).__name__}: {exc}")]
                finally:
                    with self._busy_lock:
                        self._busy_sources.discard(id(src))

            t = threading.Thread(target=target, name=f"warpwatch-capture-{i}", daemon=True)
            t.start()
            threads.append(t)
        bound = max(window, c.window) + c.collect_timeout + CAPTURE_GRACE_S + max(
            (src.capture_overhead_s for src in self.sources), default=0.0)
        deadline = time.monotonic() + bound
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        windows: list[CapturedWindow] = []
        for i, src in enumerate(self.sources):
            if i in out:
                windows.extend(out[i])
            elif i in started:
                windows.append(CapturedWindow(source=src.name, path=None, outcome="timed_out",
                                              error=f"capture did not return within {bound:g}s"))
        return windows

    def process_window(self, cw: CapturedWindow) -> WindowResult:
        """Open (confined to its folder), read and analyse one window (`window.read_window`)."""
        return read_window(cw, WindowReading(self.config.max_trace_bytes, self.memory, self._gpu_properties,
                                             self._stopping.is_set, self._repeats))
