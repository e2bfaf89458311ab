"""The promtool test of the two recording tiers (part of `warpwatch-rules.test.yaml`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..export import metricdefs as md
from . import queries as q
from .ruletests_inputs import AGENT, SCRAPE, STEP_S, input_series, ramp, selector_labels
from .settings import Settings, format_duration


def _recording_inputs(s: Settings) -> list[tuple[md.MetricDef, dict[str, str], float]]:
    """(counter, labels, increase per minute) of the two pods of `recording_test`."""
    rows: list[tuple[md.MetricDef, dict[str, str], float]] = []
    for pod, observed, gemm, busy, occ in (("a", 60, 30, 45, 0.5), ("b", 30, 6, 15, 0.25)):
        labels = {
            **selector_labels(s),
            **AGENT,
            **SCRAPE,
            "pod": f"llm-{pod}",
            "gpu": "0",
            "instance": f"10.0.0.{ord(pod)}:9946",
        }
        kernel = {**labels, "kernel": "gemm"}
        rows += [
            (md.GPU_OBSERVED_SECONDS, labels, observed),
            (md.GPU_BUSY_SECONDS, labels, busy),
            (md.KERNEL_SECONDS, kernel, gemm),
            (md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, kernel, gemm * occ),
        ]
    return rows


def recording_test(s: Settings) -> dict[str, Any]:
    """Two pods of one deployment, each with the labels a real scrape attaches (namespace,
    deployment, pod, job, instance, container): pod a watched its GPU all the time (60 s/min) with
    gemm taking 30 s/min and the GPU busy 45 s/min; pod b watched its GPU half the time (30 s/min:
    its other windows failed) with gemm taking 6 s/min and busy 15 s/min. Tier 1 records each pod's
    rates (job, instance and container summed away); tier 2, from those records only, the fleet's:
    gemm's time share (30 + 6) / (60 + 30) = 0.4 (the mean of the pods' ratios, (0.5 + 0.2) / 2 =
    0.35, is not), busy (45 + 15) / 90, gemm's mean estimated occupancy (30·0.5 + 6·0.25) / 36."""
    fleet = {k: v for k, v in AGENT.items() if k in s.fleet}
    minutes = 10
    rows = _recording_inputs(s)
    w = s.recording_window

    def expect(record: str, labels: Mapping[str, str], value: float) -> dict[str, Any]:
        """The recorded value in millionths, rounded (floats of rates do not compare exactly)."""
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        return {
            "expr": f"round({record} * 1e6)",
            "eval_time": format_duration(minutes * STEP_S),
            "exp_samples": [{"labels": f"{{{inner}}}", "value": round(value * 1e6)}],
        }

    kernel_fleet = {**fleet, "kernel": "gemm"}
    return {
        "name": "recording rules: per pod from raw series, fleet from those; sums of rates over sums of rates",
        "interval": format_duration(STEP_S),
        "input_series": [
            {"series": input_series(m, labels), "values": ramp((per_min, minutes))} for m, labels, per_min in rows
        ],
        "promql_expr_test": [
            expect(
                f'{q.rate_record(s, md.GPU_OBSERVED_SECONDS, "pod_gpu")}{{pod="llm-a"}}',
                {**fleet, "pod": "llm-a", "gpu": "0"},
                60 / 60,
            ),
            expect(
                f'{q.rate_record(s, md.KERNEL_SECONDS, "pod_kernel")}{{pod="llm-b"}}',
                {**fleet, "pod": "llm-b", "kernel": "gemm"},
                6 / 60,
            ),
            expect(q.rate_record(s, md.GPU_OBSERVED_SECONDS, "fleet"), fleet, 90 / 60),
            expect(q.rate_record(s, md.KERNEL_SECONDS, "fleet_kernel"), kernel_fleet, 36 / 60),
            expect(f"fleet_kernel:warpwatch_kernel_time_share:ratio_rate{w}", kernel_fleet, 36 / 90),
            expect(f"fleet:warpwatch_gpu_busy:ratio_rate{w}", fleet, 60 / 90),
            expect(
                f"fleet_kernel:warpwatch_kernel_estimated_occupancy:ratio_rate{w}",
                kernel_fleet,
                (30 * 0.5 + 6 * 0.25) / 36,
            ),
            expect(f"fleet:warpwatch_gpu_estimated_occupancy:ratio_rate{w}", fleet, (30 * 0.5 + 6 * 0.25) / 90),
        ],
    }
