"""The evidence store as metrics (`metricdefs` EVIDENCE_*), read live at each scrape from the service's
`service.keeping.Evidence.view`. `EvidenceView`, the shape it reads, is defined here, where the
metrics are: the service fills it in, and this room imports nothing from `evidence/` (which is to
its right, tests/test_layers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from . import metricdefs as md


@dataclass(frozen=True, slots=True)
class EvidenceView:
    """What the evidence metrics show, read at each scrape: windows kept and failed by reason, and the
    folder's size now."""

    kept: Mapping[str, int]
    failed: Mapping[str, int]
    bytes: int
    files: int


class EvidenceCollector:
    """prometheus-client collector over an `EvidenceView` source (a callable, read per scrape)."""

    def __init__(self, view: Callable[[], EvidenceView]) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        v = self.view()
        for m, counts in ((md.EVIDENCE_KEPT, v.kept), (md.EVIDENCE_FAILED, v.failed)):
            family = CounterMetricFamily(m.name, m.help, labels=m.labels)
            for reason, n in counts.items():
                family.add_metric([reason], float(n))
            yield family
        yield GaugeMetricFamily(md.EVIDENCE_BYTES.name, md.EVIDENCE_BYTES.help, value=float(v.bytes))
        yield GaugeMetricFamily(md.EVIDENCE_FILES.name, md.EVIDENCE_FILES.help, value=float(v.files))

    def describe(self) -> Iterator[Metric]:
        return iter(())
