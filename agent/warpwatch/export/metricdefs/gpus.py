"""Per-GPU metrics: the last window's gauges, the device, the counters of corrected window sums,
the window's coverage, and NVML's own readings."""

from __future__ import annotations

from .definition import GPU, MetricDef

GPU_RESIDENT_WARPS_PER_SM = MetricDef(
    "warpwatch_gpu_resident_warps_per_sm",
    "gauge",
    "Time-averaged resident warps per SM over the last window, all kernels (sampling-corrected, not capped).",
    GPU,
)
GPU_ESTIMATED_OCCUPANCY = MetricDef(
    "warpwatch_gpu_estimated_occupancy_ratio",
    "gauge",
    "Time-averaged estimated occupancy of the GPU over the last window, 0..1.",
    GPU,
)
GPU_BUSY = MetricDef(
    "warpwatch_gpu_busy_ratio",
    "gauge",
    "Share of the last window with at least one kernel running (sampling-corrected, not capped: one "
    "window may read above 1).",
    GPU,
)
GPU_INFO = MetricDef(
    "warpwatch_gpu_info",
    "gauge",
    "Device seen in the last window's trace or by NVML; value 1. `vendor` is nvidia or amd; `uuid` the "
    "GPU's UUID where the trace or NVML gives one (joins with dcgm-exporter's `UUID`: their `gpu` differs).",
    ("gpu", "name", "compute_capability", "sms", "vendor", "uuid"),
)

# -- Counters of corrected window sums (docs/metrics.md, "Aggregation over time and across pods").
# Divide rates of these, never average the gauges above over time or pods.
GPU_OBSERVED_SECONDS = MetricDef(
    "warpwatch_gpu_observed_seconds",
    "counter",
    "Capture-window time during which a traced process using this GPU was watched: W for every "
    "window, empty ones included; the denominator of every time share, busy and occupancy.",
    GPU,
    unit="seconds",
)
GPU_BUSY_SECONDS = MetricDef(
    "warpwatch_gpu_busy_seconds",
    "counter",
    "Estimated time with at least one kernel running (sampling-corrected busy ratio x W), summed over windows.",
    GPU,
    unit="seconds",
)
GPU_RESIDENT_WARPS_SECONDS = MetricDef(
    "warpwatch_gpu_resident_warps_seconds",
    "counter",
    "Sum over kernels of corrected GPU time x resident warps per SM (warp-seconds per SM); divided by "
    "observed seconds: time-averaged resident warps per SM.",
    GPU,
    unit="seconds",
)
GPU_EMPTY_SECONDS = MetricDef(
    "warpwatch_gpu_empty_seconds",
    "counter",
    "Observed time in windows that captured no kernel on this GPU (idle, or inside kernels longer than the window).",
    GPU,
    unit="seconds",
)
GPU_LOW_CONFIDENCE_SECONDS = MetricDef(
    "warpwatch_gpu_low_confidence_seconds",
    "counter",
    "Observed time in windows whose statistics for this GPU are low-confidence (estimated bounds, "
    "a captured kernel of at least half the window, more than 4 kernels at once).",
    GPU,
    unit="seconds",
)

# -- Coverage: is the window long enough for the workload?
GPU_LONGEST_KERNEL_RATIO = MetricDef(
    "warpwatch_gpu_longest_kernel_window_ratio",
    "gauge",
    "Longest kernel captured on this GPU in the last round, as a share of its window's length. Near "
    "or above 0.5, kernels comparable to the window are sampled poorly and longer ones not at all.",
    GPU,
)
GPU_LOW_CONFIDENCE = MetricDef(
    "warpwatch_gpu_low_confidence",
    "gauge",
    "1 when the last round's statistics for this GPU are low-confidence, else 0.",
    GPU,
)

# -- NVML (nvidia-ml-py), read beside the traces
NVML_SM_OCCUPANCY = MetricDef(
    "warpwatch_nvml_sm_occupancy_ratio",
    "gauge",
    "NVML GPM SM occupancy (warps active / theoretical maximum) over the last window, Hopper and newer.",
    GPU,
)
NVML_GPU_UTILIZATION = MetricDef(
    "warpwatch_nvml_gpu_utilization_ratio",
    "gauge",
    "NVML GPU utilisation (share of time a kernel was running) at the last window, 0..1.",
    GPU,
)
NVML_UP = MetricDef("warpwatch_nvml_up", "gauge", "1 when NVML is available and answered at the last sample, else 0.")
