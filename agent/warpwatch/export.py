"""Prometheus export: window analyses -> immutable `Snapshot` -> a custom collector.

The service folds each round of finished windows into a `SnapshotBuilder` (one writer, off
the scrape path) and publishes the builder's `Snapshot` to the `SnapshotCollector` by swapping
one reference. A scrape only walks the current snapshot: it never parses or computes.

Gauges describe, per GPU, the last round that had kernel launches on that GPU; the kernel
series of that GPU are replaced as a whole, so kernels that disappeared are gone. A failed or
empty window changes no gauge. `_total` counters accumulate over all windows and never go back.

Merging windows of one round that cover the same `gpu` label (several processes or ranks, or
several files of one process):

1. windows of the same process (same source, labels and rank) are pooled over time: rates
   (`time_share`, `launch_rate`, GPU busy / resident warps / estimated occupancy) become
   sum(rate_i * W_i) / sum(W_i) over that process's windows that saw the GPU (a window that
   saw the GPU but not the kernel counts 0 for the kernel);
2. different processes on the same `gpu` ran side by side, so their rates add up (GPU busy
   ratio and estimated occupancy capped at 1, resident warps at the SM maximum);
3. per-kernel averages (warps per SM, occupancy, waves) are GPU-time-weighted means; the
   reported minimum is the minimum; counts add up.

A single window is exported exactly as analysed. Folding into `kernel="other"` uses the rules
of step 2-3: the top `top_kernels` kernels by corrected GPU time keep their label; the rest
are summed (time share, launch rate) or GPU-time-averaged (everything else) into `other`, and
`warpwatch_kernels_folded_total{gpu}` counts how many were folded.

`warpwatch_errors_total{stage,reason}` counts the faults the agent survived; its label values are
the fixed set `FAULTS`, all exported from the start (at 0) so that `rate()` sees the first one.
"""

from __future__ import annotations

import math
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from . import __version__
from . import metricdefs as md
from .capture import Outcome
from .labels import KernelNamer, label_text, name_text
from .model import DeviceProperties, DeviceStats, KernelStats, WindowAnalysis

OTHER = "other"
OUTCOMES: tuple[Outcome, ...] = ("ok", "empty", "failed", "timed_out")
FAULTS: tuple[tuple[str, str], ...] = (
    ("capture", "timed_out"),  # a source's window timed out, or its capture() did not return
    ("capture", "failed"),  # a source's window failed without a trace file (server error, unreadable folder)
    ("capture", "raised"),  # a source's capture() raised (a bug)
    ("capture", "skipped_busy"),  # a source still busy with an earlier capture was skipped
    ("read", "refused_symlink"),  # capture.confine: a link out of the trace folder
    ("read", "refused_not_regular_file"),  # a FIFO, socket, device or directory
    ("read", "refused_foreign_owner"),  # another user's file
    ("read", "io_error"),  # the file could not be opened or read
    ("read", "too_large"),  # larger than max_trace_bytes
    ("read", "invalid_trace"),  # empty, truncated, not JSON, not a Kineto trace
    ("analysis", "unexpected"),  # analysis raised (a bug)
    ("nvml", "gpu_lost"),  # NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus
    ("nvml", "error"),  # any other NVML error during a run
    ("clock", "jump"),  # the wall clock stepped by more than a second against the monotonic clock
    ("round", "overrun"),  # a scheduled round skipped: the previous one was still running
    ("round", "unexpected"),  # a round raised (a bug)
)
"""(stage, reason) of `warpwatch_errors_total`: public API, like metric names."""
Fault = tuple[str, str]
DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MAX_COUNTER_SERIES = 10_000
"""Per counter family: least recently updated (gpu, kernel[, artifact]) series beyond this are dropped."""

_RATES = ("time_share", "launch_rate")
_MEANS = ("warps_per_sm", "resident_warps_per_sm", "theoretical_occupancy", "estimated_occupancy", "waves_per_sm")


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
                    fam.add_metric([g.gpu], value)
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
# Merging and folding (pure functions over the analysis types)


