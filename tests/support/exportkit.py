"""Small window analyses and snapshot builders for the export tests."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from warpwatch.export import metricdefs as md
from warpwatch.export.builder import (
    SnapshotBuilder,
    SnapshotCollector,
    WindowResult,
)
from warpwatch.export.pooling import MEANS
from warpwatch.model import DeviceProperties, DeviceStats, KernelStats, TraceWindow, WindowAnalysis

H100 = DeviceProperties(
    id=0,
    name="NVIDIA H100 80GB HBM3",
    compute_major=9,
    compute_minor=0,
    num_sms=132,
    warp_size=32,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
)


def kernel(
    name: str,
    gpu_time: float,
    *,
    device: int = 0,
    window_us: float = 1e6,
    samples: int = 1,
    launches: float | None = None,
    **means: Any,
) -> KernelStats:
    """A kernel's statistics as analysis would give them for a window of `window_us`."""
    launches = float(samples) if launches is None else launches
    fields: dict[str, Any] = {
        "warps_per_sm": None,
        "resident_warps_per_sm": None,
        "theoretical_occupancy": None,
        "estimated_occupancy": None,
        "waves_per_sm": None,
        "reported_warps_per_sm_min": None,
        "main_limiter": None,
        "artifacts": {},
    }
    fields.update(means)
    weighted = {f: gpu_time * x for f, x in means.items() if f in MEANS and x is not None}
    return KernelStats(
        device=device,
        name=name,
        samples=samples,
        launches=launches,
        launch_rate=launches / (window_us / 1e6),
        gpu_time=gpu_time,
        time_share=gpu_time / window_us,
        weighted_sums=weighted,
        **fields,
    )


def device(
    dev: int = 0,
    *,
    busy: float | None = 0.5,
    resident: float | None = 8.0,
    props: DeviceProperties | None = H100,
    window_us: float = 1e6,
    low: bool = False,
    longest: float = 0.0,
) -> DeviceStats:
    estimated = None if resident is None or props is None else resident / props.max_warps_per_sm
    return DeviceStats(
        dev,
        props,
        resident,
        estimated,
        busy,
        samples=10,
        low_confidence=low,
        busy_time=None if busy is None else busy * window_us,
        resident_time=None if resident is None else resident * window_us,
        longest_kernel=longest,
    )


def window(
    kernels: list[KernelStats], devices: list[DeviceStats], window_us: float = 1e6, path: str = "t.json"
) -> WindowAnalysis:
    kernels = sorted(kernels, key=lambda k: -k.gpu_time)
    return WindowAnalysis(
        path=path,
        window=TraceWindow(0.0, window_us, "trace_span"),
        devices=tuple(devices),
        kernels=tuple(kernels),
        launch_count=sum(k.samples for k in kernels),
        artifacts={},
    )


def ok(analysis: WindowAnalysis, process: str = "p0", seconds: float = 0.01) -> WindowResult:
    return WindowResult("replay:t", process, "ok", seconds, analysis)


def gauged(top_kernels: int, **kwargs: Any) -> SnapshotBuilder:
    """A builder that exports the per-kernel gauges (opt-in since issue 24: these tests read them)."""
    return SnapshotBuilder(kernel_gauges=True, top_kernels=top_kernels, **kwargs)


def publish(builder: SnapshotBuilder, *results: WindowResult, now: float = 1000.0) -> CollectorRegistry:
    for r in results:
        builder.record(r, now)
    builder.apply_round(list(results))
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(builder.snapshot()))
    return registry


def value(registry: CollectorRegistry, m: md.MetricDef, suffix: str = "", **labels: str) -> float | None:
    return registry.get_sample_value(md.exposed_name(m) + suffix, labels)


def kernel_seconds(reg: CollectorRegistry, gpu: str = "0") -> dict[str, float]:
    """Each kernel's `warpwatch_kernel_seconds_total` on one GPU."""
    return {
        s.labels["kernel"]: s.value
        for fam in reg.collect()
        if fam.name == md.KERNEL_SECONDS.name
        for s in fam.samples
        if s.labels["gpu"] == gpu
    }
