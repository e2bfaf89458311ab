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
# Recording rules for the fleet view


@dataclass(frozen=True, slots=True)
class RecordingDef:
    """One recording rule: `record` = `expr`."""

    record: str
    expr: str
    help: str


GROUP_RECORDING = "warpwatch-recording"

FLEET_RATES: tuple[tuple[md.MetricDef, bool], ...] = (
    (md.GPU_OBSERVED_SECONDS, False),
    (md.GPU_BUSY_SECONDS, False),
    (md.GPU_RESIDENT_WARPS_SECONDS, False),
    (md.GPU_EMPTY_SECONDS, False),
    (md.KERNEL_SECONDS, True),
    (md.KERNEL_LAUNCHES_ESTIMATED, True),
    *((m, True) for m in MEAN_COUNTERS.values()),
)
"""(counter, per kernel): the rates the fleet rules record."""


def rate_record(s: Settings, metric: md.MetricDef, per_kernel: bool) -> str:
    """Name of the recorded fleet rate of `metric` (`level:metric:operation`)."""
    level = "fleet_kernel" if per_kernel else "fleet"
    return f"{level}:{md.exposed_name(metric)}:rate{s.recording_window}"


def recording_rules(s: Settings) -> tuple[RecordingDef, ...]:
    """Fleet rates summed by `Settings.fleet` (and `kernel`), then the ratios read from them.

    The recorded rates stay correct under any further `sum by`: sum them, then divide (a fleet's
    time share is sum of kernel seconds rates / sum of observed seconds rates). The `:ratio`
    records are for reading only; never sum or average them.
    """
    def sel(metric: md.MetricDef) -> str:
        return series(metric, s.selector)

    fleet = s.fleet
    out = [
        RecordingDef(
            rate_record(s, metric, per_kernel),
            rate_sum(sel, metric, s.recording_window, (*fleet, "kernel") if per_kernel else fleet),
            f"rate of {md.exposed_name(metric)} summed by {', '.join(fleet)}{', kernel' if per_kernel else ''}",
        )
        for metric, per_kernel in FLEET_RATES
    ]
    observed = rate_record(s, md.GPU_OBSERVED_SECONDS, False)
    kernel_seconds = rate_record(s, md.KERNEL_SECONDS, True)
    on = _labels(fleet)
    w = s.recording_window
    out += [
        RecordingDef(f"fleet_kernel:warpwatch_kernel_time_share:ratio_rate{w}",
                     f"{kernel_seconds}\n  / on ({on}) group_left\n{observed}",
                     "share of the fleet's observed GPU time spent in each kernel"),
        RecordingDef(f"fleet_kernel:warpwatch_kernel_estimated_occupancy:ratio_rate{w}",
                     f"{rate_record(s, md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, True)}\n  / {kernel_seconds}",
                     "each kernel's duration-weighted mean estimated occupancy over the fleet"),
        RecordingDef(f"fleet:warpwatch_gpu_busy:ratio_rate{w}",
                     f"{rate_record(s, md.GPU_BUSY_SECONDS, False)}\n  / {observed}",
                     "busy share of the fleet's observed GPU time"),
        RecordingDef(f"fleet:warpwatch_gpu_estimated_occupancy:ratio_rate{w}",
                     f"sum by ({on}) ({rate_record(s, md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, True)})\n  / {observed}",
                     "time-averaged estimated occupancy of the fleet's GPUs"),
    ]
    return tuple(out)
