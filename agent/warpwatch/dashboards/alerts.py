"""Alerts: each rule's PromQL (from `queries`), thresholds (from `Settings`), annotations and runbook.

`rules.py` renders `alerts()` as Prometheus rules, a PrometheusRule object, Grafana alert
provisioning, promtool tests and runbooks; it adds no query or threshold of its own. Every
expression divides rates of the corrected sums or counts events: none averages a per-window gauge
over time (docs/metrics.md, "Aggregation over time and across pods").
"""

from __future__ import annotations

from collections.abc import Callable

from ..export import metricdefs as md
from . import queries as q
from .alerts_occupancy import GROUP_OCCUPANCY, deployment_regressed, kernel_regressed, launch_changed
from .alerts_overhead import slows_serving
from .runbook import AlertDef, Runbook, Severity
from .settings import (
    ALERTED_ARTIFACTS,
    DEFAULT_SETTINGS,
    FAILING_MATCHER,
    Settings,
    alert_series,
)

__all__ = ["AlertDef", "Runbook", "Severity", "alerts"]

GROUP_PROFILER = "warpwatch-profiler"
GROUP_COVERAGE = "warpwatch-coverage"
GROUP_AGENT = "warpwatch-agent"
GROUPS: tuple[str, ...] = (GROUP_PROFILER, GROUP_OCCUPANCY, GROUP_COVERAGE, GROUP_AGENT)


INHIBITIONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("WarpwatchOccupancyRegressed", "WarpwatchKernelOccupancyRegressed", ("namespace", "deployment")),
    ("WarpwatchWindowTooShort", "WarpwatchOccupancyDisagreesWithNvml", ("namespace", "pod", "gpu")),
    ("WarpwatchNoRecentWindow", "WarpwatchWindowsFailing", ("namespace", "pod")),
)
"""(source, target, equal labels): while the source fires, Alertmanager holds back the target with
the same labels (one cause implies the other: a build-wide regression regresses its kernels; kernels longer
than the window make the estimate disagree with NVML; an agent that finishes no window fails them).
`rules.alertmanager_config` renders them."""
NOTIFY_GROUP_BY: tuple[str, ...] = ("alertname", "namespace", "deployment")
"""What one notification groups: one alert kind in one deployment, what an on-call person acts on."""


def _gpu_keep(s: Settings) -> str:
    """The labels that name one GPU of one pod, as a `by (...)` list."""
    return ", ".join(q.pod_gpu_labels(s))


def _profiler_artifacts(s: Settings) -> AlertDef:
    """WarpwatchProfilerArtifacts."""
    artifact_matcher = 'artifact=~"' + "|".join(ALERTED_ARTIFACTS) + '"'
    return AlertDef(
        name="WarpwatchProfilerArtifacts",
        group=GROUP_PROFILER,
        expr=(
            "sum by (namespace, pod, artifact) (\n  increase("
            f"{alert_series(s, md.PROFILER_ARTIFACTS, artifact_matcher)}[{s.artifact_window}])\n) > 0"
        ),
        for_=s.artifact_for,
        severity="info",
        summary="Profiler reports wrong numbers in pod {{ $labels.pod }} ({{ $labels.artifact }})",
        description=(
            '{{ printf "%.0f" $value }} kernel launches in pod {{ $labels.namespace }}/{{ $labels.pod }} '
            "carried the profiler artefact {{ $labels.artifact }} in the last "
            f"{s.artifact_window} (one alert per pod and kind; the *Profiler artefacts* dashboard "
            "lists the kernels and GPUs). The raw trace numbers for these launches (Kineto's 'warps per "
            "SM', 'blocks per SM', 'est. achieved occupancy %') are wrong; warpwatch's metrics "
            "are recomputed from the launch configuration and are correct."
        ),
        thresholds=(("artifact_window", s.artifact_window), ("artifact_for", s.artifact_for)),
        runbook=_profiler_artifacts_runbook(),
    )


