"""The agent's own operational metrics (`metricdefs.AGENT`), read live at each scrape.

`AgentCollector` reads counters that the HTTP server and the sources keep themselves (plain
integers, read without locking: a scrape may see a count one behind). Every source reports with
`stats()`, one `sourcestats.SourceStats` shape: the client and datagram families cover the sources
that have peers (the Kineto daemon source), the server families the sources that skip windows on
purpose (the vllm and sglang sources), each with every known reason or kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..sourcestats import FILE_KINDS, SKIP_REASONS, SourceStats
from . import metricdefs as md


class _HttpCounts(Protocol):
    rejected: dict[str, int]

    @property
    def connections(self) -> int: ...


class CountingSource(Protocol):
    """What the collector reads of a source (`capture.Source` has it)."""

    @property
    def name(self) -> str: ...

    def stats(self) -> SourceStats: ...


def _counter(m: md.MetricDef) -> CounterMetricFamily:
    return CounterMetricFamily(m.name, m.help, labels=m.labels)


def _gauge(m: md.MetricDef) -> GaugeMetricFamily:
    return GaugeMetricFamily(m.name, m.help, labels=m.labels)


class AgentCollector:
    """prometheus-client collector over the HTTP server's and the sources' counters."""

    def __init__(self, http: _HttpCounts | None = None, sources: Sequence[CountingSource] = ()) -> None:
        self.http = http
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        if self.http is not None:
            yield GaugeMetricFamily(md.HTTP_CONNECTIONS.name, md.HTTP_CONNECTIONS.help, value=self.http.connections)
            rejected = _counter(md.HTTP_REJECTED)
            for reason, count in sorted(dict(self.http.rejected).items()):
                rejected.add_metric([reason], count)
            yield rejected
        stats = [(src.name, src.stats()) for src in self.sources]
        yield from _server_metrics([(name, s) for name, s in stats if s.skips])
        yield from _peer_metrics([(name, s) for name, s in stats if s.has_peers])


def _peer_metrics(stats: Sequence[tuple[str, SourceStats]]) -> Iterator[Metric]:
    """Sources with peers (kineto-daemon): clients now and seen, what was dropped or evicted."""
    if not stats:
        return
    clients, seen = _gauge(md.DAEMON_CLIENTS), _counter(md.DAEMON_CLIENTS_SEEN)
    dropped, replies = _counter(md.DAEMON_DATAGRAMS_DROPPED), _counter(md.DAEMON_REPLIES_DROPPED)
    evicted, exits = _counter(md.DAEMON_CLIENTS_EVICTED), _counter(md.DAEMON_CLIENT_EXITS)
    for name, s in stats:
        clients.add_metric([name], s.clients or 0)
        seen.add_metric([name], s.clients_seen)
        exits.add_metric([name], s.exits_in_window)
        for family, counts in ((dropped, s.dropped), (replies, s.replies_dropped), (evicted, s.evicted)):
            for reason, count in sorted(counts.items()):
                family.add_metric([name, reason], count)
    yield from (clients, seen, dropped, replies, evicted, exits)


def _server_metrics(stats: Sequence[tuple[str, SourceStats]]) -> Iterator[Metric]:
    """Sources that skip windows on purpose (vllm, sglang): windows skipped by reason, trace files
    by kind (every known value)."""
    if not stats:
        return
    skipped, files = _counter(md.SERVER_WINDOWS_SKIPPED), _counter(md.SERVER_TRACE_FILES)
    for name, s in stats:
        for reason in SKIP_REASONS:
            skipped.add_metric([name, reason], (s.skipped or {}).get(reason, 0))
        for kind in FILE_KINDS:
            files.add_metric([name, kind], s.files.get(kind, 0))
    yield skipped
    yield files
