"""Prometheus export: window analyses -> immutable `Snapshot` -> a custom collector.

The service folds each round of finished windows into a `SnapshotBuilder` (one writer, off
the scrape path) and publishes the builder's `Snapshot` to the `SnapshotCollector` by swapping
one reference. A scrape only walks the current snapshot: it never parses or computes.

Gauges describe, per GPU, the last round that had kernel launches on that GPU; the kernel
series of that GPU are replaced as a whole, so kernels that disappeared are gone. A failed or
empty window changes no gauge. `_total` counters accumulate over all windows and never go back.

Counters of corrected window sums (docs/metrics.md, "Aggregation over time and across pods"):
`pooling.round_sums` gives each round's increments per GPU and kernel; they are added to
`warpwatch_gpu_*_seconds_total` and `warpwatch_kernel_*_total`. Dashboards divide rates of these.
A kernel has its own label while it is in its GPU's stable top-K (`pooling.StableTopK`); the
rest add up under `kernel="other"`, so a GPU's kernel seconds, `other` included, add up to its
total corrected kernel time whatever the membership. Prometheus counts an increase only from a
series' first sample, so every series is first published at 0: the round in which a GPU is first
seen only creates its series (its sums are not counted, for numerators and denominators alike),
and a kernel admitted to the top-K counts under `other` in the round of its admission.

Gauges describe the last round (for "now" tables): `pooling.merge_round` merges the round's
windows per GPU, and the top-K members keep their label (the rest fold into `other`;
`warpwatch_kernels_folded_total{gpu}` counts them).

`warpwatch_errors_total{stage,reason}` counts the faults the agent survived; its label values are
the fixed set `FAULTS`, all exported from the start (at 0) so that `rate()` sees the first one.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from . import __version__
from . import metricdefs as md
from .labels import KernelNamer, label_text, name_text
from .model import FAULTS, OUTCOMES, DeviceProperties, Fault, Outcome, WindowAnalysis
from .pooling import MEANS, OTHER, GpuRound, GpuSums, KernelSums, StableTopK, fold, merge_round, round_sums

__all__ = ["FAULTS", "OTHER", "OUTCOMES", "Fault", "Snapshot", "SnapshotBuilder", "SnapshotCollector", "WindowResult"]
DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MAX_COUNTER_SERIES = 10_000
"""Per counter family: least recently updated (gpu, kernel[, artifact]) series beyond this are dropped."""

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


# ---------------------------------------------------------------------------------------------
# The builder (mutable, one writer)


@dataclass(frozen=True, slots=True)
class WindowResult:
    """One analysed (or failed) window, as the service hands it to the builder."""

    source: str
    process: str
    """Identity of the traced process (source, labels, rank): windows of one process are pooled."""
    outcome: Outcome
    seconds: float | None = None
    """Processing time (read + analyse); None when there was no file to process."""
    analysis: WindowAnalysis | None = None
    fault: Fault | None = None
    """Why the window failed or timed out: one of `FAULTS`."""


class _LruCounter:
    """Counter values keyed by label tuples, bounded by dropping the least recently updated."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._values: OrderedDict[tuple[str, ...], float] = OrderedDict()

    def add(self, key: tuple[str, ...], value: float) -> None:
        self._values[key] = self._values.get(key, 0.0) + value
        self._values.move_to_end(key)
        while len(self._values) > self._limit:
            self._values.popitem(last=False)

    def items(self) -> list[tuple[tuple[str, ...], float]]:
        return sorted(self._values.items())


class _LruSums:
    """Like `_LruCounter`, with a vector of counter values per key (updated together)."""

    def __init__(self, limit: int, width: int) -> None:
        self._limit = limit
        self._width = width
        self._values: OrderedDict[tuple[str, ...], list[float]] = OrderedDict()

    def add(self, key: tuple[str, ...], values: Sequence[float]) -> None:
        row = self._values.setdefault(key, [0.0] * self._width)
        for i, v in enumerate(values):
            row[i] += v
        self._values.move_to_end(key)
        while len(self._values) > self._limit:
            self._values.popitem(last=False)

    def items(self) -> list[tuple[tuple[str, ...], tuple[float, ...]]]:
        return [(k, tuple(v)) for k, v in sorted(self._values.items())]


def _info_of(gpu: str, props: DeviceProperties) -> GpuInfo:
    return GpuInfo(gpu, label_text(props.name), label_text(props.compute_capability), str(props.num_sms),
                   props.vendor, label_text(props.uuid or ""))


