"""Analysis: pure math from typed launches to per-launch fields and window statistics.

Definitions follow docs/metrics.md (the project's copy of shared/spec/metrics.md). This module
imports neither prometheus_client nor torch and does no I/O.

Notation: B = gridX*gridY*gridZ blocks, T = blockX*blockY*blockZ threads (Python integers:
no 32-bit overflow), w = warp size, S = SM count, Wb = ceil(T / w), M = max warps per SM.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from ..gcpause import gc_paused
from ..model import (
    ARTIFACT_KINDS,
    DeviceProperties,
    DeviceStats,
    KernelLaunch,
    KernelStats,
    LaunchMetrics,
    Trace,
    TraceWindow,
    WindowAnalysis,
)
from .occupancy import max_active_blocks
from .windowmath import GROUP_KEY, busy_time, group_launches

INT32_LIMIT = 2**31
"""Kineto multiplies the grid in a signed 32-bit int: B >= 2^31 overflows."""

OCCUPANCY_SENTINELS = frozenset({-99.0, -100.0})
HIP_BLOCK_GRID_CALLS = frozenset({"hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel",
                                  "hipLaunchCooperativeKernel"})
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
            wb, warps_per_sm, 0, occ.limiting_factors, 0.0, None, None, None,
            default.active_blocks_per_sm if default else None,
        )
    per_wave = active * sms
    waves = blocks / per_wave
    resident = wb * blocks / (sms * -(-blocks // per_wave))
    return _Config(
        wb, warps_per_sm, active, occ.limiting_factors, theoretical, waves, resident, resident / m,
        default.active_blocks_per_sm if default else None,
    )


def _as_float(v: float | str | None) -> float | None:
    """A reported value as a float when it is a number or a numeric string ("inf", "nan"...)."""
    if isinstance(v, float):
        return v
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def artifacts_of(launch: KernelLaunch, props: DeviceProperties | None, cfg: _Config) -> tuple[str, ...]:
    """Every way the profiler's reported values are wrong for this launch (spec `artifacts`)."""
    found: list[str] = []
    reported = launch.reported_warps_per_sm
    rep = _as_float(reported)
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
    occ_pct = _as_float(launch.reported_occupancy_pct)
    if occ_pct is not None and occ_pct in OCCUPANCY_SENTINELS:
        found.append("occupancy_sentinel")
    if (
        occ_pct == 0.0
        and cfg.max_active_blocks_per_sm
        and cfg.default_limit_blocks == 0
    ):
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


def _config_key(launch: KernelLaunch) -> tuple[object, ...]:
    return (launch.device, launch.grid, launch.block, launch.registers_per_thread, launch.shared_memory,
            launch.launch_api)


class _Configs:
    """Per-launch-config metrics and per-group artefacts, each computed once."""

    def __init__(self, devices: dict[int, DeviceProperties]) -> None:
        self.devices = devices
        self.configs: dict[tuple[object, ...], _Config] = {}
        self.artifacts: dict[tuple[object, ...], tuple[str, ...]] = {}

    def config(self, launch: KernelLaunch) -> _Config:
        key = _config_key(launch)
        cfg = self.configs.get(key)
        if cfg is None:
            cfg = self.configs[key] = _config_metrics(
                self.devices.get(launch.device), launch.grid, launch.block,
                launch.registers_per_thread, launch.shared_memory, launch.launch_api,
            )
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
    configs = _Configs(trace.devices)
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


_MEANS = ("warps_per_sm", "resident_warps_per_sm", "theoretical_occupancy", "estimated_occupancy", "waves_per_sm")


class _KernelAcc:
    __slots__ = ("artifacts", "hd", "limiters", "n", "reported_min", "sum_h", "sums")

    def __init__(self) -> None:
        self.n = 0
        self.sum_h = 0.0
        self.hd = 0.0
        self.sums: dict[str, list[float]] = {f: [0.0, 0.0] for f in _MEANS}  # [Σ h·d·x, Σ h·d]
        self.reported_min: float | None = None
        self.limiters: dict[str, float] = defaultdict(float)
        self.artifacts: dict[str, int] = defaultdict(int)

    def add(
        self, lm: LaunchMetrics, n: int, sum_h: float, sum_hd: float, sum_lim: float, totals: dict[str, int]
    ) -> None:
        """`n` launches that share `lm`'s metrics, with Σh, Σh·d and Σ(h·d or h) over those weighted."""
        self.n += n
        for kind in lm.artifacts:
            self.artifacts[kind] += n
            totals[kind] += n
        rep = _as_float(lm.reported_warps_per_sm)
        if rep is not None and math.isfinite(rep):
            self.reported_min = rep if self.reported_min is None else min(self.reported_min, rep)
        if sum_h <= 0:
            return
        self.sum_h += sum_h
        self.hd += sum_hd
        for f in _MEANS:
            x = getattr(lm, f)
            if x is not None:
                s = self.sums[f]
                s[0] += sum_hd * x
                s[1] += sum_hd
        if lm.limiting_factors:
            for factor in lm.limiting_factors:
                self.limiters[factor] += sum_lim