def _profiler_artifacts_runbook() -> Runbook:
    return Runbook(
        meaning="The PyTorch profiler wrote values for this kernel that cannot be right: "
        "negative warps per SM, inf/nan, the -99/-100 occupancy sentinel, a grid of 2^31 "
        "blocks or more, or an invalid SM count.",
        impact="None on the workload. Anyone reading the raw trace (TensorBoard, HTA, "
        "Perfetto) sees wrong warps per SM and occupancy for these launches. warpwatch's "
        "own metrics are corrected; this alert is informational.",
        diagnosis=(
            "Open the *Profiler artefacts* dashboard: the *Reported vs corrected warps per SM* "
            "panel shows the trace's value beside warpwatch's for the same kernel.",
            "`negative_warps_per_sm` with `grid_overflow`: the kernel launches 2^31 or more "
            "blocks; Kineto's 32-bit product wraps.",
            "`negative_warps_per_sm` on every kernel, or `sm_count_invalid`: an old PyTorch "
            "(1.8/early 1.9) read the SM count as -1 on Turing or newer GPUs.",
            "`non_finite` or `occupancy_sentinel`: the profiler could not read the device "
            "properties, or its occupancy calculator does not know the GPU.",
        ),
        mitigation=(
            "Use warpwatch's metrics instead of the trace's numbers; nothing needs fixing in the workload.",
            "Upgrading PyTorch removes the SM-count cases; grid overflow is still present in current Kineto.",
            "To silence it, route severity=info alerts to a low-priority receiver, or "
            "drop the kinds you accept from `ALERTED_ARTIFACTS`.",
        ),
    )


def _occupancy_disagrees_with_nvml(s: Settings) -> AlertDef:
    """WarpwatchOccupancyDisagreesWithNvml."""
    gpu_observed = q.record_series(s, md.GPU_OBSERVED_SECONDS, "pod_gpu")
    occupancy = (
        f"avg_over_time({q.record_series(s, md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, 'pod_gpu')}"
        f"[{s.nvml_window}])\n    / avg_over_time({gpu_observed}[{s.nvml_window}])"
    )
    nvml = f"max by ({_gpu_keep(s)}) (avg_over_time({alert_series(s, md.NVML_SM_OCCUPANCY)}[{s.nvml_window}]))"
    return AlertDef(
        name="WarpwatchOccupancyDisagreesWithNvml",
        group=GROUP_OCCUPANCY,
        expr=(f"abs(\n  (\n    {occupancy}\n  )\n  - {nvml}\n) > {s.nvml_max_difference}"),
        for_=s.nvml_for,
        severity="warning",
        summary="GPU {{ $labels.gpu }} of {{ $labels.pod }}: estimated occupancy and NVML GPM SM occupancy "
        'differ by {{ printf "%.2f" $value }}',
        description=(
            "warpwatch's estimated occupancy of GPU {{ $labels.gpu }} (pod {{ $labels.namespace }}/"
            "{{ $labels.pod }}) differs from the hardware's "
            '(NVML GPM SM occupancy) by {{ printf "%.2f" $value }} over the last '
            f"{s.nvml_window} (bound {s.nvml_max_difference}). Either other processes share the GPU, "
            "the device indices differ, or the traces miss most of the GPU's work."
        ),
        thresholds=(
            ("nvml_window", s.nvml_window),
            ("nvml_max_difference", str(s.nvml_max_difference)),
            ("nvml_for", s.nvml_for),
        ),
        runbook=_occupancy_disagrees_with_nvml_runbook(),
    )


def _occupancy_disagrees_with_nvml_runbook() -> Runbook:
    return Runbook(
        meaning="NVML's GPM SM occupancy (hardware counters, all processes on the device) and "
        "warpwatch's estimate (from the traced process's kernel launches) should agree within "
        "a few percent when the traced process is the GPU's only user.",
        impact="warpwatch's per-kernel numbers still describe the traced process, but the "
        "device-level view is incomplete or attributed to the wrong GPU.",
        diagnosis=(
            "Other processes on the GPU (`nvidia-smi`): NVML counts their warps, the trace "
            "does not. Expected with MPS or time-slicing.",
            "Device indices: the `gpu` label is the index the traced process sees; with "
            "`CUDA_VISIBLE_DEVICES` remapping it can differ from NVML's index.",
            "Estimate far below NVML: long kernels (longer than the capture window) are never "
            "captured; see WarpwatchWindowTooShort and the *Coverage* panels.",
            "Estimate far above NVML: blocks of unequal duration or heavy tail effects; "
            "compare with Nsight Compute's achieved occupancy for the top kernels.",
        ),
        mitigation=(
            "Fix the device mapping, or accept the difference for shared GPUs and silence the alert for them.",
            "Lengthen the capture window when long kernels dominate.",
        ),
    )


