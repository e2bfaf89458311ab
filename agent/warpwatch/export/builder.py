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
`MAX_COUNTER_SERIES` are dropped. What is kept of each GPU is one `gpustate.GpuState`; the
per-kernel counter series of all GPUs are one `gpustate.KernelSeries`. The immutable snapshot (each
metric definition with its samples) and its collector are `snapshot`'s.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain

from .. import __version__
from ..config.table import MAX_GPUS
from ..logs import RepeatFilter, limited_event
from ..model import FAULTS, OUTCOMES, DeviceStats, Fault, KernelStats, LaunchResources, Outcome, WindowAnalysis
from ..names.labels import KernelNamer, name_text
from . import metricdefs as md
from .gpustate import GpuState, KernelSeries
from .pooling import OTHER, GpuRound, GpuSums, KernelSums, StableTopK, fold, merge_round, round_sums
from .seriesbound import ABSENT_ROUNDS, MAX_COUNTER_SERIES, GpuBound
from .snapshot import GpuInfo, HistogramState, NvmlSample, Sample, Snapshot, SnapshotCollector, gpu_info

__all__ = [
    "FAULTS",
    "MAX_COUNTER_SERIES",
    "MAX_GPUS",
    "OTHER",
    "OUTCOMES",
    "Fault",
    "GpuInfo",
    "HistogramState",
    "NvmlSample",
    "Snapshot",
    "SnapshotBuilder",
    "SnapshotCollector",
    "WindowResult",
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


class SnapshotBuilder:
    """Folds finished windows into counters and per-GPU gauges; `snapshot()` freezes them.

    Used by one thread (the service's round job); the snapshots it returns are immutable.
    """

    def __init__(
        self,
        *,
        top_kernels: int,
        capture_duty: Callable[[], float] | None = None,
        capture_period: Callable[[], float] | None = None,
        capture_window: Callable[[], float] | None = None,
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
        """The window the agent asks for now, read at each snapshot (`--adaptive-window` lengthens it)."""
        self.namer = namer or KernelNamer()
        self.version = version
        self._windows: dict[str, float] = dict.fromkeys(OUTCOMES, 0.0)
        self._errors: dict[Fault, float] = dict.fromkeys(FAULTS, 0.0)
        self._histogram = HistogramState()
        self._last_ts: float | None = None
        self._gpus: dict[int, GpuState] = {}
        """Every GPU with series, and all that is kept of it (`gpustate.GpuState`)."""
        self._series = KernelSeries(max_counter_series)
        self._used: dict[str, frozenset[int]] = {}
        """GPUs each traced process has run kernels on (pooling: what a window observes)."""
        self._nvml_up = False
        self._nvml: tuple[NvmlSample, ...] = ()
        self._nvml_info: dict[str, GpuInfo] = {}
        self._bound = GpuBound(max_gpus)
        """The GPUs named by traces that have series (`seriesbound.GpuBound`)."""
        self._repeats = RepeatFilter()
        self._evidence: dict[int, tuple[str, float]] = {}
        """Per GPU, the id of the last kept window that fed its counters and when it was kept: exemplars."""

    # -- counters of every window

    def note_evidence(self, gpus: Iterable[int], evidence_id: str, now: float) -> None:
        """A window kept as evidence (`--evidence-dir`) fed these GPUs' counters: its id rides on them,
        as an OpenMetrics exemplar, until a later kept window replaces it."""
        for gpu in gpus:
            self._evidence[gpu] = (evidence_id, now)

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
        analysed = [(r.process, r.analysis) for r in results if r.analysis is not None and r.outcome in ("ok", "empty")]
        sums, used = round_sums(analysed, self._used)
        merged = merge_round([(p, a) for p, a in analysed if a.launch_count > 0])
        placed = self._place(sums.keys() | merged.keys(), analysed)
        # Only exported GPUs are remembered per process: what a trace names cannot grow memory.
        self._used = {p: frozenset(g for g in gpus if g in self._bound) for p, gpus in used.items()}
        for gpu in placed:
            state = self._gpus.setdefault(gpu, GpuState(StableTopK(self.top_kernels)))
            gpu_sums = sums.get(gpu, GpuSums())
            members, admitted = state.top.update({name: k.seconds for name, k in gpu_sums.kernels.items()})
            for k in merged[gpu].kernels if gpu in merged else ():
                if k.name in members:
                    self.namer(k.name)  # labels are given in order of GPU time (names.KernelNamer)
            self._count(gpu, state, gpu_sums, members, admitted)
            if gpu in merged:
                self._apply_gpu(gpu, state, merged[gpu], members, gpu_sums)

    def _place(self, gpus: set[int], analysed: Sequence[tuple[str, WindowAnalysis]]) -> tuple[int, ...]:
        """The round's GPUs that get series (`GpuBound`); the others are counted, and logged with the
        traced processes that named them, as `("export", "too_many_gpus")`."""
        placed = self._bound.admit(gpus)
        for gpu in placed.evicted:
            self._forget(gpu)
        dropped = len(placed.refused) + len(placed.evicted)
        if dropped:
            self.add_fault("export", "too_many_gpus", dropped)
            refused = frozenset(placed.refused)
            named = sorted(
                {
                    p
                    for p, a in analysed
                    if any(d.device in refused for d in a.devices) or any(k.device in refused for k in a.kernels)
                }
            )
            limited_event(
                log,
                self._repeats,
                ("too_many_gpus",),
                "gpus_dropped",
                logging.WARNING,
                refused=len(placed.refused),
                evicted=len(placed.evicted),
                max_gpus=self._bound.limit,
                first_refused=placed.refused[0] if placed.refused else None,
                processes=" ".join(named[:3]) + (f" +{len(named) - 3} more" if len(named) > 3 else ""),
                reason="more distinct GPU ids than max_gpus; the GPUs left out have no series this round",
            )
        return placed.admitted

    def _forget(self, gpu: int) -> None:
        """Remove every series of `gpu`, which lost its place to a newer GPU (`GpuBound`)."""
        del self._gpus[gpu]
        self._evidence.pop(gpu, None)
        self._series.drop_gpu(str(gpu))

    def _count(
        self, gpu: int, state: GpuState, sums: GpuSums, members: frozenset[str], admitted: frozenset[str]
    ) -> None:
        """Add one round's sums of `gpu` to its counters (module doc: series start at 0)."""
        label = str(gpu)
        # Out of the top-K for `absent_rounds` rounds: flat series, removed (no rate or increase changes).
        for kernel in state.expire(frozenset(self._label(name) for name in members), self.absent_rounds):
            self._series.drop_kernel(label, kernel)
        if state.totals is None:
            state.count(sums)
            for name in chain(sorted(members), (OTHER,)):
                self._series.start(label, self._label(name))
            return
        state.count(sums)
        by_label: dict[str, KernelSums] = {}
        for name, k in sums.kernels.items():
            label_name = self._label(name) if name in members and name not in admitted else OTHER
            by_label.setdefault(label_name, KernelSums()).merge(k)
        for name in admitted:
            self._series.start(label, self._label(name))
        for name, k in by_label.items():
            self._series.add(label, name, k)

    def _label(self, name: str) -> str:
        return OTHER if name == OTHER else self.namer(name)

    def _apply_gpu(self, gpu: int, state: GpuState, merged: GpuRound, members: frozenset[str], sums: GpuSums) -> None:
        """The gauges of `gpu`'s last round with kernels replace the previous ones."""
        label = str(gpu)
        top, other, folded = fold(merged.kernels, members)
        entries = [(self.namer(k.name), k) for k in top]
        gauges: dict[md.MetricDef, list[Sample]] = defaultdict(list)
        gauges[md.KERNEL_INFO] = [((label, name, name_text(k.name)), 1.0) for name, k in entries]
        gauges[md.KERNEL_LAUNCH_INFO] = [
            ((label, name, *_resource_labels(r)), 1.0) for name, k in entries if (r := k.main_resources) is not None
        ]
        if other is not None:
            entries.append((OTHER, other))
        for name, k in entries:
            for m, value in _kernel_gauges(k, self.kernel_gauges):
                gauges[m].append(((label, name), value))
        for m, value in _gpu_gauges(merged.device, sums):
            gauges[m].append(((label,), value))
        state.gauges = {m: tuple(samples) for m, samples in gauges.items()}
        if (p := merged.device.properties) is not None:
            state.info = gpu_info(label, p.name, p.compute_capability, p.num_sms, p.vendor, p.uuid)
        state.folded = (state.folded or 0.0) + folded

    # -- NVML

    def set_nvml(self, up: bool, samples: Sequence[NvmlSample], info: Mapping[str, GpuInfo]) -> None:
        """NVML's last reading, and its devices (`snapshot.gpu_info`) when it knows any."""
        self._nvml_up = up
        self._nvml = tuple(samples)
        if info:
            self._nvml_info = dict(info)

    # -- freeze

    def snapshot(self) -> Snapshot:
        """The samples of every metric now (`metricdefs.ALL`), immutable."""
        out: dict[md.MetricDef, list[Sample]] = defaultdict(list)
        for _, state in sorted(self._gpus.items()):
            for m, gauges in state.gauges.items():
                out[m].extend(gauges)
        for m, series in self._series.samples():
            out[m].extend(series)
        for gpu, state in sorted(self._gpus.items()):
            for m, total in (state.totals or {}).items():
                out[m].append(((str(gpu),), total))
        info = dict(self._nvml_info)
        info.update((str(gpu), s.info) for gpu, s in self._gpus.items() if s.info is not None)  # the trace's view wins
        out[md.GPU_INFO] = [
            ((i.gpu, i.name, i.compute_capability, i.sms, i.vendor, i.uuid), 1.0)
            for _, i in sorted(info.items(), key=lambda kv: _gpu_sort_key(kv[0]))
        ]
        out[md.WINDOWS] = [((o,), self._windows.get(o, 0.0)) for o in OUTCOMES]
        out[md.ERRORS] = [((stage, reason), n) for (stage, reason), n in self._errors.items()]
        window = self.capture_window() if self.capture_window is not None else None
        duty = self.capture_duty() if self.capture_duty is not None else None
        period = self.capture_period() if self.capture_period is not None else None
        for m, setting in (
            (md.LAST_WINDOW_TIMESTAMP, self._last_ts),
            (md.CAPTURE_DUTY, duty),
            (md.CAPTURE_PERIOD, period),
            (md.CAPTURE_WINDOW, window),
        ):
            if setting is not None:
                out[m].append(((), setting))
        out[md.KERNELS_FOLDED] = [
            ((str(gpu),), s.folded)
            for gpu, s in sorted(self._gpus.items(), key=lambda kv: _gpu_sort_key(str(kv[0])))
            if s.folded is not None
        ]
        for n in self._nvml:
            for m, ratio in ((md.NVML_SM_OCCUPANCY, n.sm_occupancy), (md.NVML_GPU_UTILIZATION, n.utilization)):
                if ratio is not None:
                    out[m].append(((n.gpu,), ratio))
        out[md.NVML_UP] = [((), 1.0 if self._nvml_up else 0.0)]
        out[md.BUILD_INFO] = [((self.version,), 1.0)]
        evidence = {str(gpu): kept for gpu, kept in self._evidence.items() if gpu in self._gpus}
        return Snapshot({m: tuple(samples) for m, samples in out.items()}, self._histogram, evidence)


def _kernel_gauges(k: KernelStats, every: bool) -> Iterable[tuple[md.MetricDef, float]]:
    """A kernel's last-round gauges: all of them with `every` (`--kernel-gauges`), else only a
    negative reported minimum (an artefact: the one gauge rates of the counters cannot give)."""
    if not every:
        reported = k.reported_warps_per_sm_min
        return [(md.KERNEL_REPORTED_WARPS_MIN, reported)] if reported is not None and reported < 0 else []
    values = {
        md.KERNEL_WARPS_PER_SM: k.warps_per_sm,
        md.KERNEL_RESIDENT_WARPS_PER_SM: k.resident_warps_per_sm,
        md.KERNEL_THEORETICAL_OCCUPANCY: k.theoretical_occupancy,
        md.KERNEL_ESTIMATED_OCCUPANCY: k.estimated_occupancy,
        md.KERNEL_WAVES_PER_SM: k.waves_per_sm,
        md.KERNEL_TIME_SHARE: k.time_share,
        md.KERNEL_LAUNCH_RATE: k.launch_rate,
        md.KERNEL_REPORTED_WARPS_MIN: k.reported_warps_per_sm_min,
    }
    return [(m, v) for m, v in values.items() if v is not None]


def _gpu_gauges(d: DeviceStats, sums: GpuSums) -> Iterable[tuple[md.MetricDef, float]]:
    """A GPU's last-round gauges (those it has)."""
    values = {
        md.GPU_RESIDENT_WARPS_PER_SM: d.resident_warps_per_sm,
        md.GPU_ESTIMATED_OCCUPANCY: d.estimated_occupancy,
        md.GPU_BUSY: d.busy_ratio,
        md.GPU_LONGEST_KERNEL_RATIO: sums.longest_ratio,
        md.GPU_LOW_CONFIDENCE: d.low_confidence,
    }
    return [(m, float(v)) for m, v in values.items() if v is not None]


def _resource_labels(r: LaunchResources) -> tuple[str, str, str]:
    """The launch-info labels: unknown registers or shared memory (older traces) read as empty."""
    regs, smem = r.registers_per_thread, r.shared_memory
    return (str(r.block_size), "" if regs is None else str(regs), "" if smem is None else str(smem))


def _gpu_sort_key(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)
