"""The per-GPU occupancy alert: one faulty GPU is one alert, not one per kernel it runs.

It reads the per-pod tier's records (`queries.GROUP_POD`): the GPU's estimated occupancy (Σ over its
kernels of corrected time x occupancy, per observed second) now against its own baseline, with the
thresholds of the per-kernel alert. While it fires, Alertmanager holds back
WarpwatchKernelOccupancyDegraded in the same deployment (`alerts.INHIBITIONS`).
"""

from __future__ import annotations

from ..export import metricdefs as md
from . import queries as q
from .runbook import AlertDef, Runbook
from .settings import Settings

GROUP_OCCUPANCY = "warpwatch-occupancy"


def gpu_degraded(s: Settings, degraded: str) -> AlertDef:
    """`degraded`: `alerts._degraded_branch` at the `pod_gpu` level."""
    busy_now = (
        f"avg_over_time({q.record_series(s, md.GPU_BUSY_SECONDS, 'pod_gpu')}[{s.degraded_window}])"
        f"\n    / avg_over_time({q.record_series(s, md.GPU_OBSERVED_SECONDS, 'pod_gpu')}"
        f"[{s.degraded_window}])"
    )
    pct = f"{s.degraded_min_time_share:.0%}"
    return AlertDef(
        name="WarpwatchGpuOccupancyDegraded",
        group=GROUP_OCCUPANCY,
        expr=f"{degraded}\nand\n  (\n    {busy_now}\n  ) > {s.degraded_min_time_share}",
        for_=s.degraded_for,
        severity="warning",
        summary='GPU {{ $labels.gpu }} of {{ $labels.pod }} runs at {{ printf "%.2f" $value }}x its usual occupancy',
        description=(
            "Time-averaged estimated occupancy of GPU {{ $labels.gpu }} in pod {{ $labels.namespace }}/"
            f"{{{{ $labels.pod }}}} over the last {s.degraded_window} is "
            '{{ printf "%.2f" $value }} times its '
            f"mean over the {s.degraded_baseline_window} ending {s.degraded_baseline_offset} ago "
            f"(bound {s.degraded_ratio}), while the GPU is busy more than {pct} of the time. "
            "Every kernel of this GPU is affected; their per-deployment alerts are held back."
        ),
        thresholds=degraded_thresholds(s),
        runbook=Runbook(
            meaning="One GPU keeps fewer warps resident per SM than it did over the previous day, "
            "across its kernels: the GPU itself (clocks, ECC, MIG or MPS reconfigured, another process "
            "sharing it), or the work placed on it (a rank with a different shape) changed.",
            impact="That GPU's steps run slower; in tensor- or pipeline-parallel serving the whole "
            "replica waits for it.",
            diagnosis=(
                "*Overview* dashboard for the pod: occupancy and busy ratio of this GPU beside its "
                "siblings; NVML GPM occupancy beside the estimate.",
                "dcgm-exporter for the same UUID (`warpwatch_gpu_info{uuid}`): clocks, throttling, XID errors, ECC.",
                "`nvidia-smi` on the node: other processes on the device.",
            ),
            mitigation=(
                "Drain or restart the pod on another node if the GPU is faulty.",
                "If the work on the GPU changed on purpose, the alert clears once the baseline window "
                f"({s.degraded_baseline_window}) has absorbed it.",
            ),
        ),
    )


def degraded_thresholds(s: Settings) -> tuple[tuple[str, str], ...]:
    """The settings both occupancy-degraded alerts are defined by (shown with each alert)."""
    return (
        ("degraded_window", s.degraded_window),
        ("degraded_ratio", str(s.degraded_ratio)),
        ("degraded_baseline_window", s.degraded_baseline_window),
        ("degraded_baseline_offset", s.degraded_baseline_offset),
        ("degraded_min_time_share", str(s.degraded_min_time_share)),
        ("degraded_min_samples", str(s.degraded_min_samples)),
        ("degraded_for", s.degraded_for),
    )