def _window_too_short(s: Settings) -> AlertDef:
    """WarpwatchWindowTooShort."""
    gpu_keep = _gpu_keep(s)
    gpu_observed = q.record_series(s, md.GPU_OBSERVED_SECONDS, "pod_gpu")
    longest = f"max by ({gpu_keep}) (max_over_time({alert_series(s, md.GPU_LONGEST_KERNEL_RATIO)}[{s.short_window}]))"
    nvml_util = f"max by ({gpu_keep}) (avg_over_time({alert_series(s, md.NVML_GPU_UTILIZATION)}[{s.short_window}]))"
    busy = (
        f"avg_over_time({q.record_series(s, md.GPU_BUSY_SECONDS, 'pod_gpu')}[{s.short_window}])"
        f"\n      / avg_over_time({gpu_observed}[{s.short_window}])"
    )
    return AlertDef(
        name="WarpwatchWindowTooShort",
        group=GROUP_COVERAGE,
        expr=(
            f"label_replace(\n  {longest} >= {s.short_max_kernel_ratio},"
            '\n  "evidence", "long_kernels", "", ""\n)\nor\nlabel_replace(\n  (\n    '
            f"{nvml_util}\n    - ({busy})\n  )"
            f' > {s.short_max_nvml_gap},\n  "evidence", "nvml_busier", "", ""\n)'
        ),
        for_=s.short_for,
        severity="warning",
        summary="The capture window is too short for the workload on GPU {{ $labels.gpu }} ({{ $labels.evidence }})",
        description=(
            "GPU {{ $labels.gpu }} in pod {{ $labels.namespace }}/{{ $labels.pod }} runs kernels that "
            "the capture window cannot hold ({{ $labels.evidence }}: "
            '{{ printf "%.2f" $value }}). long_kernels: the longest captured kernel reached that share '
            f"of its window (bound {s.short_max_kernel_ratio}); nvml_busier: NVML's utilisation exceeds "
            f"the estimated busy ratio by that much (bound {s.short_max_nvml_gap}). Kernels longer than "
            "the window are never captured: time shares, busy ratio and occupancy read low."
        ),
        thresholds=(
            ("short_window", s.short_window),
            ("short_max_kernel_ratio", str(s.short_max_kernel_ratio)),
            ("short_max_nvml_gap", str(s.short_max_nvml_gap)),
            ("short_for", s.short_for),
        ),
        runbook=_window_too_short_runbook(),
    )


def _window_too_short_runbook() -> Runbook:
    return Runbook(
        meaning="The window is too short for this workload. Kineto keeps only kernels that lie "
        "wholly inside the window: a kernel of duration d is captured with probability (W - d)/W "
        "and never when d >= W. warpwatch corrects for the first (each captured kernel counts "
        "W/(W - d) times) but cannot see the second, and near W the correction rests on few, "
        "heavily weighted samples.",
        impact="Time shares, busy ratio and occupancy of this GPU read too low (the uncaptured "
        "kernels' time counts as idle), and per-kernel numbers of kernels near W are noisy. "
        "Windows that fall inside a long kernel come back empty.",
        diagnosis=(
            "*Overview* dashboard, *Coverage* panels: longest captured kernel / window near or "
            "above 0.5, a high share of empty windows while the workload runs, and NVML "
            "utilisation above the estimated busy ratio all say the same thing.",
            "`warpwatch analyze` on a trace taken with a longer window (e.g. 5-10x) shows which "
            "kernels are long: typically NCCL collectives waiting for a straggler, large "
            "prefill GEMMs, or custom kernels that loop.",
            "nvml_busier also fires when another process shares the GPU, or when the `gpu` "
            "index differs from NVML's (CUDA_VISIBLE_DEVICES).",
        ),
        mitigation=(
            "Run the agent with `--adaptive-window` (sources where the agent chooses the window: "
            "kineto-daemon, vLLM, SGLang, in-process): occasional longer probe windows find "
            "the long kernels and lengthen the window, within the duty cap.",
            "Or set `--window` to several times the longest kernel, and `--period` so that the "
            "duty (window / period) stays under the cap.",
            "For dir: sources, lengthen the capture in the workload's own profiler schedule.",
        ),
    )


def _no_recent_window(s: Settings) -> AlertDef:
    """WarpwatchNoRecentWindow."""
    return AlertDef(
        name="WarpwatchNoRecentWindow",
        group=GROUP_AGENT,
        expr=(
            f"time() - {alert_series(s, md.LAST_WINDOW_TIMESTAMP)}\n"
            f"  > {s.stale_periods:g} * {alert_series(s, md.CAPTURE_PERIOD)}"
        ),
        for_=s.stale_for,
        severity="warning",
        summary='warpwatch has not finished a capture window for {{ printf "%.0f" $value }} s',
        description=(
            'The warpwatch agent has not finished a capture window for {{ printf "%.0f" $value }} s, '
            f"more than {s.stale_periods:g} of its capture periods (its own "
            f"`{md.CAPTURE_PERIOD.name}`). Its metrics describe the past."
        ),
        thresholds=(
            ("stale_periods", f"{s.stale_periods:g}"),
            ("stale_for", s.stale_for),
        ),
        runbook=_no_recent_window_runbook(),
    )


