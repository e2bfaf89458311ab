"""Analysis: pure math from typed launches to per-launch fields and window statistics.

Definitions follow docs/metrics.md (the project's copy of shared/spec/metrics.md). This module
imports neither prometheus_client nor torch and does no I/O.

Notation: B = gridX*gridY*gridZ blocks, T = blockX*blockY*blockZ threads (Python integers:
no 32-bit overflow), w = warp size, S = SM count, Wb = ceil(T / w), M = max warps per SM.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ..model import (
    DeviceProperties,
    KernelLaunch,
    KernelStats,
    LaunchMetrics,
    Trace,
    TraceWindow,
    WindowAnalysis,
)
from ..runtime.gcpause import gc_paused
from ..trace.devices import one_model_devices
from .occupancy import max_active_blocks
from .windowbounds import device_bounds, stream_edges
from .windowmath import GROUP_KEY, Group, group_launches
from .windowstats import KernelAcc, as_float, bound_kernels, device_stats, kernel_stats

INT32_LIMIT = 2**31
"""Kineto multiplies the grid in a signed 32-bit int: B >= 2^31 overflows."""

OCCUPANCY_SENTINELS = frozenset({-99.0, -100.0})
HIP_BLOCK_GRID_CALLS = frozenset(
    {"hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipLaunchCooperativeKernel"}
)
"""HIP launch calls whose `grid` counts blocks (gridDim), spec "AMD traces"."""
HIP_WORK_ITEM_GRID_CALLS = frozenset({"hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel"})
"""HIP launch calls whose `grid` counts work-items (globalWorkSize): B = prod(ceil(grid_i / block_i))."""


@dataclass(frozen=True, slots=True)
class _Config:
    """Everything about a launch that depends only on its launch configuration and device."""

    warps_per_block: int | None
    warps_per_sm: float | None
    max_active_blocks_per_sm: int | None
    limiting_factors: tuple[str, ...] | None
    theoretical_occupancy: float | None
    waves_per_sm: float | None
    resident_warps_per_sm: float | None
    estimated_occupancy: float | None
    default_limit_blocks: int | None
    """Active blocks under Kineto's own setting (default shared-memory limit), for the smem artefact."""


_UNKNOWN = _Config(None, None, None, None, None, None, None, None, None)


