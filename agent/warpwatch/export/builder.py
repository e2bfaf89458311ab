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

Traces are input, so what they name is bounded (`seriesbound`): at most `max_gpus` GPUs have
series (`GpuBound`: a GPU left out or displaced counts as `("export", "too_many_gpus")`, and a
displaced GPU's series all go), and per counter family the least recently updated series beyond
`MAX_COUNTER_SERIES` are dropped. The immutable snapshot and its collector are `snapshot`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import chain

from .. import __version__
from ..config import MAX_GPUS
from ..logs import RepeatFilter, limited_event
from ..model import FAULTS, OUTCOMES, DeviceProperties, Fault, Outcome, WindowAnalysis
from ..names.labels import KernelNamer, label_text, name_text
from .pooling import MEANS, OTHER, GpuRound, GpuSums, KernelSums, StableTopK, fold, merge_round, round_sums
from .seriesbound import ABSENT_ROUNDS, MAX_COUNTER_SERIES, GpuBound, LruCounter, LruSums
from .snapshot import (
    GPU_COUNTERS,
    KERNEL_COUNTERS,
    GpuInfo,
    GpuSample,
    HistogramState,
    KernelSample,
    NvmlSample,
    Snapshot,
    SnapshotCollector,
)

__all__ = [
    "FAULTS", "GPU_COUNTERS", "KERNEL_COUNTERS", "MAX_COUNTER_SERIES", "MAX_GPUS", "OTHER", "OUTCOMES", "Fault",
    "GpuInfo", "GpuSample", "HistogramState", "KernelSample", "NvmlSample", "Snapshot", "SnapshotBuilder",
    "SnapshotCollector", "WindowResult",
]
log = logging.getLogger("warpwatch.export")


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
        max_gpus: int = MAX_GPUS,
        kernel_gauges: bool = False,
        absent_rounds: int = ABSENT_ROUNDS,
    ) -> None:
        self.top_kernels = top_kernels
        self.kernel_gauges = kernel_gauges
        """Export the per-kernel last-round gauges (opt-in); without, only a negative reported minimum."""
        self.absent_rounds = absent_rounds
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
        self._launches = LruCounter(max_counter_series)
        self._artifacts = LruCounter(max_counter_series)
        self._folded: dict[str, float] = {}
        self._used: dict[str, frozenset[int]] = {}
        """GPUs each traced process has run kernels on (pooling: what a window observes)."""
        self._top: dict[int, StableTopK] = {}
        self._gpu_totals: dict[int, list[float]] = {}
        self._kernel_totals = LruSums(max_counter_series, len(KERNEL_COUNTERS))
        self._rounds: dict[int, int] = {}
        """Rounds that updated each GPU."""
        self._member_round: dict[tuple[str, str], int] = {}
        """(gpu, kernel label) with counter series -> the last round of its GPU it was in the top-K."""
        self._nvml_up = False
        self._nvml: tuple[NvmlSample, ...] = ()
        self._nvml_info: dict[str, GpuInfo] = {}
        self._gpus = GpuBound(max_gpus)
        """The GPUs named by traces that have series (`seriesbound.GpuBound`)."""
        self._repeats = RepeatFilter()

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
        sums, used = round_sums(analysed, self._used)
        merged = merge_round([(p, a) for p, a in analysed if a.launch_count > 0])
        placed = self._place(sums.keys() | merged.keys(), analysed)
        # Only exported GPUs are remembered per process: what a trace names cannot grow memory.
        self._used = {p: frozenset(g for g in gpus if g in self._gpus) for p, gpus in used.items()}
        for gpu in placed:
            top = self._top.setdefault(gpu, StableTopK(self.top_kernels))
            gpu_sums = sums.get(gpu, GpuSums())
            members, admitted = top.update({name: k.seconds for name, k in gpu_sums.kernels.items()})
            for k in merged[gpu].kernels if gpu in merged else ():
                if k.name in members:
                    self.namer(k.name)  # labels are given in order of GPU time (names.KernelNamer)
            self._count(gpu, gpu_sums, members, admitted)
            if gpu in merged:
                self._apply_gpu(gpu, merged[gpu], members, gpu_sums)

    def _place(self, gpus: set[int], analysed: Sequence[tuple[str, WindowAnalysis]]) -> tuple[int, ...]:
        """The round's GPUs that get series (`GpuBound`); the others are counted, and logged with the
        traced processes that named them, as `("export", "too_many_gpus")`."""
        placed = self._gpus.admit(gpus)
        for gpu in placed.evicted:
            self._forget(gpu)
        dropped = len(placed.refused) + len(placed.evicted)
        if dropped:
            self.add_fault("export", "too_many_gpus", dropped)
            refused = frozenset(placed.refused)
            named = sorted({p for p, a in analysed if any(d.device in refused for d in a.devices)
                            or any(k.device in refused for k in a.kernels)})
            limited_event(log, self._repeats, ("too_many_gpus",), "gpus_dropped", logging.WARNING,
                          refused=len(placed.refused), evicted=len(placed.evicted), max_gpus=self._gpus.limit,
                          first_refused=placed.refused[0] if placed.refused else None,
                          processes=" ".join(named[:3]) + (f" +{len(named) - 3} more" if len(named) > 3 else ""),
                          reason="more distinct GPU ids than max_gpus; the GPUs left out have no series "
                                 "this round")
        return placed.admitted

    def _forget(self, gpu: int) -> None:
        """Remove every series of `gpu`, which lost its place to a newer GPU (`GpuBound`)."""
        label = str(gpu)
        self._gpu_kernels.pop(gpu, None)
        self._gpu_samples.pop(gpu, None)
        self._trace_info.pop(gpu, None)
        self._kernel_names.pop(gpu, None)
        self._top.pop(gpu, None)
        self._gpu_totals.pop(gpu, None)
        self._folded.pop(label, None)
        self._rounds.pop(gpu, None)
        self._member_round = {k: v for k, v in self._member_round.items() if k[0] != label}
        for series in (self._launches, self._artifacts, self._kernel_totals):
            series.drop_gpu(label)

    def _count(self, gpu: int, sums: GpuSums, members: frozenset[str], admitted: frozenset[str]) -> None:
        """Add one round's sums of `gpu` to its counters (module doc: series start at 0)."""
        label = str(gpu)
        zero = [0.0] * len(KERNEL_COUNTERS)
        self._expire(gpu, members)
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

    def _expire(self, gpu: int, members: frozenset[str]) -> None:
        """Remove the counter series of `gpu`'s kernels out of its top-K for `absent_rounds` rounds
        (`seriesbound.ABSENT_ROUNDS`: they are flat, so no rate or increase changes)."""
        label = str(gpu)
        now = self._rounds[gpu] = self._rounds.get(gpu, 0) + 1
        for name in members:
            self._member_round[(label, self._label(name))] = now
        stale = [k for k, last in self._member_round.items() if k[0] == label and now - last >= self.absent_rounds]
        for key in stale:
            del self._member_round[key]
            for series in (self._launches, self._artifacts, self._kernel_totals):
                series.drop_kernel(*key)

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
            if not self.kernel_gauges:
                reported = k.reported_warps_per_sm_min
                if reported is not None and reported < 0:  # an artefact: the one gauge rates cannot give
                    rows.append(KernelSample(gpu=label, kernel=name, reported_warps_per_sm_min=reported))
                continue
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