def _no_recent_window_runbook() -> Runbook:
    return Runbook(
        meaning="The agent is scraped but its last window (any outcome) finished long ago: "
        "its capture loop is stuck or blocked.",
        impact="Occupancy metrics and every other alert of warpwatch stop reflecting the workload.",
        diagnosis=(
            "Agent logs: a source that blocks (a trace that never arrives, a full disk).",
            "*Agent health* dashboard: processing time near the period means windows queue up.",
            "An agent that is not scraped at all does not raise this alert; watch `up` for that.",
        ),
        mitigation=("Restart the agent; if windows take longer than the period, raise `--period`.",),
    )


def _windows_failing(s: Settings) -> AlertDef:
    """WarpwatchWindowsFailing."""
    windows = alert_series(s, md.WINDOWS)
    failing = alert_series(s, md.WINDOWS, FAILING_MATCHER)
    return AlertDef(
        name="WarpwatchWindowsFailing",
        group=GROUP_AGENT,
        expr=(
            f"sum without (outcome) (rate({failing}[{s.failing_window}]))\n"
            f"  / sum without (outcome) (rate({windows}[{s.failing_window}]))\n"
            f"  > {s.failing_ratio}"
        ),
        for_=s.failing_for,
        severity="warning",
        summary="{{ humanizePercentage $value }} of warpwatch capture windows fail",
        description=(
            "{{ humanizePercentage $value }} of the agent's capture windows failed or timed out "
            f"over the last {s.failing_window} (bound {s.failing_ratio:.0%})."
        ),
        thresholds=(
            ("failing_window", s.failing_window),
            ("failing_ratio", str(s.failing_ratio)),
            ("failing_for", s.failing_for),
        ),
        runbook=_windows_failing_runbook(),
    )


def _windows_failing_runbook() -> Runbook:
    return Runbook(
        meaning="Most capture windows end as `failed` or `timed_out`: no trace, an unreadable "
        "trace, or a trace that arrived too late.",
        impact="Few or no windows are analysed; metrics go stale or rest on few samples.",
        diagnosis=(
            "Agent logs name the window's source and the reason of each failure.",
            "`timed_out`: the traced process did not answer (not started with "
            "`KINETO_USE_DAEMON=1`, busy with another trace, or the start time was refused).",
            "`failed`: unreadable or truncated trace files, permissions on the trace "
            "directory, a socket already taken by another daemon (dynolog).",
        ),
        mitigation=(
            "Fix the source configuration named in the logs; raise the capture timeout if "
            "traces are merely slow to be written.",
        ),
    )


def _capture_duty_high(s: Settings) -> AlertDef:
    """WarpwatchCaptureDutyHigh."""
    return AlertDef(
        name="WarpwatchCaptureDutyHigh",
        group=GROUP_AGENT,
        expr=f"{alert_series(s, md.CAPTURE_DUTY)} > {s.max_capture_duty}",
        for_=s.duty_for,
        severity="warning",
        summary="warpwatch profiles {{ humanizePercentage $value }} of the time",
        description=(
            "The agent captures traces {{ humanizePercentage $value }} of the wall time, above "
            f"the {s.max_capture_duty:.0%} bound; profiling slows the workload while it runs."
        ),
        thresholds=(("max_capture_duty", str(s.max_capture_duty)), ("duty_for", s.duty_for)),
        runbook=_capture_duty_high_runbook(),
    )


def _capture_duty_high_runbook() -> Runbook:
    return Runbook(
        meaning="The configured capture window is a large share of the period between windows.",
        impact="CUPTI activity tracing costs the traced process a few percent while it runs; "
        "at high duty that cost is paid most of the time.",
        diagnosis=("Compare the agent's `--window` and `--period` settings.",),
        mitigation=("Shorten the window or lengthen the period.",),
    )


ALERTS: tuple[Callable[[Settings], AlertDef], ...] = (
    _profiler_artifacts,
    kernel_regressed,
    deployment_regressed,
    launch_changed,
    _occupancy_disagrees_with_nvml,
    _window_too_short,
    _no_recent_window,
    _windows_failing,
    _capture_duty_high,
    slows_serving,
)
"""Each alert's builder, in group order."""


def alerts(s: Settings = DEFAULT_SETTINGS) -> tuple[AlertDef, ...]:
    """Every alert, in group order."""
    return tuple(alert(s) for alert in ALERTS)