def blocks_of(
    props: DeviceProperties | None,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    launch_api: str | None,
) -> int | None:
    """B, the launch's blocks: the grid's product on NVIDIA; on AMD by the unit of `grid` that the
    launching HIP call gives (spec "AMD traces"), None where that unit is unknown."""
    if props is None or props.vendor != "amd" or launch_api in HIP_BLOCK_GRID_CALLS:
        return grid[0] * grid[1] * grid[2]
    if any(b <= 0 for b in block):
        return None
    if launch_api in HIP_WORK_ITEM_GRID_CALLS:
        return math.prod(-(-g // b) for g, b in zip(grid, block, strict=True))
    if any(g % b for g, b in zip(grid, block, strict=True)):
        return grid[0] * grid[1] * grid[2]  # not a multiple of the block: cannot be work-items
    return None


def _config_metrics(
    props: DeviceProperties | None,
    grid: tuple[int, int, int] | None,
    block: tuple[int, int, int] | None,
    regs: int | None,
    smem: int | None,
    launch_api: str | None = None,
) -> _Config:
    if props is None or grid is None or block is None:
        return _UNKNOWN
    blocks = blocks_of(props, grid, block, launch_api)
    threads = block[0] * block[1] * block[2]
    if blocks is None or blocks <= 0 or threads <= 0:
        return _UNKNOWN
    w = props.warp_size
    sms = props.num_sms
    wb = -(-threads // w)
    warps_per_sm = blocks * wb / sms if sms > 0 else None
    if sms <= 0 or props.vendor != "nvidia" or regs is None or smem is None:
        return _Config(wb, warps_per_sm, None, None, None, None, None, None, None)
    occ = max_active_blocks(props, threads, regs, smem)
    if occ is None:
        return _Config(wb, warps_per_sm, None, None, None, None, None, None, None)
    default = max_active_blocks(props, threads, regs, smem, shmem_limit="default")
    m = props.max_warps_per_sm
    active = occ.active_blocks_per_sm
    theoretical = active * wb / m
    if active == 0:
        return _Config(
            wb,
            warps_per_sm,
            0,
            occ.limiting_factors,
            0.0,
            None,
            None,
            None,
            default.active_blocks_per_sm if default else None,
        )
    per_wave = active * sms
    waves = blocks / per_wave
    resident = wb * blocks / (sms * -(-blocks // per_wave))
    return _Config(
        wb,
        warps_per_sm,
        active,
        occ.limiting_factors,
        theoretical,
        waves,
        resident,
        resident / m,
        default.active_blocks_per_sm if default else None,
    )


def artifacts_of(launch: KernelLaunch, props: DeviceProperties | None, cfg: _Config) -> tuple[str, ...]:
    """Every way the profiler's reported values are wrong for this launch (spec `artifacts`)."""
    found: list[str] = []
    reported = launch.reported_warps_per_sm
    rep = as_float(reported)
    rep_values = (reported, launch.reported_blocks_per_sm, launch.reported_occupancy_pct)
    if rep is not None and rep < 0:
        found.append("negative_warps_per_sm")
    if any(isinstance(v, str) or (isinstance(v, float) and not math.isfinite(v)) for v in rep_values):
        found.append("non_finite")
    blocks = threads = None
    if launch.grid is not None and launch.block is not None:
        blocks = launch.grid[0] * launch.grid[1] * launch.grid[2]
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        if blocks >= INT32_LIMIT:
            found.append("grid_overflow")
    if _sm_count_invalid(rep, props, blocks, threads):
        found.append("sm_count_invalid")
    occ_pct = as_float(launch.reported_occupancy_pct)
    if occ_pct is not None and occ_pct in OCCUPANCY_SENTINELS:
        found.append("occupancy_sentinel")
    if occ_pct == 0.0 and cfg.max_active_blocks_per_sm and cfg.default_limit_blocks == 0:
        found.append("occupancy_smem_optin")
    if threads is not None and props is not None and reported is not None and threads % props.warp_size:
        found.append("unrounded_warps")
    if launch.grid is None or launch.block is None:
        found.append("missing_launch_config")
    elif props is not None and blocks_of(props, launch.grid, launch.block, launch.launch_api) is None:
        found.append("grid_units_unknown")
    return tuple(found)


def _sm_count_invalid(
    rep: float | None, props: DeviceProperties | None, blocks: int | None, threads: int | None
) -> bool:
    """Kineto divided by an SM count of 0 (inf) or -1 (minus the total warps), or the trace says so."""
    if props is not None and props.num_sms <= 0:
        return True
    if rep is None:
        return False
    if math.isinf(rep):
        return True
    if blocks is None or threads is None or blocks >= INT32_LIMIT or rep >= 0:
        return False
    total_warps = blocks * threads / 32  # Kineto's own formula, 32 hard-coded
    return total_warps > 0 and math.isclose(-rep, total_warps, rel_tol=1e-3)


def window_of(trace: Trace, requested: tuple[float, float] | None = None) -> TraceWindow:
    """The capture interval, in trace time: Trace span, else the request, else the GPU extent."""
    if trace.span is not None and trace.span.duration > 0:
        return trace.span
    if requested is not None and requested[1] > requested[0]:
        offset = trace.base_time_ns / 1000 if trace.base_time_ns else 0.0
        return TraceWindow(requested[0] - offset, requested[1] - offset, "requested")
    if trace.gpu_extent is not None and trace.gpu_extent[1] > trace.gpu_extent[0]:
        return TraceWindow(trace.gpu_extent[0], trace.gpu_extent[1], "estimated")
    return TraceWindow(0.0, 0.0, "none")


def sampling_weight(launch: KernelLaunch, window: TraceWindow) -> float | None:
    """h of one launch: W / (W - d) for a launch wholly inside the window (Horvitz-Thompson),
    1 for one with d >= W (only possible when the bounds are estimated from the events), 0 for a
    launch not wholly inside (the producer drops those: one seen here lies outside the bounds the
    agent requested, and says nothing about this window); None when the window is unknown."""
    w = window.duration
    if w <= 0:
        return None
    return _weight(launch.ts, launch.dur, window.t0, window.t1, w)


def _weight(ts: float, d: float, t0: float, t1: float, w: float) -> float:
    if ts < t0 or ts + d > t1:
        return 0.0
    return w / (w - d) if 0 < d < w else 1.0


_ConfigKey = tuple[int, tuple[int, int, int] | None, tuple[int, int, int] | None, int | None, int | None, str | None]
"""A launch's device, then what `_config_metrics` reads of it: grid, block, registers, shared memory, API."""


def _config_key(launch: KernelLaunch) -> _ConfigKey:
    return (
        launch.device,
        launch.grid,
        launch.block,
        launch.registers_per_thread,
        launch.shared_memory,
        launch.launch_api,
    )


class _Configs:
    """Per-launch-config metrics and per-group artefacts, each computed once."""

    def __init__(self, devices: dict[int, DeviceProperties]) -> None:
        self.devices = devices
        self.configs: dict[_ConfigKey, _Config] = {}
        self.artifacts: dict[tuple[object, ...], tuple[str, ...]] = {}

    def config(self, launch: KernelLaunch) -> _Config:
        key = _config_key(launch)
        cfg = self.configs.get(key)
        if cfg is None:
            cfg = self.configs[key] = _config_metrics(self.devices.get(launch.device), *key[1:])
        return cfg

    def artifacts_of(self, launch: KernelLaunch, cfg: _Config) -> tuple[str, ...]:
        key = GROUP_KEY(launch)
        found = self.artifacts.get(key)
        if found is None:
            found = self.artifacts[key] = artifacts_of(launch, self.devices.get(launch.device), cfg)
        return found


def launch_metrics(trace: Trace, window: TraceWindow | None = None) -> Iterator[LaunchMetrics]:
    """Every per-launch field of the spec, in trace order."""
    window = window or window_of(trace)
    configs = _Configs(effective_devices(trace)[0])
    for launch in trace.launches:
        yield _metrics(launch, configs, sampling_weight(launch, window))


def _metrics(launch: KernelLaunch, configs: _Configs, weight: float | None) -> LaunchMetrics:
    cfg = configs.config(launch)
    return LaunchMetrics(
        launch=launch,
        warps_per_block=cfg.warps_per_block,
        warps_per_sm=cfg.warps_per_sm,
        reported_warps_per_sm=launch.reported_warps_per_sm,
        max_active_blocks_per_sm=cfg.max_active_blocks_per_sm,
        limiting_factors=cfg.limiting_factors,
        theoretical_occupancy=cfg.theoretical_occupancy,
        waves_per_sm=cfg.waves_per_sm,
        resident_warps_per_sm=cfg.resident_warps_per_sm,
        estimated_occupancy=cfg.estimated_occupancy,
        artifacts=configs.artifacts_of(launch, cfg),
        weight=weight,
    )


@dataclass
class _Accumulated:
    """What one pass over a window's launch groups sums, per kernel and per device."""

    per_kernel: dict[tuple[int, str], KernelAcc] = field(default_factory=lambda: defaultdict(KernelAcc))
    intervals: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    resident_time: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    longest: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    samples: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    totals: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    count: int = 0


def _accumulate(groups: Iterable[Group], configs: _Configs) -> _Accumulated:
    """Compute each group's metrics once and add them to its kernel's and device's sums."""
    acc = _Accumulated()
    for g in groups:
        lm = _metrics(g.first, configs, None)
        dev = g.first.device
        acc.count += g.n
        acc.samples[dev] += g.n
        acc.per_kernel[(dev, g.first.name)].add(lm, g, acc.totals)
        if g.intervals:
            acc.intervals[dev].extend(g.intervals)
            acc.longest[dev] = max(acc.longest[dev], g.longest)
        if g.sum_h > 0 and lm.resident_warps_per_sm is not None:
            acc.resident_time[dev] += g.sum_hd * lm.resident_warps_per_sm
    return acc


def analyze(trace: Trace, *, requested: tuple[float, float] | None = None) -> WindowAnalysis:
    """Analyse one trace as one capture window (spec: per-kernel and per-device statistics).

    `requested` is the capture interval the source asked for, in Unix epoch microseconds; it
    is used only when the trace has no `Trace` span event.

    Launches that share name, device, launch configuration and reported values share every
    metric: they are grouped in one pass, and the metrics are computed once per group.
    """
    window = window_of(trace, requested)
    w_us = window.duration
    devices, inferred = effective_devices(trace)
    with gc_paused():
        groups = group_launches(trace.launches, window)
    summed = _accumulate(groups, _Configs(devices))
    per_kernel, intervals, longest, samples = summed.per_kernel, summed.intervals, summed.longest, summed.samples
    resident_time = summed.resident_time

    per_device: dict[int, tuple[list[KernelStats], list[KernelAcc]]] = defaultdict(lambda: ([], []))
    for (dev, name), acc in per_kernel.items():
        ks, accs = per_device[dev]
        ks.append(kernel_stats(dev, name, acc, w_us))
        accs.append(acc)
    kernels: list[KernelStats] = []
    device_rows = []
    edges = stream_edges(trace.launches, window.t0, window.t1) if w_us > 0 else {}
    for dev in sorted(samples):
        ks, accs = per_device[dev]
        bounds = device_bounds(intervals[dev], edges.get(dev, {}), window.t0, window.t1) if w_us > 0 else None
        if bounds is not None:
            ks = bound_kernels(ks, accs, bounds, w_us)
        kernels.extend(ks)
        device_rows.append(
            device_stats(
                dev,
                devices.get(dev),
                window,
                ks,
                intervals[dev],
                bounds,
                resident_time[dev],
                samples[dev],
                longest[dev],
                inferred.get(dev),
            )
        )
    kernels.sort(key=lambda k: (-k.gpu_time, k.device, k.name))
    return WindowAnalysis(
        path=trace.path,
        window=window,
        devices=tuple(device_rows),
        kernels=tuple(kernels),
        launch_count=summed.count,
        artifacts=dict(summed.totals),
        rank=trace.rank,
    )


def effective_devices(trace: Trace) -> tuple[dict[int, DeviceProperties], dict[int, int]]:
    """The properties that apply to each device the trace's kernels ran on, and which ids took
    another id's (`trace.devices.one_model_devices`)."""
    return one_model_devices(trace.devices, {launch.device for launch in trace.launches})
