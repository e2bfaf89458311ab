"""Typed data passed between the pipeline stages.

Everything here is immutable: a window's analysis is built once and then only read
(by the exporter's snapshot, by the CLI report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import msgspec

ARTIFACT_KINDS: tuple[str, ...] = (
    "negative_warps_per_sm",
    "non_finite",
    "grid_overflow",
    "sm_count_invalid",
    "occupancy_sentinel",
    "occupancy_smem_optin",
    "unrounded_warps",
    "missing_launch_config",
    "grid_units_unknown",
)
"""Every way the profiler's reported values can be wrong for one launch (spec: `artifacts`)."""

ARTIFACT_EXPLANATIONS: dict[str, str] = {
    "negative_warps_per_sm": (
        "The profiler reported a negative 'warps per SM'. Kineto computes it from a 32-bit grid product "
        "(or, in PyTorch 1.8/1.9, with an SM count of -1): the value is an overflow, not a measurement. "
        "warpwatch recomputes it exactly from grid, block and the device's SM count."
    ),
    "non_finite": (
        'The profiler wrote inf, nan or a string such as "inf" where a number belongs: it divided by an '
        "SM count of 0 because it could not read the device properties. warpwatch ignores these values."
    ),
    "grid_overflow": (
        "The launch has 2^31 or more blocks. Kineto multiplies gridX*gridY*gridZ in a signed 32-bit int, "
        "which wraps: its blocks and warps per SM are garbage (negative, tiny or zero) for these launches."
    ),
    "sm_count_invalid": (
        "The profiler used an invalid SM count (-1 in PyTorch 1.8.x/early 1.9 on Turing and newer, or 0 when "
        "device properties were unreadable). warpwatch uses numSms from deviceProperties instead."
    ),
    "occupancy_sentinel": (
        "The profiler's 'est. achieved occupancy %' is a sentinel (-99 or -100): its occupancy calculator "
        "failed (missing properties or a GPU newer than its CUDA header). warpwatch computes occupancy itself."
    ),
    "occupancy_smem_optin": (
        "The profiler reported 0 % occupancy for a kernel that uses opt-in shared memory (above ~48 KiB per "
        "block): Kineto evaluates occupancy with the default shared-memory limit, under which the block "
        "does not fit. With the opt-in limit the kernel really runs, and warpwatch reports its occupancy."
    ),
    "unrounded_warps": (
        "The block size is not a multiple of the warp size. Kineto divides threads by 32 without rounding up, "
        "so a 48-thread block counts as 1.5 warps although it occupies 2; warpwatch rounds up."
    ),
    "missing_launch_config": (
        "The kernel event has no grid/block (CUDA graph replays, ROCm): warps per SM and occupancy are unknown "
        "for it, not zero."
    ),
    "grid_units_unknown": (
        "An AMD kernel whose grid may count work-items or blocks: ROCm's profiler writes globalWorkSize "
        "(hipExtModuleLaunchKernel, hipHccModuleLaunchKernel: Tensile, MIOpen) in the same field as gridDim "
        "(hipLaunchKernel and the others), and no runtime event with the same correlation id says which call "
        "launched it. Its warps per SM are unknown, not guessed."
    ),
}
"""One plain sentence or three per artefact kind, for reports and dashboards."""

Outcome = Literal["ok", "empty", "failed", "timed_out"]
"""How one capture window ended: analysed with launches, analysed without any, failed, timed out."""
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
    ("read", "too_large"),  # larger than max_trace_bytes, or over the memory budget
    ("read", "invalid_trace"),  # empty, truncated, not JSON, not a Kineto trace
    ("analysis", "unexpected"),  # analysis raised (a bug)
    ("nvml", "gpu_lost"),  # NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus
    ("nvml", "error"),  # any other NVML error during a run
    ("clock", "jump"),  # the wall clock stepped by more than a second against the monotonic clock
    ("round", "overrun"),  # a scheduled round skipped: the previous one was still running
    ("round", "unexpected"),  # a round raised (a bug)
    ("export", "too_many_gpus"),  # a GPU of a round left out of /metrics, or removed, beyond max_gpus
)
"""(stage, reason) of `warpwatch_errors_total`: public API, like metric names."""
Fault = tuple[str, str]

LIMITING_FACTORS: tuple[str, ...] = ("warps", "registers", "shared_memory", "blocks", "barriers")


