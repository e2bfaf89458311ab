"""One window's per-kernel and per-device statistics from the grouped launches (spec "Per capture
window"), brought within what the trace proves possible (`windowbounds`). Pure math: `window`
feeds it the groups of `windowmath.group_launches` with each group's metrics."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

from ..model import (
    ARTIFACT_KINDS,
    DeviceProperties,
    DeviceStats,
    KernelStats,
    LaunchMetrics,
    LaunchResources,
    TraceWindow,
    launch_resources,
)
from .windowbounds import DeviceBounds, clamp, project_excess
from .windowmath import MAX_OVERLAP, Group, busy_time

MEANS = ("warps_per_sm", "resident_warps_per_sm", "theoretical_occupancy", "estimated_occupancy", "waves_per_sm")
LONG_KERNEL_RATIO = 0.5
"""A window whose longest captured launch is at least this share of W is low-confidence: such
launches are captured with probability (W - d)/W <= 1/2, and longer ones not at all."""
FEW_LAUNCHES = 5
"""A device with fewer captured launches than this in a window at least half busy is
low-confidence (spec: "a window whose GPU is busy but holds few launches")."""


def as_float(v: float | str | None) -> float | None:
    """A reported value as a float when it is a number or a numeric string ("inf", "nan"...)."""
    if isinstance(v, float):
        return v
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


class KernelAcc:
    """The sums of one (device, kernel) over its groups."""

    __slots__ = (
        "artifacts",
        "captured",
        "hd",
        "limiters",
        "n",
        "observed",
        "reported",
        "reported_min",
        "resources",
        "sum_h",
        "sums",
    )

    def __init__(self) -> None:
        self.n = 0
        self.sum_h = 0.0
        self.hd = 0.0
        self.observed = 0.0
        """Σd over the captured launches."""
        self.captured = 0
        self.sums: dict[str, list[float]] = {f: [0.0, 0.0] for f in MEANS}  # [Σ h·d·x, Σ h·d]
        self.reported = [0.0, 0.0]  # [Σ h·d·reported, Σ h·d] over finite reported values
        self.reported_min: float | None = None
        self.limiters: dict[str, float] = defaultdict(float)
        self.artifacts: dict[str, int] = defaultdict(int)
        self.resources: dict[LaunchResources, float] = defaultdict(float)

    def add(self, lm: LaunchMetrics, g: Group, totals: dict[str, int]) -> None:
        """The `g.n` launches of group `g`, which share `lm`'s metrics."""
        self.n += g.n
        for kind in lm.artifacts:
            self.artifacts[kind] += g.n
            totals[kind] += g.n
        rep = as_float(lm.reported_warps_per_sm)
        finite = rep is not None and math.isfinite(rep)
        if finite:
            assert rep is not None
            self.reported_min = rep if self.reported_min is None else min(self.reported_min, rep)
        self.observed += sum(e - s for s, e in g.intervals)
        # captured launches: those of d > 0 are the intervals; each of d = 0 adds h = 1 to sum_lim only
        self.captured += len(g.intervals) + round(g.sum_lim - g.sum_hd)
        if g.sum_h <= 0:
            return
        self.sum_h += g.sum_h
        self.hd += g.sum_hd
        if finite:
            assert rep is not None
            self.reported[0] += g.sum_hd * rep
            self.reported[1] += g.sum_hd
        for f in MEANS:
            x = getattr(lm, f)
            if x is not None:
                s = self.sums[f]
                s[0] += g.sum_hd * x
                s[1] += g.sum_hd
        if lm.limiting_factors:
            for factor in lm.limiting_factors:
                self.limiters[factor] += g.sum_lim
        if (res := launch_resources(lm.launch)) is not None:
            self.resources[res] += g.sum_lim

    def main_resources(self) -> LaunchResources | None:
        """The resources with the most corrected time (ties: the smallest, for a stable answer)."""
        if not self.resources:
            return None
        return max(sorted(self.resources, key=_resources_key), key=lambda r: self.resources[r])


def kernel_stats(device: int, name: str, acc: KernelAcc, w_us: float) -> KernelStats:
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
        weighted_sums={f: acc.sums[f][0] for f in MEANS if acc.sums[f][1] > 0},
        observed_gpu_time=acc.observed,
        observed_time_share=acc.observed / w_us if w_us > 0 else None,
        reported_warps_per_sm=acc.reported[0] / acc.reported[1] if acc.reported[1] > 0 else None,
        main_resources=acc.main_resources(),
    )


