"""How the service is put together: every piece built whole, through its constructor, with all it
needs, here and nowhere else (`agent.Service` only starts, runs and stops them).

- `assemble`, when the service is made: the overhead ledger, the evidence (--evidence-dir), the
  exposition with the agent's own collectors, the rounds and readiness;
- `load_sources`, at startup when no sources were given: one per --source spec;
- `begin`, at startup: the start-up lines, the descriptor limit raised, the files the settings
  name read (`Loaded`);
- `http_server`, at startup once the descriptor limit is raised and the web config read: the HTTP
  server over the exposition, readiness and the evidence store, whose counters and the sources'
  join the agent's own metrics; `announce` logs where it listens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client.registry import Collector

from .. import __version__
from ..capture import Source
from ..config.table import MAX_PERIOD_S, Config, describe
from ..evidence.rule import KeepRule
from ..evidence.store import EvidenceStore
from ..export.evidencemetrics import EvidenceCollector
from ..export.nvml import Nvml
from ..export.overhead import OverheadCollector
from ..export.selfmetrics import AgentCollector
from ..logs import RepeatFilter, event
from ..model import DeviceProperties
from ..overhead import OverheadLedger
from ..runtime import native
from ..runtime.membudget import MemoryBudget
from ..serving import Endpoints, HttpServer, Limits, describe_limits, http_limits, raise_nofile
from ..serving.webconfig import WebConfig
from ..serving.webfile import load_web_config
from ..trace import load_gpu_properties
from .exposition import Exposition
from .fanout import CaptureFanout
from .keeping import Evidence
from .readiness import Readiness
from .rounds import Rounds

log = logging.getLogger("warpwatch.service")


@dataclass(frozen=True)
class Pieces:
    """What a service is made of before it starts."""

    exposition: Exposition
    rounds: Rounds
    readiness: Readiness
    evidence: Evidence | None
    """--evidence-dir: where the traces of the windows that matter are kept (None without it)."""


def assemble(
    config: Config,
    *,
    nvml: Nvml,
    clock: Callable[[], float],
    monotonic: Callable[[], float],
    memory: MemoryBudget,
    stopping: Callable[[], bool],
    on_period: Callable[[float], None],
    capture_grace_s: float,
    ready_slack_s: float,
    evidence_store: EvidenceStore | None,
) -> Pieces:
    """The pieces of a service (the `Service` constructor's arguments, module doc); nothing is
    opened or started here."""
    ledger = OverheadLedger(config.overhead_budget, config.period, MAX_PERIOD_S)
    repeats = RepeatFilter()
    evidence = None
    if config.evidence_dir is not None:
        store = evidence_store or EvidenceStore(
            config.evidence_dir, config.evidence_bytes, config.evidence_files, clock
        )
        evidence = Evidence(store, KeepRule(), clock, repeats)
    own: list[Collector] = [OverheadCollector(ledger.view)]
    if evidence is not None:
        own.append(EvidenceCollector(evidence.view))
    exposition = Exposition(own=own)
    rounds = Rounds(
        config,
        exposition=exposition,
        nvml=nvml,
        fanout=CaptureFanout(grace_s=capture_grace_s, monotonic=monotonic),
        overhead=ledger,
        evidence=evidence,
        repeats=repeats,
        clock=clock,
        monotonic=monotonic,
        memory=memory,
        stopping=stopping,
        on_period=on_period,
    )
    readiness = Readiness(config, monotonic, ready_slack_s, period=rounds.period_now)
    return Pieces(exposition, rounds, readiness, evidence)


def load_sources(config: Config) -> list[Source]:
    """One source per --source spec (`capture.registry`); ConfigError for a bad one."""
    from ..capture.registry import build_source

    return [build_source(spec, config) for spec in config.source]


@dataclass(frozen=True)
class Loaded:
    """What startup reads from the files the settings name."""

    web: WebConfig | None
    """TLS / basic auth for every HTTP path (exporter-toolkit web config), when configured."""
    gpu_properties: dict[int, DeviceProperties] | None
    """Device properties for the traces that carry none (--gpu-properties), when configured."""


def begin(config: Config, memory: MemoryBudget) -> Loaded:
    """The start-up lines, the descriptor limit raised (before anything holds descriptors: the HTTP
    server is sized from the result), then the files the settings name read; WarpwatchError for a
    file that cannot be."""
    event(log, "starting", version=__version__, compiled=native.describe(), **describe(config))
    event(log, "memory_budget", **memory.describe(config.max_trace_bytes))
    raise_nofile()
    web = load_web_config(config.web_config) if config.web_config is not None else None
    gpus = load_gpu_properties(config.gpu_properties) if config.gpu_properties is not None else None
    return Loaded(web, gpus)


def http_server(
    config: Config,
    exposition: Exposition,
    readiness: Callable[[], tuple[bool, str]],
    evidence: Evidence | None,
    sources: Sequence[Source],
    web: WebConfig | None,
    limits: Limits | None,
) -> HttpServer:
    """The HTTP server, not started: /metrics from `exposition`, /readyz from `readiness`,
    /evidence from the evidence's store; `limits` default to `http_limits(Limits())` (sized from
    the descriptor limit). Its counters and the sources' join the agent's own metrics."""
    endpoints = Endpoints(exposition.render, readiness, web, evidence=evidence.store if evidence is not None else None)
    limits = limits if limits is not None else http_limits(Limits())
    server = HttpServer(endpoints, config.address, config.port, web=web, limits=limits)
    exposition.add_own(AgentCollector(http=server, sources=sources))
    return server


def announce(server: HttpServer, config: Config, web: WebConfig | None) -> None:
    """The `listening` line: where to scrape the started server, and its limits."""
    host, scheme = config.address, "https" if web is not None and web.tls is not None else "http"
    event(
        log,
        "listening",
        address=host,
        port=server.port,
        url=f"{scheme}://{'localhost' if host in ('0.0.0.0', '::') else host}:{server.port}/metrics",
        **describe_limits(server.limits),
    )
