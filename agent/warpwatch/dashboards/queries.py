"""PromQL built on rates of the corrected sums: the one place that says how each number is read.

docs/metrics.md ("Aggregation over time and across pods") is the contract: a time share is
rate(kernel seconds) / rate(observed seconds); a kernel's mean x is rate(Σh·d·x) / rate(Σh·d);
a GPU's busy ratio, resident warps and occupancy divide by its observed seconds; a fleet's value
is a sum of rates over a sum of rates. Nothing here averages a gauge over time or across pods.

Every function takes a `Sel` (a metric -> selector function: dashboards add their variables,
alerts the base selector), the range of the rates, and the labels kept (`by`). The same
functions build dashboard panels, alert rules and recording rules, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from ..export import metricdefs as md
from .settings import Settings, series

Sel = Callable[[md.MetricDef], str]
"""A metric's series selector (`metric{matchers}`)."""

POD = ("namespace", "pod")
GPU = (*POD, "gpu")
KERNEL = (*GPU, "kernel")

MEAN_COUNTERS: dict[str, md.MetricDef] = {
    "warps_per_sm": md.KERNEL_WARPS_PER_SM_SECONDS,
    "resident_warps_per_sm": md.KERNEL_RESIDENT_WARPS_PER_SM_SECONDS,
    "theoretical_occupancy": md.KERNEL_THEORETICAL_OCCUPANCY_SECONDS,
    "estimated_occupancy": md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS,
    "waves_per_sm": md.KERNEL_WAVES_PER_SM_SECONDS,
}


def _labels(by: Sequence[str]) -> str:
    return ", ".join(by)


def rate_sum(sel: Sel, metric: md.MetricDef, rng: str, by: Sequence[str]) -> str:
    """sum by (by) (rate(metric[rng]))."""
    return f"sum by ({_labels(by)}) (rate({sel(metric)}[{rng}]))"


def per_observed(sel: Sel, metric: md.MetricDef, rng: str, by: Sequence[str], gpu_by: Sequence[str]) -> str:
    """Rate of a sum per observed second of its GPU: a time share (kernel seconds), launches per
    second (estimated launches), busy ratio, resident warps. `by` keeps the numerator's labels,
    `gpu_by` the GPU's (a subset of `by`)."""
    num = rate_sum(sel, metric, rng, by)
    den = rate_sum(sel, md.GPU_OBSERVED_SECONDS, rng, gpu_by)
    if tuple(by) == tuple(gpu_by):
        return f"{num}\n  / {den}"
    return f"{num}\n  / on ({_labels(gpu_by)}) group_left\n{den}"


def time_share(sel: Sel, rng: str, by: Sequence[str] = KERNEL, gpu_by: Sequence[str] = GPU) -> str:
    """Share of the GPU's observed time spent in each kernel (streams add up)."""
    return per_observed(sel, md.KERNEL_SECONDS, rng, by, gpu_by)


def launch_rate(sel: Sel, rng: str, by: Sequence[str] = KERNEL, gpu_by: Sequence[str] = GPU) -> str:
    """Kernel launches per observed second (sampling-corrected)."""
    return per_observed(sel, md.KERNEL_LAUNCHES_ESTIMATED, rng, by, gpu_by)


def kernel_mean(sel: Sel, field: str, rng: str, by: Sequence[str] = KERNEL) -> str:
    """A kernel's duration-weighted mean of `field`: rate(Σh·d·x) / rate(Σh·d)."""
    return f"{rate_sum(sel, MEAN_COUNTERS[field], rng, by)}\n  / {rate_sum(sel, md.KERNEL_SECONDS, rng, by)}"


def gpu_ratio(sel: Sel, metric: md.MetricDef, rng: str, by: Sequence[str] = GPU) -> str:
    """A per-GPU counter per observed second: busy ratio, resident warps, empty or low-confidence share."""
    return per_observed(sel, metric, rng, by, by)


def gpu_occupancy(sel: Sel, rng: str, by: Sequence[str] = GPU) -> str:
    """Time-averaged estimated occupancy of the GPU: Σ over its kernels (`other` included) of
    Σh·d·estimated_occupancy, per observed second."""
    return per_observed(sel, md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, rng, by, by)


# --------------------------------------------------------------------------------------------
# Recording rules, two tiers
#
# Tier 1 (`GROUP_POD`, per pod and GPU) reads raw series only, and only the series of one pod per
# output: any Prometheus shard that scrapes a pod evaluates them. Tier 2 (`GROUP_FLEET`) reads tier
# 1's outputs only: a global Prometheus that federates (or receives) the `pod_*:` records evaluates
# it. Every record is a sum of rates, correct under any further `sum by`; the `:ratio` records are
# for reading only, never to sum or average. One tier-1 record is a ratio of the agent's own gauges:
# its estimated cost to the server over its budget (`OVERHEAD_BUDGET_USED`).


