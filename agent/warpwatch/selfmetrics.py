"""The agent's own operational metrics (`metricdefs.AGENT`), read live at each scrape.

`AgentCollector` reads counters that the HTTP server and the sources keep themselves (plain
integers, read without locking: a scrape may see a count one behind). A source reports by
having a `stats()` method returning `SourceStats`; the Kineto daemon source does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from . import metricdefs as md
from .capture import SourceStats


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
        stats = [(src.name, src.stats()) for src in self.sources if callable(getattr(src, "stats", None))]
        stats = [(name, s) for name, s in stats if isinstance(s, SourceStats)]
        if not stats:
            return
        clients = GaugeMetricFamily(md.DAEMON_CLIENTS.name, md.DAEMON_CLIENTS.help, labels=md.DAEMON_CLIENTS.labels)
        seen = CounterMetricFamily(md.DAEMON_CLIENTS_SEEN.name, md.DAEMON_CLIENTS_SEEN.help,
                                   labels=md.DAEMON_CLIENTS_SEEN.labels)
        dropped = CounterMetricFamily(md.DAEMON_DATAGRAMS_DROPPED.name, md.DAEMON_DATAGRAMS_DROPPED.help,
                                      labels=md.DAEMON_DATAGRAMS_DROPPED.labels)
        for name, s in stats:
            clients.add_metric([name], s.clients)
            seen.add_metric([name], s.clients_seen)
            for reason, count in sorted(s.dropped.items()):
                dropped.add_metric([name, reason], count)
        yield clients
        yield seen
        yield dropped
