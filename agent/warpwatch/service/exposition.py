"""What a scrape of /metrics gets: the current snapshot's metrics, rendered once per snapshot and
format, followed by the agent's own process metrics, rendered at each scrape."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from ..export.snapshot import Snapshot, SnapshotCollector

EOF_LINE = b"# EOF\n"
"""How an OpenMetrics body ends: once, at the very end of the joined body."""


class Exposition:
    """The two registries behind /metrics and the render cache (one entry per content type)."""

    def __init__(self, collector: SnapshotCollector | None = None, own: Iterable[Collector] = ()) -> None:
        """`own`: the agent's own collectors beside its footprint (`add_own`), rendered at each scrape."""
        self.collector = collector if collector is not None else SnapshotCollector()
        self.registry = CollectorRegistry()
        """The warpwatch_* metrics: the current snapshot, rendered once per snapshot and format."""
        self.registry.register(self.collector)
        self.self_registry = CollectorRegistry()
        """The agent's own footprint (RSS, CPU, GC), next to what it measures; rendered per scrape."""
        ProcessCollector(registry=self.self_registry)
        PlatformCollector(registry=self.self_registry)
        GCCollector(registry=self.self_registry)
        for c in own:
            self.add_own(c)
        self._rendered: dict[str, tuple[Snapshot, bytes]] = {}
        self.renders = 0
        """How many times a snapshot's part was rendered (a scrape of an unchanged one renders none)."""

    def add_own(self, collector: Collector) -> None:
        """Add a collector of the agent's own, rendered at each scrape (`selfmetrics`)."""
        self.self_registry.register(collector)

    def publish(self, snapshot: Snapshot) -> None:
        """Swap in the snapshot that scrapes from now on expose."""
        self.collector.publish(snapshot)

    def render(self, accept: str) -> tuple[bytes, str]:
        """The /metrics body for an Accept header, and its content type."""
        encoder, content_type = choose_encoder(accept)
        snapshot = self.collector.snapshot
        cached = self._rendered.get(content_type)
        if cached is None or cached[0] is not snapshot:
            body = encoder(self.registry)
            if body.endswith(EOF_LINE):
                body = body[: -len(EOF_LINE)]  # OpenMetrics: the agent's own part ends the body
            cached = (snapshot, body)
            self._rendered[content_type] = cached  # benign race: two scrapes may render twice
            self.renders += 1
        return cached[1] + encoder(self.self_registry), content_type
