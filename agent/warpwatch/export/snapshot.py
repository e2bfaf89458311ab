"""The immutable `Snapshot` a scrape exposes, and the prometheus_client collector over it.

This is the scrape path: `SnapshotCollector.collect` only walks the current snapshot (families,
names, help and labels from `metricdefs`); it never parses or computes. `builder.SnapshotBuilder`
(the round path) builds the snapshots.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from .. import __version__
from ..model import FAULTS, OUTCOMES
from . import metricdefs as md
from .pooling import MEANS

DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

GPU_COUNTERS: tuple[md.MetricDef, ...] = (
    md.GPU_OBSERVED_SECONDS, md.GPU_BUSY_SECONDS, md.GPU_RESIDENT_WARPS_SECONDS, md.GPU_EMPTY_SECONDS,
    md.GPU_LOW_CONFIDENCE_SECONDS,
)
"""The per-GPU counters, in the order of `Snapshot.gpu_counters` values."""
KERNEL_COUNTERS: tuple[md.MetricDef, ...] = (
    md.KERNEL_SECONDS, md.KERNEL_LAUNCHES_ESTIMATED, *(md.KERNEL_MEAN_SECONDS[f] for f in MEANS),
)
"""The per-kernel sum counters, in the order of `Snapshot.kernel_counters` values."""


# ---------------------------------------------------------------------------------------------
# The immutable snapshot


@dataclass(frozen=True, slots=True)
class KernelSample:
    """One exported (gpu, kernel) row of gauges; None values export no sample."""

    gpu: str
    kernel: str
    warps_per_sm: float | None = None
    resident_warps_per_sm: float | None = None
    theoretical_occupancy: float | None = None
    estimated_occupancy: float | None = None
    waves_per_sm: float | None = None
    time_share: float | None = None
    launch_rate: float | None = None
    reported_warps_per_sm_min: float | None = None


@dataclass(frozen=True, slots=True)
class GpuSample:
    gpu: str
    resident_warps_per_sm: float | None = None
    estimated_occupancy: float | None = None
    busy_ratio: float | None = None
    longest_kernel_ratio: float | None = None
    low_confidence: bool | None = None


@dataclass(frozen=True, slots=True)
class GpuInfo:
    gpu: str
    name: str
    compute_capability: str
    sms: str
    vendor: str = ""
    uuid: str = ""


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


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a scrape exposes, built once per round and then only read."""

    kernels: tuple[KernelSample, ...] = ()
    gpus: tuple[GpuSample, ...] = ()
    gpu_info: tuple[GpuInfo, ...] = ()
    kernel_info: tuple[tuple[str, str, str], ...] = ()
    """(gpu, kernel label, full name) of the exported kernels."""
    nvml_up: bool = False
    nvml: tuple[NvmlSample, ...] = ()
    launches_observed: tuple[tuple[str, str, float], ...] = ()
    """(gpu, kernel, count)."""
    artifacts: tuple[tuple[str, str, str, float], ...] = ()
    """(gpu, kernel, artifact, count)."""
    windows: tuple[tuple[str, float], ...] = tuple((o, 0.0) for o in OUTCOMES)
    errors: tuple[tuple[str, str, float], ...] = tuple((stage, reason, 0.0) for stage, reason in FAULTS)
    """(stage, reason, count)."""
    kernels_folded: tuple[tuple[str, float], ...] = ()
    processing: HistogramState = field(default_factory=HistogramState)
    last_window_timestamp: float | None = None
    capture_duty: float | None = None
    capture_period: float | None = None
    capture_window: float | None = None
    gpu_counters: tuple[tuple[str, tuple[float, ...]], ...] = ()
    """(gpu, values in `GPU_COUNTERS` order)."""
    kernel_counters: tuple[tuple[str, str, tuple[float, ...]], ...] = ()
    """(gpu, kernel, values in `KERNEL_COUNTERS` order)."""
    version: str = __version__


# ---------------------------------------------------------------------------------------------
# The collector


def _family(m: md.MetricDef) -> GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily:
    """An empty family for a metric definition: name, help, labels and unit come from metricdefs."""
    if m.type == "counter":
        return CounterMetricFamily(m.name, m.help, labels=m.labels, unit=m.unit)
    if m.type == "histogram":
        return HistogramMetricFamily(m.name, m.help, labels=m.labels, unit=m.unit)
    return GaugeMetricFamily(m.name, m.help, labels=m.labels, unit=m.unit)


def _simple(m: md.MetricDef) -> GaugeMetricFamily | CounterMetricFamily:
    fam = _family(m)
    assert not isinstance(fam, HistogramMetricFamily), m.name
    return fam


