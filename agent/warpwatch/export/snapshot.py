"""The immutable `Snapshot` a scrape exposes, and the prometheus_client collector over it.

This is the scrape path: `SnapshotCollector.collect` only walks the current snapshot (families,
names, help and labels from `metricdefs`); it never parses or computes. `builder.SnapshotBuilder`
(the round path) builds the snapshots.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Exemplar

from .. import __version__
from ..model import FAULTS, OUTCOMES
from ..names.labels import label_text
from . import metricdefs as md

EXEMPLAR_LABEL = "evidence_id"
"""The exemplar label of the per-GPU counters: the id of a kept window (`/evidence/ID`)."""
DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

Sample = tuple[tuple[str, ...], float]
"""One sample of a metric: its label values, in the order of the definition's labels, and its value."""


# ---------------------------------------------------------------------------------------------
# The immutable snapshot


@dataclass(frozen=True, slots=True)
class GpuInfo:
    gpu: str
    name: str
    compute_capability: str
    sms: str
    vendor: str = ""
    uuid: str = ""


def gpu_info(gpu: str, name: str, compute_capability: str, sms: int | None, vendor: str, uuid: str | None) -> GpuInfo:
    """A `GpuInfo` from what a trace or NVML says of a device, its text made safe as label values."""
    return GpuInfo(
        gpu,
        label_text(name),
        label_text(compute_capability),
        "" if sms is None else str(sms),
        vendor,
        label_text(uuid or ""),
    )


@dataclass(frozen=True, slots=True)
class NvmlSample:
    gpu: str
    sm_occupancy: float | None = None
    """0..1 (NVML reports percent)."""
    utilization: float | None = None
    """0..1 (NVML reports percent)."""


@dataclass(frozen=True, slots=True)
class HistogramState:
    bounds: tuple[float, ...] = DEFAULT_BUCKETS
    counts: tuple[int, ...] = (0,) * (len(DEFAULT_BUCKETS) + 1)
    """Per bucket (not cumulative), the last one being +Inf."""
    total: float = 0.0

    def observe(self, value: float) -> HistogramState:
        index = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        counts = list(self.counts)
        counts[index] += 1
        return replace(self, counts=tuple(counts), total=self.total + value)

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += count
            out.append(("+Inf" if math.isinf(bound) else _float_text(bound), float(running)))
        return out


def _float_text(value: float) -> str:
    return repr(float(value))


def _initial_samples() -> dict[md.MetricDef, tuple[Sample, ...]]:
    """What an agent exposes before its first window: every outcome and fault at 0, NVML down."""
    return {
        md.WINDOWS: tuple(((o,), 0.0) for o in OUTCOMES),
        md.ERRORS: tuple(((stage, reason), 0.0) for stage, reason in FAULTS),
        md.NVML_UP: (((), 0.0),),
        md.BUILD_INFO: (((__version__,), 1.0),),
    }


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a scrape exposes, built once per round and then only read: each metric definition
    (`metricdefs.ALL`) with its samples (none when absent), and the processing-time histogram."""

    samples: Mapping[md.MetricDef, tuple[Sample, ...]] = field(default_factory=_initial_samples)
    processing: HistogramState = field(default_factory=HistogramState)
    evidence: Mapping[str, tuple[str, float]] = field(default_factory=dict)
    """Per `gpu` label, the last kept window that fed its counters (id, Unix time): exemplars of
    the per-GPU counters (`EXEMPLAR_LABEL`)."""

    def get(self, m: md.MetricDef) -> tuple[Sample, ...]:
        """The samples of one metric."""
        return self.samples.get(m, ())


# ---------------------------------------------------------------------------------------------
# The collector


def _family(m: md.MetricDef) -> GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily:
    """An empty family for a metric definition: name, help, labels and unit come from metricdefs."""
    if m.type == "counter":
        return CounterMetricFamily(m.name, m.help, labels=m.labels, unit=m.unit)
    if m.type == "histogram":
        return HistogramMetricFamily(m.name, m.help, labels=m.labels, unit=m.unit)
    return GaugeMetricFamily(m.name, m.help, labels=m.labels, unit=m.unit)


class SnapshotCollector:
    """A prometheus_client collector exposing the current `Snapshot` (families from metricdefs)."""

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self._snapshot = snapshot if snapshot is not None else Snapshot()

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def publish(self, snapshot: Snapshot) -> None:
        """Swap in a new snapshot (one reference assignment: atomic for concurrent scrapes)."""
        self._snapshot = snapshot

    def describe(self) -> Iterable[Metric]:
        return [_family(m) for m in md.ALL]

    def collect(self) -> Iterator[Metric]:
        """One family per definition of `metricdefs.ALL`, in its order, with the snapshot's samples."""
        s = self._snapshot
        for m in md.ALL:
            family = _family(m)
            if isinstance(family, HistogramMetricFamily):
                family.add_metric([], s.processing.cumulative(), s.processing.total)
            elif isinstance(family, CounterMetricFamily) and m.labels == md.GPU:
                for labels, value in s.samples.get(m, ()):
                    kept = s.evidence.get(labels[0])
                    family.add_metric(
                        list(labels),
                        value,
                        exemplar=None if kept is None else Exemplar({EXEMPLAR_LABEL: kept[0]}, value, kept[1]),
                    )
            else:
                for labels, value in s.samples.get(m, ()):
                    family.add_metric(list(labels), value)
            yield family