def _resources_key(r: LaunchResources) -> tuple[int, int, int]:
    return (r.block_size, r.registers_per_thread or 0, r.shared_memory or 0)


def bound_kernels(kernels: list[KernelStats], accs: list[KernelAcc], b: DeviceBounds, w_us: float) -> list[KernelStats]:
    """The kernels of one device with their times and launch counts brought within the bounds."""
    times = project_excess([max(k.gpu_time - a.observed, 0.0) for k, a in zip(kernels, accs, strict=True)], b.room)
    counts = project_excess(
        [max(k.launches - a.captured, 0.0) for k, a in zip(kernels, accs, strict=True)], float(b.slots)
    )
    out = []
    for k, a, dt, dn in zip(kernels, accs, times, counts, strict=True):
        gpu_time = a.observed + dt
        launches = a.captured + dn
        changes: dict[str, object] = {}
        if gpu_time < k.gpu_time:
            changes.update(gpu_time=gpu_time, time_share=gpu_time / w_us, unbounded_gpu_time=k.gpu_time)
        if launches < k.launches:
            changes.update(launches=launches, launch_rate=launches / (w_us / 1e6), unbounded_launches=k.launches)
        out.append(replace(k, **changes) if changes else k)  # type: ignore[arg-type]
    return out


def _device_occupancy(
    props: DeviceProperties | None, kernels: list[KernelStats], resident_time: float, w_us: float
) -> tuple[float | None, float | None]:
    """The device's mean resident warps per SM over the window and its estimated occupancy
    (None where the device is not NVIDIA's or the window has no length); where kernels were
    bounded, their resident time is scaled as their GPU time was."""
    if props is None or props.vendor != "nvidia" or w_us <= 0 or props.max_warps_per_sm <= 0:
        return None, None
    scaled = resident_time
    if any(k.unbounded_gpu_time for k in kernels):
        scaled = sum(
            k.weighted_sums.get("resident_warps_per_sm", 0.0)
            * (k.gpu_time / k.unbounded_gpu_time if k.unbounded_gpu_time else 1.0)
            for k in kernels
        )
    resident = min(scaled / w_us, float(props.max_warps_per_sm))
    return resident, resident / props.max_warps_per_sm


def device_stats(
    dev: int,
    props: DeviceProperties | None,
    window: TraceWindow,
    kernels: list[KernelStats],
    intervals: list[tuple[float, float]],
    b: DeviceBounds | None,
    resident_time: float,
    samples: int,
    longest: float,
    properties_from: int | None,
) -> DeviceStats:
    """One device's statistics in the window; `kernels` are its kernels, already bounded by `b`
    (None: the window has no length); `intervals` its captured launches of d > 0, sorted."""
    w_us = window.duration
    reasons: list[str] = []
    if window.bounds == "estimated":
        reasons.append("window estimated from GPU events")
    elif window.bounds == "none":
        reasons.append("window unknown")
    busy = ratio = observed = unbounded = None
    bounds: tuple[float, float] | None = None
    streams = b.streams if b is not None else 0
    if b is not None:
        busy, truncated = busy_time(intervals, w_us)
        if truncated:
            reasons.append(f"more than {MAX_OVERLAP + 1} launches at once: busy estimated")
        bounded = clamp(busy, b.observed, b.busy_high)
        ratio, observed = bounded / w_us, b.observed / w_us
        bounds = (b.observed / w_us, b.busy_high / w_us)
        if bounded != busy:
            unbounded = busy / w_us
        if longest >= LONG_KERNEL_RATIO * w_us:
            reasons.append(f"a captured launch runs {longest / w_us:.0%} of the window: long kernels are under-sampled")
        captured = len(intervals)
        if captured < FEW_LAUNCHES and observed >= 0.5:
            reasons.append(f"few launches ({captured}) in a busy window")
    if unbounded is not None or any(k.bounded for k in kernels):
        reasons.append("estimate bounded by what the trace shows")
    resident, estimated = _device_occupancy(props, kernels, resident_time, w_us)
    return DeviceStats(
        dev,
        props,
        resident,
        estimated,
        ratio,
        samples,
        bool(reasons),
        busy_time=busy,
        resident_time=resident_time if resident is not None else None,
        longest_kernel=longest,
        observed_busy_ratio=observed,
        busy_bounds=bounds,
        unbounded_busy_ratio=unbounded,
        low_confidence_reasons=tuple(reasons),
        properties_from=properties_from,
        streams=streams,
    )