@dataclass(frozen=True, slots=True)
class DeviceProperties:
    """One entry of a trace's `deviceProperties` (or of `--gpu-properties`).

    Optional fields are absent from some trace formats (ROCm, older Kineto); the
    occupancy calculator needs them and reports "unknown" without them.
    """

    id: int
    name: str
    compute_major: int
    compute_minor: int
    num_sms: int
    warp_size: int
    max_threads_per_block: int
    max_threads_per_sm: int
    regs_per_block: int | None = None
    regs_per_sm: int | None = None
    shared_mem_per_block: int | None = None
    shared_mem_per_sm: int | None = None
    shared_mem_per_block_optin: int | None = None
    vendor: Literal["nvidia", "amd"] = "nvidia"
    arch: str | None = None
    """AMD gfx target (`gcnArchName`, e.g. `gfx942:sramecc+:xnack-`) where the trace gives it."""
    uuid: str | None = None
    """The GPU's UUID where the trace gives it (`uuid`); joins with dcgm-exporter's `UUID` label."""

    @property
    def compute_capability(self) -> str:
        return f"{self.compute_major}.{self.compute_minor}"

    @property
    def max_warps_per_sm(self) -> int:
        """M: resident warp slots per SM."""
        return self.max_threads_per_sm // self.warp_size


class KernelLaunch(msgspec.Struct, frozen=True, gc=False):
    """One kernel event of a trace, as written (nothing corrected yet).

    A msgspec struct (not a dataclass) because the reader builds hundreds of thousands of them
    and sends them between its decoding processes as they are (`gc=False`: they hold no cycles).

    `ts`/`dur` are microseconds as written in the trace. `grid`/`block` are None when the
    trace carries no launch configuration (CUDA graphs, ROCm). `reported_*` keep the raw
    value (float, string such as "inf", or None when absent).
    """

    name: str
    device: int
    ts: float
    dur: float
    stream: int | str | None
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    registers_per_thread: int | None
    shared_memory: int | None
    reported_warps_per_sm: float | str | None
    reported_blocks_per_sm: float | str | None
    reported_occupancy_pct: float | str | None
    launch_api: str | None = None
    """The runtime call that launched the kernel (the runtime event with the same `correlation`),
    kept only when it starts with `hip`: on AMD it says the unit of `grid` (spec "AMD traces")."""


@dataclass(frozen=True, slots=True)
class TraceWindow:
    """The capture interval [t0, t1] of one trace, in the trace's microseconds."""

    t0: float
    t1: float
    bounds: Literal["trace_span", "requested", "estimated", "none"]

    @property
    def duration(self) -> float:
        return self.t1 - self.t0


@dataclass(frozen=True, slots=True)
class Trace:
    """What the analysis needs from one trace file."""

    path: str
    devices: dict[int, DeviceProperties]
    launches: tuple[KernelLaunch, ...]
    span: TraceWindow | None
    """The `Trace` span event (`PyTorch Profiler (N)`), when present."""
    gpu_extent: tuple[float, float] | None
    """First start and last end over all GPU events (kernel, memcpy, memset)."""
    rank: int | None = None
    world_size: int | None = None
    schema_version: int | None = None
    base_time_ns: int | None = None
    warnings: tuple[str, ...] = ()
    """Non-fatal problems found while reading (e.g. an unusable deviceProperties entry)."""


@dataclass(frozen=True, slots=True)
class LaunchMetrics:
    """Every per-launch field of the spec. None means unknown, never zero."""

    launch: KernelLaunch
    warps_per_block: int | None
    warps_per_sm: float | None
    reported_warps_per_sm: float | str | None
    max_active_blocks_per_sm: int | None
    limiting_factors: tuple[str, ...] | None
    theoretical_occupancy: float | None
    waves_per_sm: float | None
    resident_warps_per_sm: float | None
    estimated_occupancy: float | None
    artifacts: tuple[str, ...]
    weight: float | None
    """Sampling-window weight h = W / (W - d); None when the launch cannot be weighted."""


@dataclass(frozen=True, slots=True)
class LaunchResources:
    """What the code decides of a launch (spec "Per kernel launch"): threads per block, registers per
    thread and shared memory per block (bytes), as the trace writes them. With the device they set the
    theoretical occupancy; the grid (the load) does not enter."""

    block_size: int
    registers_per_thread: int | None
    shared_memory: int | None


def launch_resources(launch: KernelLaunch) -> LaunchResources | None:
    """The launch's resources; None without a block (no launch configuration in the trace)."""
    if launch.block is None:
        return None
    x, y, z = launch.block
    return LaunchResources(x * y * z, launch.registers_per_thread, launch.shared_memory)