_KERNEL_GAUGES: tuple[tuple[md.MetricDef, str], ...] = (
    (md.KERNEL_WARPS_PER_SM, "warps_per_sm"),
    (md.KERNEL_RESIDENT_WARPS_PER_SM, "resident_warps_per_sm"),
    (md.KERNEL_THEORETICAL_OCCUPANCY, "theoretical_occupancy"),
    (md.KERNEL_ESTIMATED_OCCUPANCY, "estimated_occupancy"),
    (md.KERNEL_WAVES_PER_SM, "waves_per_sm"),
    (md.KERNEL_TIME_SHARE, "time_share"),
    (md.KERNEL_LAUNCH_RATE, "launch_rate"),
    (md.KERNEL_REPORTED_WARPS_MIN, "reported_warps_per_sm_min"),
)
_GPU_GAUGES: tuple[tuple[md.MetricDef, str], ...] = (
    (md.GPU_RESIDENT_WARPS_PER_SM, "resident_warps_per_sm"),
    (md.GPU_ESTIMATED_OCCUPANCY, "estimated_occupancy"),
    (md.GPU_BUSY, "busy_ratio"),
    (md.GPU_LONGEST_KERNEL_RATIO, "longest_kernel_ratio"),
    (md.GPU_LOW_CONFIDENCE, "low_confidence"),
)


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
        s = self._snapshot
        for mdef, attr in _KERNEL_GAUGES:
            fam = _simple(mdef)
            for k in s.kernels:
                value = getattr(k, attr)
                if value is not None:
                    fam.add_metric([k.gpu, k.kernel], value)
            yield fam
        fam = _simple(md.KERNEL_LAUNCHES_OBSERVED)
        for gpu, kernel, count in s.launches_observed:
            fam.add_metric([gpu, kernel], count)
        yield fam
        fam = _simple(md.PROFILER_ARTIFACTS)
        for gpu, kernel, artifact, count in s.artifacts:
            fam.add_metric([gpu, kernel, artifact], count)
        yield fam
        for mdef, attr in _GPU_GAUGES:
            fam = _simple(mdef)
            for g in s.gpus:
                value = getattr(g, attr)
                if value is not None:
                    fam.add_metric([g.gpu], float(value))
            yield fam
        for i, mdef in enumerate(GPU_COUNTERS):
            fam = _simple(mdef)
            for gpu, values in s.gpu_counters:
                fam.add_metric([gpu], values[i])
            yield fam
        for i, mdef in enumerate(KERNEL_COUNTERS):
            fam = _simple(mdef)
            for gpu, kernel, values in s.kernel_counters:
                fam.add_metric([gpu, kernel], values[i])
            yield fam
        fam = _simple(md.GPU_INFO)
        for info in s.gpu_info:
            fam.add_metric([info.gpu, info.name, info.compute_capability, info.sms, info.vendor, info.uuid], 1.0)
        yield fam
        fam = _simple(md.KERNEL_INFO)
        for gpu, kernel, name in s.kernel_info:
            fam.add_metric([gpu, kernel, name], 1.0)
        yield fam
        fam = _simple(md.WINDOWS)
        for outcome, count in s.windows:
            fam.add_metric([outcome], count)
        yield fam
        fam = _simple(md.ERRORS)
        for stage, reason, count in s.errors:
            fam.add_metric([stage, reason], count)
        yield fam
        hist = HistogramMetricFamily(md.WINDOW_PROCESSING.name, md.WINDOW_PROCESSING.help,
                                     unit=md.WINDOW_PROCESSING.unit)
        hist.add_metric([], s.processing.cumulative(), s.processing.total)
        yield hist
        fam = _simple(md.LAST_WINDOW_TIMESTAMP)
        if s.last_window_timestamp is not None:
            fam.add_metric([], s.last_window_timestamp)
        yield fam
        fam = _simple(md.CAPTURE_DUTY)
        if s.capture_duty is not None:
            fam.add_metric([], s.capture_duty)
        yield fam
        for mdef, value in ((md.CAPTURE_PERIOD, s.capture_period), (md.CAPTURE_WINDOW, s.capture_window)):
            fam = _simple(mdef)
            if value is not None:
                fam.add_metric([], value)
            yield fam
        fam = _simple(md.KERNELS_FOLDED)
        for gpu, count in s.kernels_folded:
            fam.add_metric([gpu], count)
        yield fam
        occ = _simple(md.NVML_SM_OCCUPANCY)
        util = _simple(md.NVML_GPU_UTILIZATION)
        for n in s.nvml:
            if n.sm_occupancy is not None:
                occ.add_metric([n.gpu], n.sm_occupancy)
            if n.utilization is not None:
                util.add_metric([n.gpu], n.utilization)
        yield occ
        yield util
        fam = _simple(md.NVML_UP)
        fam.add_metric([], 1.0 if s.nvml_up else 0.0)
        yield fam
        fam = _simple(md.BUILD_INFO)
        fam.add_metric([s.version], 1.0)
        yield fam
