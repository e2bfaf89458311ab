"""What watching costs the server, as metrics (`metricdefs` CAPTURE_STOP, SERVED_SLOWDOWN, OVERHEAD,
OVERHEAD_BUDGET), read live at each scrape from the service's `overhead.OverheadLedger` view."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from ..overhead import OverheadView
from . import metricdefs as md


class OverheadCollector:
    """prometheus-client collector over an `OverheadView` source (a callable, read per scrape)."""

    def __init__(self, view: Callable[[], OverheadView]) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        v = self.view()
        yield GaugeMetricFamily(md.OVERHEAD_BUDGET.name, md.OVERHEAD_BUDGET.help, value=v.budget)
        if v.cost is not None:
            yield GaugeMetricFamily(md.OVERHEAD.name, md.OVERHEAD.help, value=v.cost)
        if v.slowdown:
            slow = GaugeMetricFamily(md.SERVED_SLOWDOWN.name, md.SERVED_SLOWDOWN.help, labels=md.SERVED_SLOWDOWN.labels)
            for source, ratio in sorted(v.slowdown.items()):
                slow.add_metric([source], ratio)
            yield slow
        if v.stops:
            stops = HistogramMetricFamily(
                md.CAPTURE_STOP.name, md.CAPTURE_STOP.help, labels=md.CAPTURE_STOP.labels, unit=""
            )
            for source, hist in sorted(v.stops.items()):
                stops.add_metric([source], [(le, float(n)) for le, n in hist.cumulative()], hist.total)
            yield stops

    def describe(self) -> Iterator[Metric]:
        return iter(())
