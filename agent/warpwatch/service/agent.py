"""The agent's `Service`: startup -> rounds on a schedule -> shutdown (the package doc says how)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from .. import __version__, native
from ..capture import Source
from ..config import Config, describe
from ..evidence.rule import KeepRule
from ..evidence.store import EvidenceStore
from ..export.evidence import EvidenceCollector
from ..export.nvml import Nvml, NvmlReading
from ..export.overhead import OverheadCollector
from ..export.selfmetrics import AgentCollector
from ..logs import event, limited_event
from ..membudget import MemoryBudget
from ..serving import Endpoints, HttpServer, Limits, describe_limits, http_limits, raise_nofile
from ..serving.webconfig import WebConfig
from ..serving.webfile import load_web_config
from ..trace import load_gpu_properties
from .evidence import Evidence
from .exposition import Exposition
from .fanout import CAPTURE_GRACE_S, CaptureFanout
from .health import READY_SLACK_S, Readiness
from .rounds import Rounds
from .signals import handle_signals
from .ticker import Ticker

log = logging.getLogger("warpwatch.service")

SHUTDOWN_GRACE_S = 5.0
"""Beyond the window itself, how long shutdown waits for the round in progress."""


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
        shutdown_grace_s: float = SHUTDOWN_GRACE_S,
        capture_grace_s: float = CAPTURE_GRACE_S,
        ready_slack_s: float = READY_SLACK_S,
        limits: Limits | None = None,
        memory: MemoryBudget | None = None,
        evidence_store: EvidenceStore | None = None,
    ) -> None:
        """`clock` (wall, Unix seconds) stamps windows; `monotonic` measures ages (readiness), capture
        deadlines and clock steps. `monotonic` defaults to `time.monotonic`, or to `clock` when only
        `clock` is given (a test then drives both with one fake). `limits` bound the HTTP server
        (default `http_limits(Limits())`), `memory` each window's read (default: the cgroup's),
        `evidence_store` what `--evidence-dir` keeps (default: a store on that folder)."""
        self.config = config
        self._build_sources = sources is None
        self.sources: list[Source] = list(sources) if sources is not None else []
        self.nvml = nvml if nvml is not None else Nvml()
        monotonic = monotonic or (time.monotonic if clock is time.time else clock)
        self.shutdown_grace_s = shutdown_grace_s
        self.limits = limits
        self.memory = memory if memory is not None else MemoryBudget.detect()
        """The memory limit, which sizes each window's read (`membudget`)."""
        self._stopping = threading.Event()
        self.exposition = Exposition()
        self.registry, self.collector = self.exposition.registry, self.exposition.collector
        self.rounds = Rounds(
            config,
            exposition=self.exposition,
            nvml=self.nvml,
            clock=clock,
            monotonic=monotonic,
            fanout=CaptureFanout(grace_s=capture_grace_s, monotonic=monotonic),
            memory=self.memory,
            stopping=self._stopping.is_set,
        )
        self.builder = self.rounds.builder
        self.rounds.on_period = self._set_period
        self.exposition.add_own(OverheadCollector(self.rounds.overhead.view))
        if config.evidence_dir is not None:
            self._keep_evidence(
                evidence_store
                or EvidenceStore(config.evidence_dir, config.evidence_bytes, config.evidence_files, clock),
                clock,
            )
        self.ready = Readiness(config, monotonic, ready_slack_s, period=self.rounds.period_now)
        self.web: WebConfig | None = None
        """TLS / basic auth for every HTTP path (exporter-toolkit web config), when configured."""
        self._server: HttpServer | None = None
        self._scheduler: Ticker | None = None
        self._round_lock = threading.Lock()
        self._round_count = 0

    def _keep_evidence(self, store: EvidenceStore, clock: Callable[[], float]) -> None:
        """--evidence-dir: the rounds offer their windows to the keep rule; its metrics are the agent's."""
        self.rounds.evidence = Evidence(store, KeepRule(), clock, self.rounds.repeats)
        self.exposition.add_own(EvidenceCollector(self.rounds.evidence.view))

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None, "not started"
        return self._server.port

    @property
    def round_running(self) -> bool:
        """Whether a round is in progress (a tick now counts an overrun)."""
        return self._round_lock.locked()

    def startup(self) -> None:
        """Start everything; raise WarpwatchError (nothing left running) when that is impossible."""
        c = self.config
        if self._build_sources:  # a bad --source is its one-line error, before any start-up line
            from ..capture.registry import build_source

            self.sources = [build_source(spec, c) for spec in c.source]
            self._build_sources = False
        event(log, "starting", version=__version__, compiled=native.describe(), **describe(c))
        event(log, "memory_budget", **self.memory.describe(c.max_trace_bytes))
        raise_nofile()  # before anything holds descriptors; the HTTP server is sized from the result
        self.web = load_web_config(c.web_config) if c.web_config is not None else None
        if c.gpu_properties is not None:
            self.rounds.gpu_properties = load_gpu_properties(c.gpu_properties)
        self._open_evidence()
        try:
            for src in self.sources:
                src.start()
                event(log, "source_started", source=src.name)
            if self.nvml.start():
                self.rounds.publish_nvml(NvmlReading(True))
            self._start_http()
            self.ready.started()
            self._scheduler = Ticker(self.tick, c.period, c.jitter)
            self._scheduler.start()
        except BaseException:
            self._stop_all()
            raise

    def _open_evidence(self) -> None:
        """The evidence folder, created and read; one that cannot be is logged, and each keep then
        fails on its own, counted (`warpwatch_evidence_failed_total`)."""
        if self.rounds.evidence is None:
            return
        store = self.rounds.evidence.store
        try:
            store.open()
        except OSError as exc:
            event(
                log, "evidence_unavailable", logging.WARNING, folder=str(store.folder), error=exc.strerror or str(exc)
            )
        else:
            event(
                log,
                "evidence_opened",
                folder=str(store.folder),
                windows=len(store.windows()),
                bytes=store.total_bytes(),
            )

    def _start_http(self) -> None:
        c = self.config
        endpoints = Endpoints(
            self.exposition.render,
            self.readiness,
            self.web,
            evidence=self.rounds.evidence.store if self.rounds.evidence is not None else None,
        )
        limits = self.limits if self.limits is not None else http_limits(Limits())
        self._server = server = HttpServer(endpoints, c.address, c.port, web=self.web, limits=limits)
        self.exposition.add_own(AgentCollector(http=server, sources=self.sources))
        server.start()
        host, scheme = c.address, "https" if self.web is not None and self.web.tls is not None else "http"
        event(
            log,
            "listening",
            address=host,
            port=self.port,
            url=f"{scheme}://{'localhost' if host in ('0.0.0.0', '::') else host}:{self.port}/metrics",
            **describe_limits(server.limits),
        )

    def tick(self) -> None:
        """A round is due: start it in its own daemon thread (a round stuck in a capture must not
        keep the process alive after SIGTERM), or count an overrun if one still runs."""
        if self._stopping.is_set():
            return
        if self._round_lock.locked():
            self.rounds.late_faults.append(("round", "overrun"))
            limited_event(
                log,
                self.rounds.repeats,
                ("round_skipped",),
                "round_skipped",
                logging.WARNING,
                reason=f"the previous round is still running after the {self.rounds.period_now():g}s period",
            )
            return
        threading.Thread(target=self.run_round, name="warpwatch-round", daemon=True).start()

    def _set_period(self, period: float) -> None:
        if self._scheduler is not None:
            self._scheduler.set_period(period)

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
        """Stop scheduling, give the round in progress and then the evidence still being kept
        `window + shutdown_grace_s` in all, then abandon what is left."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        event(log, "stopping")
        wait = self.config.window + self.shutdown_grace_s
        deadline = time.monotonic() + wait
        self._stop_scheduler()
        finished = self._round_lock.acquire(timeout=wait)
        if finished:
            self._round_lock.release()
        self._stop_all(abandoned=not finished, wait=wait, drain_s=deadline - time.monotonic())
        event(log, "stopped", rounds=self._round_count)

    def _stop_scheduler(self) -> None:
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.stop()

    def _stop_all(self, abandoned: bool = False, wait: float = 0.0, drain_s: float = 0.0) -> None:
        self._stop_scheduler()
        if self.rounds.evidence is not None:  # before the sources close: it gives their traces back
            self.rounds.evidence.close(drain_s)
        for src in self.sources:
            try:
                src.close()
            except Exception as exc:
                event(log, "source_close_failed", logging.WARNING, source=src.name, error=str(exc))
        if abandoned:
            event(log, "window_abandoned", logging.WARNING, reason=f"still running {wait:g}s after the stop request")
        if self._server is not None:
            self._server.stop()
        self.nvml.close()

    def render(self, accept: str) -> tuple[bytes, str]:
        """The /metrics body for an Accept header, and its content type (`Exposition.render`)."""
        return self.exposition.render(accept)

    def readiness(self) -> tuple[bool, str]:
        """(ready, reason) for /readyz."""
        return self.ready.check(self._stopping.is_set())

    def run_round(self) -> None:
        """One scheduled round. Never raises (module doc)."""
        if self._stopping.is_set() or not self._round_lock.acquire(blocking=False):
            return
        try:
            self.rounds.run(self.sources)
        except Exception as exc:
            self.rounds.failed(exc)
        finally:
            self._round_count += 1
            self.ready.round_finished()
            self._round_lock.release()
