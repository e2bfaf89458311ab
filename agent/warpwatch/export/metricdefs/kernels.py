"""Per-kernel metrics: the last window's gauges, the raw counts, the full names, and the counters of
corrected window sums that their means are computed from."""

from __future__ import annotations

from .definition import GPU, KERNEL, MetricDef

KERNEL_WARPS_PER_SM = MetricDef(
    "warpwatch_kernel_warps_per_sm",
    "gauge",
    "Launched warps per SM (B*ceil(T/warpSize)/numSMs), duration-weighted mean over the last window, "
    "sampling-corrected. What the profiler's 'warps per SM' means, computed right.",
    KERNEL,
)
KERNEL_RESIDENT_WARPS_PER_SM = MetricDef(
    "warpwatch_kernel_resident_warps_per_sm",
    "gauge",
    "Average warps resident on an SM while the kernel runs (waves and tail accounted), "
    "duration-weighted mean over the last window.",
    KERNEL,
)
KERNEL_THEORETICAL_OCCUPANCY = MetricDef(
    "warpwatch_kernel_theoretical_occupancy_ratio",
    "gauge",
    "Theoretical occupancy (CUDA occupancy calculator, opt-in shared memory), 0..1, "
    "duration-weighted mean over the last window.",
    KERNEL,
)
KERNEL_ESTIMATED_OCCUPANCY = MetricDef(
    "warpwatch_kernel_estimated_occupancy_ratio",
    "gauge",
    "Estimated achieved occupancy: resident warps per SM / max warps per SM, 0..1, "
    "duration-weighted mean over the last window.",
    KERNEL,
)
KERNEL_WAVES_PER_SM = MetricDef(
    "warpwatch_kernel_waves_per_sm",
    "gauge",
    "Waves per SM: blocks / (max active blocks per SM * SMs), duration-weighted mean over the last window.",
    KERNEL,
)
KERNEL_TIME_SHARE = MetricDef(
    "warpwatch_kernel_time_share_ratio",
    "gauge",
    "Share of the last window's wall time spent in this kernel (sampling-corrected; streams add up).",
    KERNEL,
)
KERNEL_LAUNCH_RATE = MetricDef(
    "warpwatch_kernel_launches_per_second",
    "gauge",
    "Kernel launches per second in the last window (sampling-corrected).",
    KERNEL,
)
KERNEL_REPORTED_WARPS_MIN = MetricDef(
    "warpwatch_kernel_reported_warps_per_sm_min",
    "gauge",
    "The profiler's own 'warps per SM' as written in the trace (uncorrected), minimum over the last "
    "window's launches; negative values are profiler artefacts.",
    KERNEL,
)
KERNEL_LAUNCHES_OBSERVED = MetricDef(
    "warpwatch_kernel_launches_observed",
    "counter",
    "Kernel launches captured in traces (raw count, not corrected), over all windows.",
    KERNEL,
)
PROFILER_ARTIFACTS = MetricDef(
    "warpwatch_profiler_artifacts",
    "counter",
    "Launches whose profiler-reported values are wrong, by kind of artefact, over all windows.",
    ("gpu", "kernel", "artifact"),
)
KERNEL_INFO = MetricDef(
    "warpwatch_kernel_info",
    "gauge",
    "The full name behind each exported `kernel` label of the last window (value 1): "
    "from a label to its kernel in one step.",
    ("gpu", "kernel", "name"),
)
KERNEL_LAUNCH_INFO = MetricDef(
    "warpwatch_kernel_launch_info",
    "gauge",
    "What the code decides of each exported kernel's launches in the last window (value 1): threads per "
    "block, registers per thread and shared memory per block (bytes) of its launches with the most GPU "
    "time. With the device they set the theoretical occupancy; the grid (the load) does not enter. "
    "A changed value is a changed build, library or autotune choice.",
    ("gpu", "kernel", "block_size", "registers_per_thread", "shared_memory_bytes"),
)
KERNELS_FOLDED = MetricDef(
    "warpwatch_kernels_folded",
    "counter",
    'Kernels folded into kernel="other" because they fell outside the top-K by GPU time.',
    GPU,
)

