"""What `builder.SnapshotBuilder` keeps: one `GpuState` per GPU with series, and the per-kernel counter
series of all GPUs (`KernelSeries`, bounded per family across GPUs by `seriesbound`).

Each round's sums become samples of named metric definitions here (`gpu_sums`, `kernel_sums`), so
that the snapshot maps each definition to its samples and nothing depends on an order of values.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from . import metricdefs as md
from .pooling import MEANS, GpuSums, KernelSums, StableTopK
from .seriesbound import LruCounter, LruSums
from .snapshot import GpuInfo, Sample

__all__ = ["KERNEL_SUMS", "GpuState", "KernelSeries", "gpu_sums", "kernel_sums"]


def gpu_sums(s: GpuSums) -> dict[md.MetricDef, float]:
    """A round's increments of one GPU's counters."""
    return {
        md.GPU_OBSERVED_SECONDS: s.observed,
        md.GPU_BUSY_SECONDS: s.busy,
        md.GPU_RESIDENT_WARPS_SECONDS: s.resident_warps,
        md.GPU_EMPTY_SECONDS: s.empty,
        md.GPU_LOW_CONFIDENCE_SECONDS: s.low_confidence,
    }


def kernel_sums(k: KernelSums) -> dict[md.MetricDef, float]:
    """A round's increments of one (GPU, kernel) row of sum counters."""
    return {
        md.KERNEL_SECONDS: k.seconds,
        md.KERNEL_LAUNCHES_ESTIMATED: k.launches,
        **{md.KERNEL_MEAN_SECONDS[f]: k.x_seconds[f] for f in MEANS},
    }


KERNEL_SUMS: tuple[md.MetricDef, ...] = tuple(kernel_sums(KernelSums()))
"""The sum counters of a kernel, in the order `KernelSeries` keeps each row."""


@dataclass(slots=True)
class GpuState:
    """Everything the builder keeps of one GPU: forgetting the GPU is removing its state (and its
    rows in `KernelSeries`)."""

    top: StableTopK
    """The kernels with their own label (`pooling.StableTopK`)."""
    totals: dict[md.MetricDef, float] | None = None
    """The GPU's counters; None until the round that creates their series at 0."""
    rounds: int = 0
    """Rounds that updated the GPU."""
    members: dict[str, int] = field(default_factory=dict)
    """Kernel label with counter series -> the last round of this GPU it was in the top-K."""
    gauges: dict[md.MetricDef, tuple[Sample, ...]] = field(default_factory=dict)
    """The last round with kernels on this GPU: its gauges (GPU and kernel) and `warpwatch_kernel_info`."""
    info: GpuInfo | None = None
    """The device as the traced process saw it (wins over NVML's view of the same index)."""
    folded: float | None = None
    """Kernels folded into `other`, over all rounds; None before the first round with kernels."""

    def count(self, sums: GpuSums) -> None:
        """Add a round's sums to the GPU's counters (created at 0 on the first call)."""
        if self.totals is None:
            self.totals = dict.fromkeys(gpu_sums(sums), 0.0)
            return
        for m, v in gpu_sums(sums).items():
            self.totals[m] += v

    def expire(self, members: frozenset[str], absent_rounds: int) -> list[str]:
        """Start a round with `members` (kernel labels) in the top-K; the labels out of it for
        `absent_rounds` rounds, whose series go."""
        self.rounds += 1
        for label in members:
            self.members[label] = self.rounds
        stale = [label for label, last in self.members.items() if self.rounds - last >= absent_rounds]
        for label in stale:
            del self.members[label]
        return stale


class KernelSeries:
    """The per-kernel counter series of every GPU, keyed (gpu, kernel[, artifact]); each family
    keeps at most `limit` series, the least recently updated going first."""

    def __init__(self, limit: int) -> None:
        self.launches = LruCounter(limit)
        self.artifacts = LruCounter(limit)
        self.sums = LruSums(limit, len(KERNEL_SUMS))

    def start(self, gpu: str, kernel: str) -> None:
        """Series of a kernel that gets its own label, first published at 0."""
        self.sums.add((gpu, kernel), [0.0] * len(KERNEL_SUMS))
        self.launches.add((gpu, kernel), 0.0)

    def add(self, gpu: str, kernel: str, k: KernelSums) -> None:
        values = kernel_sums(k)
        self.sums.add((gpu, kernel), [values[m] for m in KERNEL_SUMS])
        self.launches.add((gpu, kernel), float(k.samples))
        for kind, n in k.artifacts.items():
            self.artifacts.add((gpu, kernel, kind), float(n))

    def drop_kernel(self, gpu: str, kernel: str) -> None:
        for series in (self.launches, self.artifacts, self.sums):
            series.drop_kernel(gpu, kernel)

    def drop_gpu(self, gpu: str) -> None:
        for series in (self.launches, self.artifacts, self.sums):
            series.drop_gpu(gpu)

    def samples(self) -> Iterator[tuple[md.MetricDef, list[Sample]]]:
        yield md.KERNEL_LAUNCHES_OBSERVED, [(k, v) for k, v in self.launches.items()]
        yield md.PROFILER_ARTIFACTS, [(k, v) for k, v in self.artifacts.items()]
        rows = self.sums.items()
        for i, m in enumerate(KERNEL_SUMS):
            yield m, [(k, values[i]) for k, values in rows]