LONG_KERNEL_RATIO = 0.5
"""A window whose longest captured launch is at least this share of W is low-confidence: such
launches are captured with probability (W - d)/W <= 1/2, and longer ones not at all."""
def analyze(trace: Trace, *, requested: tuple[float, float] | None = None) -> WindowAnalysis:
    """Analyse one trace as one capture window (spec: per-kernel and per-device statistics).

    `requested` is the capture interval the source asked for, in Unix epoch microseconds; it
    is used only when the trace has no `Trace` span event.

    Launches that share name, device, launch configuration and reported values share every
    metric: they are grouped in one pass, and the metrics are computed once per group.
    """
    window = window_of(trace, requested)
    w_us = window.duration
    per_kernel: dict[tuple[int, str], _KernelAcc] = defaultdict(_KernelAcc)
    intervals: dict[int, list[tuple[float, float]]] = defaultdict(list)
    resident_time: dict[int, float] = defaultdict(float)
    longest: dict[int, float] = defaultdict(float)
    samples: dict[int, int] = defaultdict(int)
    totals: dict[str, int] = defaultdict(int)
    count = 0
    configs = _Configs(trace.devices)
    with gc_paused():
        groups = group_launches(trace.launches, window)
    for g in groups:
        lm = _metrics(g.first, configs, None)
        dev = g.first.device
        count += g.n
        samples[dev] += g.n
        per_kernel[(dev, g.first.name)].add(lm, g.n, g.sum_h, g.sum_hd, g.sum_lim, totals)
        if g.intervals:
            intervals[dev].extend(g.intervals)
            longest[dev] = max(longest[dev], g.longest)
        if g.sum_h > 0 and lm.resident_warps_per_sm is not None:
            resident_time[dev] += g.sum_hd * lm.resident_warps_per_sm

    kernels = [_kernel_stats(dev, name, acc, w_us) for (dev, name), acc in per_kernel.items()]
    kernels.sort(key=lambda k: (-k.gpu_time, k.device, k.name))
    devices = []
    for dev in sorted(samples):
        props = trace.devices.get(dev)
        busy = ratio = None
        truncated = False
        if w_us > 0:
            busy, truncated = busy_time(intervals[dev], w_us)
            ratio = busy / w_us
        resident = estimated = None
        if props is not None and props.vendor == "nvidia" and w_us > 0 and props.max_warps_per_sm > 0:
            resident = resident_time[dev] / w_us
            estimated = resident / props.max_warps_per_sm
        low = (
            window.bounds in ("estimated", "none")
            or truncated
            or (w_us > 0 and longest[dev] >= LONG_KERNEL_RATIO * w_us)
        )
        devices.append(DeviceStats(
            dev, props, resident, estimated, ratio, samples[dev], low,
            busy_time=busy, resident_time=resident_time[dev] if resident is not None else None,
            longest_kernel=longest[dev],
        ))
    return WindowAnalysis(
        path=trace.path,
        window=window,
        devices=tuple(devices),
        kernels=tuple(kernels),
        launch_count=count,
        artifacts=dict(totals),
        rank=trace.rank,
    )


def _kernel_stats(device: int, name: str, acc: _KernelAcc, w_us: float) -> KernelStats:
    def mean(f: str) -> float | None:
        num, den = acc.sums[f]
        return num / den if den > 0 else None

    limiter = max(sorted(acc.limiters), key=lambda k: acc.limiters[k]) if acc.limiters else None
    return KernelStats(
        device=device,
        name=name,
        samples=acc.n,
        launches=acc.sum_h,
        launch_rate=acc.sum_h / (w_us / 1e6) if w_us > 0 else None,
        gpu_time=acc.hd,
        time_share=acc.hd / w_us if w_us > 0 else None,
        warps_per_sm=mean("warps_per_sm"),
        resident_warps_per_sm=mean("resident_warps_per_sm"),
        theoretical_occupancy=mean("theoretical_occupancy"),
        estimated_occupancy=mean("estimated_occupancy"),
        waves_per_sm=mean("waves_per_sm"),
        reported_warps_per_sm_min=acc.reported_min,
        main_limiter=limiter,
        artifacts={k: acc.artifacts[k] for k in ARTIFACT_KINDS if acc.artifacts.get(k)},
        weighted_sums={f: acc.sums[f][0] for f in _MEANS if acc.sums[f][1] > 0},
    )