KERNEL_GAUGES_OPT_IN: tuple[MetricDef, ...] = (
    KERNEL_WARPS_PER_SM,
    KERNEL_RESIDENT_WARPS_PER_SM,
    KERNEL_THEORETICAL_OCCUPANCY,
    KERNEL_ESTIMATED_OCCUPANCY,
    KERNEL_WAVES_PER_SM,
    KERNEL_TIME_SHARE,
    KERNEL_LAUNCH_RATE,
)
"""Exported only with `--kernel-gauges` (issue 24): rates of the per-kernel counters answer what they
do, so no dashboard or alert reads them. `KERNEL_REPORTED_WARPS_MIN` is exported where negative."""
KERNEL_GAUGES: tuple[MetricDef, ...] = (*KERNEL_GAUGES_OPT_IN, KERNEL_REPORTED_WARPS_MIN)
"""Every per-kernel gauge of one window, in the order a scrape exposes them."""

# -- Counters of corrected window sums (docs/metrics.md, "Aggregation over time and across pods").
# Divide rates of these, never average the gauges above over time or pods.
KERNEL_SECONDS = MetricDef(
    "warpwatch_kernel_seconds",
    "counter",
    "Corrected GPU time of the kernel (sum of h*d), over all windows.",
    KERNEL,
    unit="seconds",
)
KERNEL_LAUNCHES_ESTIMATED = MetricDef(
    "warpwatch_kernel_launches_estimated",
    "counter",
    "Corrected launch count of the kernel (sum of h), over all windows.",
    KERNEL,
)
KERNEL_WARPS_PER_SM_SECONDS = MetricDef(
    "warpwatch_kernel_warps_per_sm_seconds",
    "counter",
    "Sum of h*d*warps_per_sm: divided by warpwatch_kernel_seconds_total, the kernel's mean.",
    KERNEL,
    unit="seconds",
)
KERNEL_RESIDENT_WARPS_PER_SM_SECONDS = MetricDef(
    "warpwatch_kernel_resident_warps_per_sm_seconds",
    "counter",
    "Sum of h*d*resident_warps_per_sm: divided by warpwatch_kernel_seconds_total, the kernel's mean.",
    KERNEL,
    unit="seconds",
)
KERNEL_THEORETICAL_OCCUPANCY_SECONDS = MetricDef(
    "warpwatch_kernel_theoretical_occupancy_seconds",
    "counter",
    "Sum of h*d*theoretical_occupancy: divided by warpwatch_kernel_seconds_total, the kernel's mean.",
    KERNEL,
    unit="seconds",
)
KERNEL_ESTIMATED_OCCUPANCY_SECONDS = MetricDef(
    "warpwatch_kernel_estimated_occupancy_seconds",
    "counter",
    "Sum of h*d*estimated_occupancy: divided by warpwatch_kernel_seconds_total, the kernel's mean.",
    KERNEL,
    unit="seconds",
)
KERNEL_WAVES_PER_SM_SECONDS = MetricDef(
    "warpwatch_kernel_waves_per_sm_seconds",
    "counter",
    "Sum of h*d*waves_per_sm: divided by warpwatch_kernel_seconds_total, the kernel's mean.",
    KERNEL,
    unit="seconds",
)
KERNEL_MEAN_SECONDS: dict[str, MetricDef] = {
    "warps_per_sm": KERNEL_WARPS_PER_SM_SECONDS,
    "resident_warps_per_sm": KERNEL_RESIDENT_WARPS_PER_SM_SECONDS,
    "theoretical_occupancy": KERNEL_THEORETICAL_OCCUPANCY_SECONDS,
    "estimated_occupancy": KERNEL_ESTIMATED_OCCUPANCY_SECONDS,
    "waves_per_sm": KERNEL_WAVES_PER_SM_SECONDS,
}
"""Per mean field of the analysis, its Σh·d·x counter."""