def _weighted_mean(pairs: Iterable[tuple[float | None, float]]) -> float | None:
    """sum(w*x)/sum(w) over known x; plain mean when every weight is 0; None when nothing is known."""
    known = [(x, w) for x, w in pairs if x is not None]
    if not known:
        return None
    den = sum(w for _, w in known)
    if den > 0:
        return sum(x * w for x, w in known) / den
    return sum(x for x, _ in known) / len(known)


def _scaled_sum(pairs: Iterable[tuple[float | None, float]]) -> float | None:
    """sum(f*x) over known x; None when nothing is known."""
    known = [(x, f) for x, f in pairs if x is not None]
    if not known:
        return None
    return sum(x * f for x, f in known)


def combine_kernels(parts: Sequence[tuple[KernelStats, float]], *, device: int, name: str) -> KernelStats:
    """One `KernelStats` from several: rates are sum(factor * rate), averages GPU-time-weighted,
    counts summed, reported minimum the minimum. A single part with factor 1 is returned as is."""
    if len(parts) == 1 and parts[0][1] == 1.0:
        only = parts[0][0]
        return only if (only.device, only.name) == (device, name) else replace(only, device=device, name=name)
    artifacts: dict[str, int] = defaultdict(int)
    for k, _ in parts:
        for kind, n in k.artifacts.items():
            artifacts[kind] += n
    reported = [k.reported_warps_per_sm_min for k, _ in parts if k.reported_warps_per_sm_min is not None]
    heaviest = max(parts, key=lambda p: p[0].gpu_time)[0]
    means = {f: _weighted_mean((getattr(k, f), k.gpu_time) for k, _ in parts) for f in _MEANS}
    return KernelStats(
        device=device,
        name=name,
        samples=sum(k.samples for k, _ in parts),
        launches=sum(k.launches for k, _ in parts),
        launch_rate=_scaled_sum((k.launch_rate, f) for k, f in parts),
        gpu_time=sum(k.gpu_time for k, _ in parts),
        time_share=_scaled_sum((k.time_share, f) for k, f in parts),
        reported_warps_per_sm_min=min(reported) if reported else None,
        main_limiter=heaviest.main_limiter,
        artifacts=dict(artifacts),
        **means,
    )


def combine_devices(
    parts: Sequence[tuple[DeviceStats, float]], *, device: int, cap: bool
) -> DeviceStats:
    """One `DeviceStats` from several: rates are sum(factor * rate) (capped at 1 / at the SM's
    maximum warps when `cap`). A single part with factor 1 is returned as is."""
    if len(parts) == 1 and parts[0][1] == 1.0:
        return parts[0][0]
    props = next((d.properties for d, _ in parts if d.properties is not None), None)
    resident = _scaled_sum((d.resident_warps_per_sm, f) for d, f in parts)
    estimated = _scaled_sum((d.estimated_occupancy, f) for d, f in parts)
    busy = _scaled_sum((d.busy_ratio, f) for d, f in parts)
    if cap:
        if resident is not None and props is not None and props.max_warps_per_sm > 0:
            resident = min(resident, float(props.max_warps_per_sm))
        estimated = None if estimated is None else min(estimated, 1.0)
        busy = None if busy is None else min(busy, 1.0)
    return DeviceStats(
        device=device,
        properties=props,
        resident_warps_per_sm=resident,
        estimated_occupancy=estimated,
        busy_ratio=busy,
        samples=sum(d.samples for d, _ in parts),
        low_confidence=any(d.low_confidence for d, _ in parts),
    )


@dataclass(frozen=True, slots=True)
class GpuRound:
    """What one round says about one GPU: merged device and kernel statistics."""

    device: DeviceStats
    kernels: tuple[KernelStats, ...]
    """Sorted by GPU time, descending."""


def _gpus_of(analysis: WindowAnalysis) -> set[int]:
    return {d.device for d in analysis.devices} | {k.device for k in analysis.kernels}


