"""The one definition of every exported metric: name, type, help, labels.

The exporter, the dashboards, the alert rules and the docs all read this table;
nothing else spells a metric name. Names follow the spec (shared/spec/metrics.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "histogram", "info"]


@dataclass(frozen=True, slots=True)
class MetricDef:
    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""


GPU = ("gpu",)
KERNEL = ("gpu", "kernel")

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
KERNEL_INFO = MetricDef(
    "warpwatch_kernel_info",
    "gauge",
    "The full name behind each exported `kernel` label of the last window (value 1): "
    "from a label to its kernel in one step.",
    ("gpu", "kernel", "name"),
)
WINDOWS = MetricDef(
    "warpwatch_windows", "counter", "Capture windows by outcome (ok, empty, failed, timed_out).", ("outcome",)
)
ERRORS = MetricDef(
    "warpwatch_errors",
    "counter",
    "Faults the agent survived, by stage (capture, read, analysis, nvml, clock, round, export) and reason "
    "(a fixed set per stage); every failed or timed-out window adds one.",
    ("stage", "reason"),
)
WINDOW_PROCESSING = MetricDef(
    "warpwatch_window_processing_seconds", "histogram", "Time to read and analyse one window's trace.", unit="seconds"
)
LAST_WINDOW_TIMESTAMP = MetricDef(
    "warpwatch_last_window_timestamp_seconds",
    "gauge",
    "Unix time at which the last window finished processing (any outcome).",
    unit="seconds",
)
CAPTURE_DUTY = MetricDef(
    "warpwatch_capture_duty_ratio", "gauge", "Configured capture time / wall time (window / period)."
)
KERNELS_FOLDED = MetricDef(
    "warpwatch_kernels_folded",
    "counter",
    'Kernels folded into kernel="other" because they fell outside the top-K by GPU time.',
    GPU,
)
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
BUILD_INFO = MetricDef("warpwatch_build_info", "gauge", "warpwatch build; value 1.", ("version",))


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
CAPTURE_PERIOD = MetricDef(
    "warpwatch_capture_period_seconds",
    "gauge",
    "Time between capture rounds now: --period, stretched while the measured cost to the server exceeds "
    "--overhead-budget; staleness alerts are multiples of it.",
    unit="seconds",
)
CAPTURE_WINDOW = MetricDef(
    "warpwatch_capture_window_seconds",
    "gauge",
    "Capture window the agent asks its sources for now (--window; lengthened by --adaptive-window).",
    unit="seconds",
)

ALL: tuple[MetricDef, ...] = (
    KERNEL_WARPS_PER_SM,
    KERNEL_RESIDENT_WARPS_PER_SM,
    KERNEL_THEORETICAL_OCCUPANCY,
    KERNEL_ESTIMATED_OCCUPANCY,
    KERNEL_WAVES_PER_SM,
    KERNEL_TIME_SHARE,
    KERNEL_LAUNCH_RATE,
    KERNEL_REPORTED_WARPS_MIN,
    KERNEL_LAUNCHES_OBSERVED,
    PROFILER_ARTIFACTS,
    GPU_RESIDENT_WARPS_PER_SM,
    GPU_ESTIMATED_OCCUPANCY,
    GPU_BUSY,
    GPU_LONGEST_KERNEL_RATIO,
    GPU_LOW_CONFIDENCE,
    GPU_OBSERVED_SECONDS,
    GPU_BUSY_SECONDS,
    GPU_RESIDENT_WARPS_SECONDS,
    GPU_EMPTY_SECONDS,
    GPU_LOW_CONFIDENCE_SECONDS,
    KERNEL_SECONDS,
    KERNEL_LAUNCHES_ESTIMATED,
    KERNEL_WARPS_PER_SM_SECONDS,
    KERNEL_RESIDENT_WARPS_PER_SM_SECONDS,
    KERNEL_THEORETICAL_OCCUPANCY_SECONDS,
    KERNEL_ESTIMATED_OCCUPANCY_SECONDS,
    KERNEL_WAVES_PER_SM_SECONDS,
    GPU_INFO,
    KERNEL_INFO,
    WINDOWS,
    ERRORS,
    WINDOW_PROCESSING,
    LAST_WINDOW_TIMESTAMP,
    CAPTURE_DUTY,
    CAPTURE_PERIOD,
    CAPTURE_WINDOW,
    KERNELS_FOLDED,
    NVML_SM_OCCUPANCY,
    NVML_GPU_UTILIZATION,
    NVML_UP,
    BUILD_INFO,
)
"""Every metric of the window snapshot, in the order a scrape exposes them."""

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

# The agent's own operational metrics: rendered at each scrape next to process_* (not part of the
# window snapshot, so not in `ALL`, which the snapshot collector and the dashboards cover).
HTTP_CONNECTIONS = MetricDef("warpwatch_http_connections", "gauge", "HTTP connections open on the metrics port now.")
HTTP_REJECTED = MetricDef(
    "warpwatch_http_rejected",
    "counter",
    "Connections and requests the metrics port refused or closed early, by reason (too_many_connections, "
    "evicted, header_timeout, headers_too_large, auth_busy, slow_reader, client_gone, tls_failed, "
    "accept_failed, bad_request, not_found).",
    ("reason",),
)
DAEMON_CLIENTS = MetricDef(
    "warpwatch_daemon_clients",
    "gauge",
    "Kineto clients (traced processes) registered with a kineto-daemon source now.",
    ("source",),
)
DAEMON_CLIENTS_SEEN = MetricDef(
    "warpwatch_daemon_clients_seen",
    "counter",
    "Kineto clients that registered with a kineto-daemon source (new sender addresses).",
    ("source",),
)
DAEMON_DATAGRAMS_DROPPED = MetricDef(
    "warpwatch_daemon_datagrams_dropped",
    "counter",
    "Datagrams a kineto-daemon source dropped unanswered, by reason (malformed: not a well-formed Kineto message).",
    ("source", "reason"),
)
DAEMON_REPLIES_DROPPED = MetricDef(
    "warpwatch_daemon_replies_dropped",
    "counter",
    "Replies a kineto-daemon source did not send, by reason (stale: the request was older than the client "
    "waits, a late reply would put it one poll behind for good; send_failed: the client's queue or the "
    "socket's send buffer was full, or the client was gone; unsafe_address: the client spells "
    "KINETO_IPC_SOCKET_DIR differently and its Kineto would abort on a reply).",
    ("source", "reason"),
)
DAEMON_CLIENTS_EVICTED = MetricDef(
    "warpwatch_daemon_clients_evicted",
    "counter",
    "Kineto clients a kineto-daemon source dropped from its registry, by reason (registry_full: to make "
    "room for a new sender; undeliverable: replies to it kept failing).",
    ("source", "reason"),
)
DAEMON_CLIENT_EXITS = MetricDef(
    "warpwatch_daemon_client_exits_during_window",
    "counter",
    "Kineto clients of a kineto-daemon source that exited (went silent) while a window they had been "
    "configured for was open; Kineto may crash at exit then (docs/overhead.md).",
    ("source",),
)
SERVER_WINDOWS_SKIPPED = MetricDef(
    "warpwatch_server_windows_skipped",
    "counter",
    "Windows a vllm/sglang source did not open, by reason (unsafe_request: the server's version cannot be "
    "profiled without risk to it; profile_in_use: someone else's profile is running; previous_flush_pending: "
    "the last window's traces are still being written or its stop is unanswered; session_pending: a "
    "step-bounded profile is still waiting for requests).",
    ("source", "reason"),
)
SERVER_TRACE_FILES = MetricDef(
    "warpwatch_server_trace_files",
    "counter",
    "Trace files a vllm/sglang source found, by kind (worker: handed over in its window; late: handed over "
    "after its window timed out; cpu_only: the server front end's CPU trace, deleted unread; abandoned: "
    "never completed, given up).",
    ("source", "kind"),
)

# -- What watching costs the server (docs/overhead.md)
CAPTURE_STOP = MetricDef(
    "warpwatch_capture_stop_seconds",
    "histogram",
    "Seconds from asking a source to end a window until it answered: the time the traced process spent "
    "ending its profile and writing the trace (a vllm/sglang server may serve nothing meanwhile).",
    ("source",),
    unit="seconds",
)
SERVED_SLOWDOWN = MetricDef(
    "warpwatch_served_slowdown_ratio",
    "gauge",
    "Mean wait per output token the server reported (inter-token gaps and first-token waits) inside "
    "capture windows (their stop included) divided by the mean outside them, minus 1, over the last "
    "rounds (vllm/sglang sources; absent until known).",
    ("source",),
)
OVERHEAD = MetricDef(
    "warpwatch_overhead_ratio",
    "gauge",
    "Estimated share of the traced server's time the agent costs at the current period: measured "
    "slowdown x window / period + stop stall / period, the largest over the sources (absent until a "
    "window was measured).",
)
OVERHEAD_BUDGET = MetricDef(
    "warpwatch_overhead_budget_ratio",
    "gauge",
    "The share of the server's time the agent may cost (--overhead-budget); above it the period is stretched.",
)

# -- The evidence store (--evidence-dir; docs/dashboards.md, "From an alert to its trace")
EVIDENCE_KEPT = MetricDef(
    "warpwatch_evidence_kept",
    "counter",
    "Windows whose trace was kept in --evidence-dir, by reason (artifact, degraded, low_confidence, baseline).",
    ("reason",),
)
EVIDENCE_FAILED = MetricDef(
    "warpwatch_evidence_failed",
    "counter",
    "Windows the rule chose whose trace could not be kept, by reason (io_error: the folder refused it, "
    "e.g. a full disk; too_large: larger than --evidence-bytes compressed; queue_full: too many windows "
    "were waiting to be kept; shutdown: the agent stopped first).",
    ("reason",),
)
EVIDENCE_BYTES = MetricDef(
    "warpwatch_evidence_bytes",
    "gauge",
    "Bytes kept in --evidence-dir now (traces and their JSON), at most --evidence-bytes.",
    unit="bytes",
)
EVIDENCE_FILES = MetricDef(
    "warpwatch_evidence_windows", "gauge", "Windows kept in --evidence-dir now, at most --evidence-files."
)

AGENT: tuple[MetricDef, ...] = (
    HTTP_CONNECTIONS,
    HTTP_REJECTED,
    DAEMON_CLIENTS,
    DAEMON_CLIENTS_SEEN,
    DAEMON_DATAGRAMS_DROPPED,
    DAEMON_REPLIES_DROPPED,
    DAEMON_CLIENTS_EVICTED,
    DAEMON_CLIENT_EXITS,
    SERVER_WINDOWS_SKIPPED,
    SERVER_TRACE_FILES,
    CAPTURE_STOP,
    SERVED_SLOWDOWN,
    OVERHEAD,
    OVERHEAD_BUDGET,
    EVIDENCE_KEPT,
    EVIDENCE_FAILED,
    EVIDENCE_BYTES,
    EVIDENCE_FILES,
)


def exposed_name(m: MetricDef) -> str:
    """The sample name as scraped: counters carry `_total`."""
    return m.name + "_total" if m.type == "counter" else m.name
