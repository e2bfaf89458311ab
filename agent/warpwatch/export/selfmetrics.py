"""The agent's own operational metrics (`metricdefs.AGENT`), read live at each scrape.

`AgentCollector` reads counters that the HTTP server and the sources keep themselves (plain
integers, read without locking: a scrape may see a count one behind). A source reports by
having a `stats()` method returning `SourceStats` (the Kineto daemon source) or a `server_stats()`
method returning `capture.serverbase.ServerStats` (the vllm and sglang sources).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..capture import SourceStats
from ..capture.serverbase import FILE_KINDS, SKIP_REASONS, ServerStats
from . import metricdefs as md


class _HttpCounts(Protocol):
    rejected: dict[str, int]

    @property
    def connections(self) -> int: ...


class AgentCollector:
    """prometheus-client collector over the HTTP server's and the sources' counters."""

    def __init__(self, http: _HttpCounts | None = None, sources: Sequence[Any] = ()) -> None:
        self.http = http
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        if self.http is not None:
            yield GaugeMetricFamily(md.HTTP_CONNECTIONS.name, md.HTTP_CONNECTIONS.help,
                                    value=self.http.connections)
            rejected = CounterMetricFamily(md.HTTP_REJECTED.name, md.HTTP_REJECTED.help,
                                           labels=md.HTTP_REJECTED.labels)
            for reason, count in sorted(dict(self.http.rejected).items()):
                rejected.add_metric([reason], count)
            yield rejected
        yield from self._server_metrics()
        stats = [(src.name, src.stats()) for src in self.sources if callable(getattr(src, "stats", None))]
        stats = [(name, s) for name, s in stats if isinstance(s, SourceStats)]
        if not stats:
            return
        clients = GaugeMetricFamily(md.DAEMON_CLIENTS.name, md.DAEMON_CLIENTS.help, labels=md.DAEMON_CLIENTS.labels)
        seen = CounterMetricFamily(md.DAEMON_CLIENTS_SEEN.name, md.DAEMON_CLIENTS_SEEN.help,
                                   labels=md.DAEMON_CLIENTS_SEEN.labels)
        dropped = CounterMetricFamily(md.DAEMON_DATAGRAMS_DROPPED.name, md.DAEMON_DATAGRAMS_DROPPED.help,
                                      labels=md.DAEMON_DATAGRAMS_DROPPED.labels)
        replies = CounterMetricFamily(md.DAEMON_REPLIES_DROPPED.name, md.DAEMON_REPLIES_DROPPED.help,
                                      labels=md.DAEMON_REPLIES_DROPPED.labels)
        evicted = CounterMetricFamily(md.DAEMON_CLIENTS_EVICTED.name, md.DAEMON_CLIENTS_EVICTED.help,
                                      labels=md.DAEMON_CLIENTS_EVICTED.labels)
        for name, s in stats:
            clients.add_metric([name], s.clients)
            seen.add_metric([name], s.clients_seen)
            for family, counts in ((dropped, s.dropped), (replies, s.replies_dropped), (evicted, s.evicted)):
                for reason, count in sorted(counts.items()):
                    family.add_metric([name, reason], count)
        yield clients
        yield seen
        yield dropped
        yield replies
        yield evicted

    def _server_metrics(self) -> Iterator[Metric]:
        """vllm/sglang sources: windows skipped by reason, trace files by kind (every known value)."""
        servers = [(src.name, src.server_stats()) for src in self.sources
                   if callable(getattr(src, "server_stats", None))]
        servers = [(name, s) for name, s in servers if isinstance(s, ServerStats)]
        if not servers:
            return
        skipped = CounterMetricFamily(md.SERVER_WINDOWS_SKIPPED.name, md.SERVER_WINDOWS_SKIPPED.help,
                                      labels=md.SERVER_WINDOWS_SKIPPED.labels)
        files = CounterMetricFamily(md.SERVER_TRACE_FILES.name, md.SERVER_TRACE_FILES.help,
                                    labels=md.SERVER_TRACE_FILES.labels)
        for name, s in servers:
            for reason in SKIP_REASONS:
                skipped.add_metric([name, reason], s.skipped.get(reason, 0))
            for kind in FILE_KINDS:
                files.add_metric([name, kind], s.files.get(kind, 0))
        yield skipped
        yield files