@dataclass(frozen=True, slots=True)
class RecordingDef:
    """One recording rule: `record` = `expr`, in rule group `group`."""

    record: str
    expr: str
    help: str
    group: str = ""


GROUP_POD = "warpwatch-pod"
GROUP_FLEET = "warpwatch-fleet"
GROUPS_RECORDING = (GROUP_POD, GROUP_FLEET)

GPU_RATES: tuple[md.MetricDef, ...] = (
    md.GPU_OBSERVED_SECONDS,
    md.GPU_BUSY_SECONDS,
    md.GPU_RESIDENT_WARPS_SECONDS,
    md.GPU_EMPTY_SECONDS,
    md.GPU_LOW_CONFIDENCE_SECONDS,
    md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS,
)
"""Rates recorded per GPU (tier 1: `pod_gpu:`); the kernels' estimated-occupancy seconds summed over
kernels are the GPU's occupancy numerator."""
KERNEL_RATES: tuple[md.MetricDef, ...] = (
    md.KERNEL_SECONDS,
    md.KERNEL_LAUNCHES_ESTIMATED,
    *MEAN_COUNTERS.values(),
)
"""Rates recorded per pod and kernel (tier 1: `pod_kernel:`, the pod's GPUs summed)."""

Level = Literal["pod_gpu", "pod_kernel", "fleet", "fleet_kernel"]


def rate_record(s: Settings, metric: md.MetricDef, level: Level) -> str:
    """Name of a recorded rate of `metric` (`level:metric:operation`)."""
    return f"{level}:{md.exposed_name(metric)}:rate{s.recording_window}"


def record_series(s: Settings, metric: md.MetricDef, level: Level, *matchers: str) -> str:
    """A selector of a recorded rate, with matchers."""
    inner = ", ".join(m for m in matchers if m)
    name = rate_record(s, metric, level)
    return f"{name}{{{inner}}}" if inner else name


def pod_gpu_labels(s: Settings) -> tuple[str, ...]:
    """Labels of tier-1 GPU records: the fleet labels, then pod and gpu."""
    return (*s.fleet, *(x for x in ("pod", "gpu") if x not in s.fleet))


def pod_labels(s: Settings) -> tuple[str, ...]:
    """Labels of tier-1 per-agent records: the fleet labels, then pod."""
    return (*s.fleet, *(x for x in ("pod",) if x not in s.fleet))


OVERHEAD_BUDGET_USED = "pod:warpwatch_overhead_budget_used:ratio"
"""Each agent's estimated cost to the server it profiles over its own --overhead-budget (1: at the budget)."""


def overhead_budget_used(s: Settings) -> RecordingDef:
    """The agent's cost over its budget, per pod (`max`: a pod scraped by two jobs counts once)."""
    by = _labels(pod_labels(s))
    cost, budget = series(md.OVERHEAD, s.selector), series(md.OVERHEAD_BUDGET, s.selector)
    return RecordingDef(
        OVERHEAD_BUDGET_USED,
        f"max by ({by}) ({cost})\n  / max by ({by}) ({budget})",
        "the agent's estimated cost to the server over its --overhead-budget",
        GROUP_POD,
    )


LAUNCH_INFO_TIERS: dict[Level, str] = {"pod_kernel": GROUP_POD, "fleet_kernel": GROUP_FLEET}


def launch_info_record(level: Level) -> str:
    """Name of the recorded launch resources (`level:warpwatch_kernel_launch_info:max`)."""
    return f"{level}:{md.KERNEL_LAUNCH_INFO.name}:max"


def launch_info_records(s: Settings) -> list[RecordingDef]:
    """Each kernel's launch resources seen now, per pod (tier 1, from the raw gauge) and per
    deployment (tier 2): the launch-changed alert takes its day-long ranges of these, not of raw series."""
    resources = md.KERNEL_LAUNCH_INFO.labels[2:]
    pod_by = _labels((*pod_kernel_labels(s), *resources))
    fleet_by = _labels((*s.fleet, "kernel", *resources))
    return [
        RecordingDef(
            launch_info_record("pod_kernel"),
            f"max by ({pod_by}) ({series(md.KERNEL_LAUNCH_INFO, s.selector)})",
            "the launch resources each kernel of each pod ran with in its agent's last window",
            GROUP_POD,
        ),
        RecordingDef(
            launch_info_record("fleet_kernel"),
            f"max by ({fleet_by}) ({launch_info_record('pod_kernel')})",
            f"the launch resources each kernel ran with in some pod, by {_labels(s.fleet)}",
            GROUP_FLEET,
        ),
    ]


def pod_kernel_labels(s: Settings) -> tuple[str, ...]:
    return (*s.fleet, *(x for x in ("pod", "kernel") if x not in s.fleet))