def _pool_process(windows: Sequence[WindowAnalysis]) -> dict[int, GpuRound]:
    """Step 1 of the module doc: one process's windows pooled over time, per GPU over the
    windows that saw that GPU (so that files of several unnamed processes, one GPU each, are
    not diluted by each other)."""
    out: dict[int, GpuRound] = {}
    for gpu in sorted(set().union(*(_gpus_of(w) for w in windows))):
        covering = [w for w in windows if gpu in _gpus_of(w)]
        durations = [max(w.window.duration, 0.0) for w in covering]
        total = sum(durations)
        share = [d / total if total > 0 else 1.0 / len(covering) for d in durations]
        factors = [1.0] if len(covering) == 1 else share  # one window: exported exactly as analysed
        devs: list[tuple[DeviceStats, float]] = []
        kers: dict[str, list[tuple[KernelStats, float]]] = defaultdict(list)
        for analysis, factor in zip(covering, factors, strict=True):
            devs.extend((d, factor) for d in analysis.devices if d.device == gpu)
            for k in analysis.kernels:
                if k.device == gpu:
                    kers[k.name].append((k, factor))
        kernels = [combine_kernels(parts, device=gpu, name=name) for name, parts in kers.items()]
        if devs:
            device = combine_devices(devs, device=gpu, cap=True)
        else:
            device = DeviceStats(gpu, None, None, None, None, sum(k.samples for k in kernels), True)
        out[gpu] = GpuRound(device, tuple(_by_gpu_time(kernels)))
    return out


def _by_gpu_time(kernels: Iterable[KernelStats]) -> list[KernelStats]:
    return sorted(kernels, key=lambda k: (-k.gpu_time, k.name))


def merge_round(windows: Sequence[tuple[str, WindowAnalysis]]) -> dict[int, GpuRound]:
    """Merge one round's analyses, each tagged with its process identity, per GPU (module doc)."""
    by_process: dict[str, list[WindowAnalysis]] = defaultdict(list)
    for process, analysis in windows:
        by_process[process].append(analysis)
    pooled = [_pool_process(ws) for _, ws in sorted(by_process.items())]
    out: dict[int, GpuRound] = {}
    for gpu in sorted({g for p in pooled for g in p}):
        rounds = [p[gpu] for p in pooled if gpu in p]
        if len(rounds) == 1:
            out[gpu] = rounds[0]
            continue
        device = combine_devices([(r.device, 1.0) for r in rounds], device=gpu, cap=True)
        kers: dict[str, list[tuple[KernelStats, float]]] = defaultdict(list)
        for r in rounds:
            for k in r.kernels:
                kers[k.name].append((k, 1.0))
        kernels = [combine_kernels(parts, device=gpu, name=name) for name, parts in kers.items()]
        out[gpu] = GpuRound(device, tuple(_by_gpu_time(kernels)))
    return out


def fold_top_k(kernels: Sequence[KernelStats], k: int) -> tuple[list[KernelStats], KernelStats | None, int]:
    """The top `k` kernels by GPU time, the rest combined into one `other` entry, and how many
    were folded. `kernels` must be sorted by GPU time, descending."""
    top = list(kernels[:k])
    rest = kernels[k:]
    if not rest:
        return top, None, 0
    other = combine_kernels([(x, 1.0) for x in rest], device=rest[0].device, name=OTHER)
    return top, other, len(rest)


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
        namer: KernelNamer | None = None,
        version: str = __version__,
        max_counter_series: int = MAX_COUNTER_SERIES,
    ) -> None:
        self.top_kernels = top_kernels
        self.capture_duty = capture_duty
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
        """Merge the round's analysed windows per GPU and replace those GPUs' gauges."""
        analysed = [(r.process, r.analysis) for r in results
                    if r.analysis is not None and r.outcome == "ok"]
        for gpu, merged in merge_round(analysed).items():
            self._apply_gpu(gpu, merged)

    def _apply_gpu(self, gpu: int, merged: GpuRound) -> None:
        label = str(gpu)
        top, other, folded = fold_top_k(merged.kernels, self.top_kernels)
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
            self._launches.add((label, name), float(k.samples))
            for kind, n in k.artifacts.items():
                self._artifacts.add((label, name, kind), float(n))
        self._gpu_kernels[gpu] = tuple(rows)
        d = merged.device
        self._gpu_samples[gpu] = GpuSample(label, d.resident_warps_per_sm, d.estimated_occupancy, d.busy_ratio)
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
            version=self.version,
        )


def _gpu_sort_key(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)
