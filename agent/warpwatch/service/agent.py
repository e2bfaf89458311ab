"""The agent's `Service`: startup -> rounds on a schedule -> shutdown (the package doc says how)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..capture import Source
from ..config.table import Config
from ..evidence.store import EvidenceStore
from ..export.nvml import Nvml, NvmlReading
from ..logs import event
from ..runtime.membudget import MemoryBudget
from ..serving import HttpServer, Limits
from .fanout import CAPTURE_GRACE_S, release
from .readiness import READY_SLACK_S
from .signals import handle_signals
from .startup import Loaded, announce, assemble, begin, http_server, load_sources
from .ticker import Ticker

log = logging.getLogger("warpwatch.service")

SHUTDOWN_GRACE_S = 5.0
"""Beyond the window itself, how long shutdown waits for the round in progress."""


class Service:
    """The agent: startup -> rounds on a schedule -> shutdown (module doc). Its pieces are built
    whole by `startup`; it only starts, runs and stops them."""

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
        """`sources` default to the --source specs', built at startup. `clock` (wall, Unix seconds)
        stamps windows; `monotonic` measures ages (readiness), capture deadlines and clock steps.
        `monotonic` defaults to `time.monotonic`, or to `clock` when only `clock` is given (a test
        then drives both with one fake). `limits` bound the HTTP server (default
        `http_limits(Limits())`), `memory` each window's read (default: the cgroup's),
        `evidence_store` what `--evidence-dir` keeps (default: a store on that folder)."""
        self.config = config
        self._build_sources = sources is None
        self.sources: list[Source] = list(sources) if sources is not None else []
        self.nvml = nvml if nvml is not None else Nvml()
        self._memory = memory if memory is not None else MemoryBudget.detect()
        self._shutdown_grace_s = shutdown_grace_s
        self._limits = limits
        self._stopping = threading.Event()
        p = assemble(
            config,
            nvml=self.nvml,
            clock=clock,
            monotonic=monotonic or (time.monotonic if clock is time.time else clock),
            memory=self._memory,
            stopping=self._stopping.is_set,
            on_period=self._set_period,
            capture_grace_s=capture_grace_s,
            ready_slack_s=ready_slack_s,
            evidence_store=evidence_store,
        )
        self.exposition, self.rounds, self.ready, self.evidence = p.exposition, p.rounds, p.readiness, p.evidence
        self._loaded = Loaded(web=None, gpu_properties=None)
        """What startup reads from the files the settings name (nothing before it)."""
        self._server: HttpServer | None = None
        self._scheduler: Ticker | None = None
        self._round_lock = threading.Lock()
        self._round_count = 0

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
            self.sources, self._build_sources = load_sources(c), False
        self._loaded = loaded = begin(c, self._memory)
        if self.evidence is not None:
            self.evidence.open()
        try:
            for src in self.sources:
                src.start()
                event(log, "source_started", source=src.name)
            if self.nvml.start():
                self.rounds.publish_nvml(NvmlReading(True))
            self._server = http_server(
                c, self.exposition, self.readiness, self.evidence, self.sources, loaded.web, self._limits
            )
            self._server.start()
            announce(self._server, c, loaded.web)
            self.ready.started()
            self._scheduler = Ticker(self.tick, c.period, c.jitter)
            self._scheduler.start()
        except BaseException:
            self._stop_all()
            raise

    def tick(self) -> None:
        """A round is due: start it in its own daemon thread (a round stuck in a capture must not
        keep the process alive after SIGTERM), or count an overrun if one still runs."""
        if self._stopping.is_set():
            return
        if self._round_lock.locked():
            self.rounds.overrun()
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
        wait = self.config.window + self._shutdown_grace_s
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
        deadline = time.monotonic() + drain_s
        self._stop_scheduler()
        if self.evidence is not None:  # before the sources close: it gives their traces back
            self.evidence.close(drain_s)
        release(self.sources, deadline - time.monotonic())  # the grace left: what is in flight
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
            self.rounds.run(self.sources, self._loaded.gpu_properties)
        except Exception as exc:
            self.rounds.failed(exc)
        finally:
            self._round_count += 1
            self.ready.round_finished()
            self._round_lock.release()