def recording_rules(s: Settings) -> tuple[RecordingDef, ...]:
    """Tier 1 from raw series, tier 2 from tier 1, then the fleet ratios (module section above)."""
    return (
        *_pod_rates(s),
        overhead_budget_used(s),
        *launch_info_records(s),
        *_fleet_sums(s),
        *_fleet_ratios(s),
    )


def _pod_rates(s: Settings) -> list[RecordingDef]:
    """Tier 1: the rates of the raw series per GPU and per pod and kernel."""

    def sel(metric: md.MetricDef) -> str:
        return series(metric, s.selector)

    w = s.recording_window
    out = [
        RecordingDef(
            rate_record(s, m, "pod_gpu"),
            rate_sum(sel, m, w, pod_gpu_labels(s)),
            f"rate of {md.exposed_name(m)} per GPU",
            GROUP_POD,
        )
        for m in GPU_RATES
    ]
    out += [
        RecordingDef(
            rate_record(s, m, "pod_kernel"),
            rate_sum(sel, m, w, pod_kernel_labels(s)),
            f"rate of {md.exposed_name(m)} per pod and kernel",
            GROUP_POD,
        )
        for m in KERNEL_RATES
    ]
    return out


def _fleet_sums(s: Settings) -> list[RecordingDef]:
    """Tier 2: the tier-1 rates summed over the fleet labels."""
    on = _labels(s.fleet)
    out = [
        RecordingDef(
            rate_record(s, m, "fleet"),
            f"sum by ({on}) ({rate_record(s, m, 'pod_gpu')})",
            f"rate of {md.exposed_name(m)} summed by {on}",
            GROUP_FLEET,
        )
        for m in GPU_RATES
    ]
    out += [
        RecordingDef(
            rate_record(s, m, "fleet_kernel"),
            f"sum by ({on}, kernel) ({rate_record(s, m, 'pod_kernel')})",
            f"rate of {md.exposed_name(m)} summed by {on}, kernel",
            GROUP_FLEET,
        )
        for m in KERNEL_RATES
    ]
    return out


def _fleet_ratios(s: Settings) -> list[RecordingDef]:
    """The fleet's ratios of tier-2 rates: time share, occupancy and busy ratio."""
    w = s.recording_window
    on = _labels(s.fleet)
    observed = rate_record(s, md.GPU_OBSERVED_SECONDS, "fleet")
    kernel_seconds = rate_record(s, md.KERNEL_SECONDS, "fleet_kernel")
    return [
        RecordingDef(
            f"fleet_kernel:warpwatch_kernel_time_share:ratio_rate{w}",
            f"{kernel_seconds}\n  / on ({on}) group_left\n{observed}",
            "share of the fleet's observed GPU time spent in each kernel",
            GROUP_FLEET,
        ),
        RecordingDef(
            f"fleet_kernel:warpwatch_kernel_estimated_occupancy:ratio_rate{w}",
            f"{rate_record(s, md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, 'fleet_kernel')}\n  / {kernel_seconds}",
            "each kernel's duration-weighted mean estimated occupancy over the fleet",
            GROUP_FLEET,
        ),
        RecordingDef(
            f"fleet:warpwatch_gpu_busy:ratio_rate{w}",
            f"{rate_record(s, md.GPU_BUSY_SECONDS, 'fleet')}\n  / {observed}",
            "busy share of the fleet's observed GPU time",
            GROUP_FLEET,
        ),
        RecordingDef(
            f"fleet:warpwatch_gpu_estimated_occupancy:ratio_rate{w}",
            f"{rate_record(s, md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, 'fleet')}\n  / {observed}",
            "time-averaged estimated occupancy of the fleet's GPUs",
            GROUP_FLEET,
        ),
    ]


def record_ratio(
    s: Settings,
    num: md.MetricDef,
    num_level: Level,
    den: md.MetricDef,
    den_level: Level,
    matchers: Sequence[str],
    rng: str = "",
    on: Sequence[str] = (),
    den_by: Sequence[str] = (),
) -> str:
    """Recorded rate of `num` over recorded rate of `den` (panels and alerts read the tiers, not raw
    series). With `rng`, both are averaged over it first (the mean of a rate over a range is the rate
    over that range). `on`: the denominator's labels, where the numerator has more (`kernel`);
    `den_by`: sum the denominator by these first (a pod's GPUs together)."""

    def side(metric: md.MetricDef, level: Level) -> str:
        sel = record_series(s, metric, level, *matchers)
        return f"avg_over_time({sel}[{rng}])" if rng else sel

    n, d = side(num, num_level), side(den, den_level)
    if den_by:
        d = f"sum by ({_labels(den_by)}) ({d})"
    if on:
        return f"{n}\n  / on ({_labels(on)}) group_left\n{d}"
    return f"{n}\n  / {d}"