@dataclass(frozen=True, slots=True)
class KernelStats:
    """Per (device, kernel) statistics of one window, sampling-corrected (spec).

    `launches`, `launch_rate`, `gpu_time` and `time_share` are the window's estimates kept within
    what the trace proves possible (spec "Physical bounds"); the `_total` counters add the unbiased
    sums instead (`counted_gpu_time`, `counted_launches`)."""

    device: int
    name: str
    samples: int
    launches: float
    launch_rate: float | None
    gpu_time: float
    time_share: float | None
    warps_per_sm: float | None
    resident_warps_per_sm: float | None
    theoretical_occupancy: float | None
    estimated_occupancy: float | None
    waves_per_sm: float | None
    reported_warps_per_sm_min: float | None
    main_limiter: str | None
    artifacts: dict[str, int] = field(default_factory=dict)
    weighted_sums: dict[str, float] = field(default_factory=dict)
    """Per mean field x: Σh·d·x over the launches where x is known (µs·x); the numerators of the
    means above, which the exporter accumulates as `_seconds_total` counters."""
    observed_gpu_time: float | None = None
    """Σd over the captured launches (µs), unweighted: what the trace itself shows."""
    observed_time_share: float | None = None
    """observed_gpu_time / W."""
    unbounded_gpu_time: float | None = None
    """Σh·d, the unbiased estimate the counters add, where the bound changed `gpu_time`; None: equal."""
    unbounded_launches: float | None = None
    """Σh, where the bound changed `launches`; None: equal."""
    reported_warps_per_sm: float | None = None
    """Duration-weighted mean of the profiler's own finite `warps per SM` (beside `warps_per_sm`)."""
    main_resources: LaunchResources | None = None
    """The launch resources of the kernel's launches with the most corrected GPU time (what
    `warpwatch_kernel_launch_info` exports): a change of these is a change of the code."""

    @property
    def bounded(self) -> bool:
        """Whether the window's estimate was brought within what the trace proves possible."""
        return self.unbounded_gpu_time is not None or self.unbounded_launches is not None

    @property
    def counted_gpu_time(self) -> float:
        """Σh·d (µs): what `warpwatch_kernel_seconds_total` adds for this window."""
        return self.gpu_time if self.unbounded_gpu_time is None else self.unbounded_gpu_time

    @property
    def counted_launches(self) -> float:
        """Σh: what `warpwatch_kernel_launches_estimated_total` adds for this window."""
        return self.launches if self.unbounded_launches is None else self.unbounded_launches


@dataclass(frozen=True, slots=True)
class DeviceStats:
    """Per device statistics of one window (spec)."""

    device: int
    properties: DeviceProperties | None
    resident_warps_per_sm: float | None
    estimated_occupancy: float | None
    busy_ratio: float | None
    samples: int
    low_confidence: bool
    busy_time: float | None = None
    """Estimated time (µs) with at least one kernel running, unbiased and not bounded: what
    `warpwatch_gpu_busy_seconds_total` adds (busy_ratio is this brought within its bounds, / W)."""
    resident_time: float | None = None
    """Σh·d·resident_warps_per_sm over the launches where it is known (µs·warps)."""
    longest_kernel: float = 0.0
    """Longest captured launch (µs): near W, the window is too short for the workload."""
    observed_busy_ratio: float | None = None
    """|union of the captured launches' intervals| / W: what the trace itself shows."""
    busy_bounds: tuple[float, float] | None = None
    """(lowest, highest) busy ratio the trace proves possible: the observed union, and it plus the
    idle-looking time at the window's edges where only a dropped straddler can hide."""
    unbounded_busy_ratio: float | None = None
    """busy_time / W where the bound changed `busy_ratio`; None: equal."""
    low_confidence_reasons: tuple[str, ...] = ()
    """Why `low_confidence`, in words (empty when it is not)."""
    properties_from: int | None = None
    """The device id whose `deviceProperties` were applied, when not this one (spec: one model)."""
    streams: int = 0
    """Streams with captured launches of non-zero duration on this device."""


@dataclass(frozen=True, slots=True)
class WindowAnalysis:
    """The full result of analysing one trace as one capture window."""

    path: str
    window: TraceWindow
    devices: tuple[DeviceStats, ...]
    kernels: tuple[KernelStats, ...]
    """Sorted by GPU time, descending."""
    launch_count: int
    artifacts: dict[str, int]
    rank: int | None = None