class SnapshotBuilder:
    """Folds finished windows into counters and per-GPU gauges; `snapshot()` freezes them.

    Used by one thread (the service's round job); the snapshots it returns are immutable.
    """

    def __init__(
        self,
        *,
        top_kernels: int,
        capture_duty: float | None = None,
        capture_period: float | None = None,
        capture_window: float | None = None,
        namer: KernelNamer | None = None,
        version: str = __version__,
        max_counter_series: int = MAX_COUNTER_SERIES,
    ) -> None:
        self.top_kernels = top_kernels
        self.capture_duty = capture_duty
        self.capture_period = capture_period
        self.capture_window = capture_window
        """The window the agent asks for now; the service updates it when it adapts (`--adaptive-window`)."""
        self.namer = namer or KernelNamer()
        self.version = version
        self._windows: dict[str, float] = dict.fromkeys(OUTCOMES, 0.0)
        self._errors: dict[Fault, float] = dict.fromkeys(FAULTS, 0.0)
        self._histogram = HistogramState()
        self._last_ts: float | None = None
        self._gpu_kernels: dict[int, tuple[KernelSample, ...]] = {}
        self._gpu_samples: dict[int, GpuSample] = {}
        self._trace_info: dict[int, GpuInfo] = {}
        self._kernel_names: dict[int, tuple[tuple[str, str, str], ...]] = {}
        self._launches = _LruCounter(max_counter_series)
        self._artifacts = _LruCounter(max_counter_series)
        self._folded: dict[str, float] = {}
        self._used: dict[str, frozenset[int]] = {}
        """GPUs each traced process has run kernels on (pooling: what a window observes)."""
        self._top: dict[int, StableTopK] = {}
        self._gpu_totals: dict[int, list[float]] = {}
        self._kernel_totals = _LruSums(max_counter_series, len(KERNEL_COUNTERS))
        self._nvml_up = False
        self._nvml: tuple[NvmlSample, ...] = ()
        self._nvml_info: dict[str, GpuInfo] = {}

    # -- counters of every window

    def record(self, result: WindowResult, now: float) -> None:
        """Count one finished window (any outcome)."""
        self._windows[result.outcome] = self._windows.get(result.outcome, 0.0) + 1
        if result.fault is not None:
            self.add_fault(*result.fault)
        if result.seconds is not None:
            self._histogram = self._histogram.observe(result.seconds)
        self._last_ts = now

    def add_fault(self, stage: str, reason: str, count: int = 1) -> None:
        """Count a fault outside any window (NVML, clock, an overrun round); see `FAULTS`."""
        self._errors[(stage, reason)] = self._errors.get((stage, reason), 0.0) + count

    # -- gauges and per-kernel counters of a round's analysed windows

    def apply_round(self, results: Sequence[WindowResult]) -> None:
        """Add the round's analysed windows (ok and empty) to the counters; replace the gauges of
        the GPUs on which the round captured kernels."""
        analysed = [(r.process, r.analysis) for r in results
                    if r.analysis is not None and r.outcome in ("ok", "empty")]
        sums, self._used = round_sums(analysed, self._used)
        merged = merge_round([(p, a) for p, a in analysed if a.launch_count > 0])
        for gpu in sorted(sums.keys() | merged.keys()):
            top = self._top.setdefault(gpu, StableTopK(self.top_kernels))
            gpu_sums = sums.get(gpu, GpuSums())
            members, admitted = top.update({name: k.seconds for name, k in gpu_sums.kernels.items()})
            for k in merged[gpu].kernels if gpu in merged else ():
                if k.name in members:
                    self.namer(k.name)  # labels are given in order of GPU time (names.KernelNamer)
            self._count(gpu, gpu_sums, members, admitted)
            if gpu in merged:
                self._apply_gpu(gpu, merged[gpu], members, gpu_sums)

    def _count(self, gpu: int, sums: GpuSums, members: frozenset[str], admitted: frozenset[str]) -> None:
        """Add one round's sums of `gpu` to its counters (module doc: series start at 0)."""
        label = str(gpu)
        zero = [0.0] * len(KERNEL_COUNTERS)
        if gpu not in self._gpu_totals:
            self._gpu_totals[gpu] = [0.0] * len(GPU_COUNTERS)
            for name in chain(sorted(members), (OTHER,)):
                self._kernel_totals.add((label, self._label(name)), zero)
                self._launches.add((label, self._label(name)), 0.0)
            return
        totals = self._gpu_totals[gpu]
        for i, v in enumerate((sums.observed, sums.busy, sums.resident_warps, sums.empty, sums.low_confidence)):
            totals[i] += v
        by_label: dict[str, KernelSums] = {}
        for name, k in sums.kernels.items():
            label_name = self._label(name) if name in members and name not in admitted else OTHER
            by_label.setdefault(label_name, KernelSums()).merge(k)
        for name in admitted:
            self._kernel_totals.add((label, self._label(name)), zero)
            self._launches.add((label, self._label(name)), 0.0)
        for name, k in by_label.items():
            self._kernel_totals.add((label, name), (k.seconds, k.launches, *(k.x_seconds[f] for f in MEANS)))
            self._launches.add((label, name), float(k.samples))
            for kind, n in k.artifacts.items():
                self._artifacts.add((label, name, kind), float(n))

    def _label(self, name: str) -> str:
        return OTHER if name == OTHER else self.namer(name)

    def _apply_gpu(self, gpu: int, merged: GpuRound, members: frozenset[str], sums: GpuSums) -> None:
        label = str(gpu)
        top, other, folded = fold(merged.kernels, members)
        rows: list[KernelSample] = []
        entries = [(self.namer(k.name), k) for k in top]
        self._kernel_names[gpu] = tuple((label, str(gpu), name_text(k.name)) for label, k in entries)
        if other is not None:
            entries.append((OTHER, other))
        for name, k in entries:
            rows.append(KernelSample(
                gpu=label, kernel=name,
                warps_per_sm=k.warps_per_sm,
                resident_warps_per_sm=k.resident_warps_per_sm,
                theoretical_occupancy=k.theoretical_occupancy,
                estimated_occupancy=k.estimated_occupancy,
                waves_per_sm=k.waves_per_sm,
                time_share=k.time_share,
                launch_rate=k.launch_rate,
                reported_warps_per_sm_min=k.reported_warps_per_sm_min,
            ))
        self._gpu_kernels[gpu] = tuple(rows)
        d = merged.device
        self._gpu_samples[gpu] = GpuSample(label, d.resident_warps_per_sm, d.estimated_occupancy, d.busy_ratio,
                                           sums.longest_ratio, d.low_confidence)
        if d.properties is not None:
            self._trace_info[gpu] = _info_of(label, d.properties)
        self._folded[label] = self._folded.get(label, 0.0) + folded

    # -- NVML

    def set_nvml(self, up: bool, samples: Sequence[NvmlSample], info: Mapping[str, GpuInfo]) -> None:
        self._nvml_up = up
        self._nvml = tuple(samples)
        if info:
            self._nvml_info = {
                k: replace(i, name=label_text(i.name), compute_capability=label_text(i.compute_capability),
                           uuid=label_text(i.uuid))
                for k, i in info.items()
            }

    # -- freeze

    def snapshot(self) -> Snapshot:
        info = dict(self._nvml_info)
        for gpu, i in self._trace_info.items():
            info[str(gpu)] = i  # the traced process's own view wins for its gpu index
        return Snapshot(
            kernels=tuple(row for gpu in sorted(self._gpu_kernels) for row in self._gpu_kernels[gpu]),
            gpus=tuple(self._gpu_samples[g] for g in sorted(self._gpu_samples)),
            gpu_info=tuple(info[g] for g in sorted(info, key=_gpu_sort_key)),
            kernel_info=tuple((gpu, label, name) for g in sorted(self._kernel_names)
                              for label, gpu, name in self._kernel_names[g]),
            nvml_up=self._nvml_up,
            nvml=self._nvml,
            launches_observed=tuple((k[0], k[1], v) for k, v in self._launches.items()),
            artifacts=tuple((k[0], k[1], k[2], v) for k, v in self._artifacts.items()),
            windows=tuple((o, self._windows.get(o, 0.0)) for o in OUTCOMES),
            errors=tuple((stage, reason, n) for (stage, reason), n in self._errors.items()),
            kernels_folded=tuple(sorted(self._folded.items(), key=lambda kv: _gpu_sort_key(kv[0]))),
            processing=self._histogram,
            last_window_timestamp=self._last_ts,
            capture_duty=self.capture_duty,
            capture_period=self.capture_period,
            capture_window=self.capture_window,
            gpu_counters=tuple((str(g), tuple(self._gpu_totals[g])) for g in sorted(self._gpu_totals)),
            kernel_counters=tuple((k[0], k[1], v) for k, v in self._kernel_totals.items()),
            version=self.version,
        )


def _gpu_sort_key(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)
