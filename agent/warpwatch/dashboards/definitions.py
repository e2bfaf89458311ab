"""The one source for dashboards and alerts: selectors, thresholds, durations, panel queries, alerts.

Everything here is plain data built from `metricdefs` (metric names are never spelled here) and
one frozen `Settings`. `grafana.py` turns `dashboards()` into Grafana JSON, `rules.py` turns
`alerts()` into Prometheus rules, a PrometheusRule object, Grafana alert provisioning and promtool
tests; neither adds a query or a threshold of its own.

Dashboard expressions carry Grafana variables (`$namespace`, `$__rate_interval`, ...);
`all_queries()` substitutes them so every expression is plain PromQL a Prometheus can evaluate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Literal, get_args

from .. import metricdefs as md
from ..capture import Outcome
from ..config import MAX_DUTY
from ..errors import ConfigError
from ..model import ARTIFACT_KINDS

# --------------------------------------------------------------------------------------------
# Durations

_DURATION = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")
_UNIT_SECONDS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


def duration_seconds(text: str) -> float:
    """Seconds in a Prometheus duration string (`1h30m`, `90s`, `1d`); ValueError if it is not one."""
    match = _DURATION.match(text)
    if not text or match is None or not any(match.groups()):
        raise ValueError(f"not a Prometheus duration: {text!r} (use e.g. 30s, 5m, 1h, 1d)")
    return sum(int(g) * unit for g, unit in zip(match.groups(), _UNIT_SECONDS, strict=True) if g)


def format_duration(seconds: float) -> str:
    """The shortest Prometheus duration string for a whole number of seconds (`180` -> `3m`)."""
    whole = int(seconds)
    if whole != seconds or whole <= 0:
        raise ValueError(f"not a positive whole number of seconds: {seconds}")
    out = ""
    for suffix, unit in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, whole = divmod(whole, unit)
        if count:
            out += f"{count}{suffix}"
    return out


# --------------------------------------------------------------------------------------------
# Settings


@dataclass(frozen=True, slots=True)
class Settings:
    """Every knob of the generated dashboards and rules; `build()` renders one of these.

    The defaults are what `dashboards/` in the repository holds. Durations are Prometheus
    duration strings (`30m`, `1d`).
    """

    selector: str = ""
    """Extra label matchers put into every query, e.g. `job="warpwatch"`; empty: none."""
    runbook_url_base: str = "https://github.com/warpwatch/warpwatch/blob/main/dashboards/runbooks/"
    prometheus_url: str = "http://prometheus:9090"
    datasource_uid: str = "warpwatch-prometheus"
    datasource_name: str = "Prometheus (warpwatch)"
    folder_uid: str = "warpwatch"
    folder_title: str = "warpwatch"
    dashboards_path: str = "/var/lib/grafana/dashboards/warpwatch"
    rule_interval: str = "1m"

    # (1) profiler artefacts
    artifact_window: str = "30m"
    artifact_for: str = "5m"
    # (2) kernel degraded against its own baseline
    degraded_ratio: float = 0.7
    degraded_baseline_window: str = "1d"
    degraded_baseline_offset: str = "1h"
    degraded_min_time_share: float = 0.05
    degraded_min_samples: int = 60
    """Scraped samples the baseline window must hold; a kernel seen briefly never alerts."""
    degraded_for: str = "30m"
    # (3) our estimate against NVML GPM
    nvml_max_difference: float = 0.25
    nvml_for: str = "30m"
    # (4) agent health
    capture_period: str = "60s"
    """The agent's window period (`--period`); the staleness bound is a multiple of it."""
    stale_periods: float = 3.0
    stale_for: str = "5m"
    failing_window: str = "15m"
    failing_ratio: float = 0.5
    failing_for: str = "15m"
    max_capture_duty: float = MAX_DUTY
    """Bound on captured time / wall time; profiling costs the workload while it runs."""
    duty_for: str = "5m"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith(_DURATION_SUFFIXES):
                try:
                    duration_seconds(value)
                except ValueError as exc:
                    raise ConfigError(f"setting {f.name}: {exc}") from None
        for name, low, high in _RANGES:
            value = getattr(self, name)
            if not low < value < high:
                raise ConfigError(f"setting {name}={value}: must lie strictly between {low} and {high}")


_DURATION_SUFFIXES = ("_window", "_for", "_offset", "_period", "_interval")
_RANGES = (
    ("degraded_ratio", 0, 1),
    ("degraded_min_time_share", 0, 1),
    ("degraded_min_samples", 0, 1_000_000),
    ("nvml_max_difference", 0, 1),
    ("stale_periods", 1, 1000),
    ("failing_ratio", 0, 1),
    ("max_capture_duty", 0, 1),
)

DEFAULT_SETTINGS = Settings()

ALERTED_ARTIFACTS: tuple[str, ...] = (
    "negative_warps_per_sm",
    "non_finite",
    "occupancy_sentinel",
    "grid_overflow",
    "sm_count_invalid",
)
"""Artefact kinds that make the raw trace numbers plainly wrong; these raise an (info) alert."""

ARTIFACT_EXPLANATIONS: dict[str, str] = {
    "negative_warps_per_sm": "The trace's `warps per SM` is negative: Kineto multiplies the grid in "
    "32-bit integers (a legal grid of 2^31 blocks or more wraps), or old PyTorch read the SM count "
    "as -1. warpwatch recomputes B·ceil(T/warpSize)/SMs with exact integers.",
    "non_finite": "`inf`, `nan` or a string where a number belongs: the SM count was 0 because the "
    "device properties could not be read.",
    "grid_overflow": "The grid has 2^31 blocks or more; every value Kineto derived from it wrapped "
    "around (negative, tiny or zero).",
    "sm_count_invalid": "The SM count the profiler used was 0 or negative, so every per-SM value of "
    "the launch is wrong; warpwatch uses `numSms` from the trace's device properties.",
    "occupancy_sentinel": "`est. achieved occupancy %` is -99 or -100: the profiler's occupancy "
    "calculator failed (missing properties, a GPU newer than its header).",
    "occupancy_smem_optin": "Reported occupancy 0 % for a kernel that opts in to more than 48 KiB "
    "shared memory per block (most GEMM/attention kernels): Kineto ignores the opt-in limit.",
    "unrounded_warps": "The block size is not a multiple of the warp size; Kineto counts fractional "
    "warps (48 threads = 1.5 warps) although the block occupies whole warps.",
    "missing_launch_config": "No grid/block in the event (CUDA graph replays, ROCm libraries): "
    "warps and occupancy are unknown, never zero.",
    "grid_units_unknown": "An AMD kernel whose `grid` may count work-items (hipExtModuleLaunchKernel: "
    "Tensile, MIOpen) or blocks, with no runtime event naming the launching HIP call: warps per SM "
    "are unknown, not guessed.",
}

FAILING_OUTCOMES: tuple[str, ...] = ("failed", "timed_out")
"""Window outcomes that count as failures (`warpwatch_windows_total{outcome}`)."""

if set(ARTIFACT_EXPLANATIONS) != set(ARTIFACT_KINDS) or not set(ALERTED_ARTIFACTS) <= set(ARTIFACT_KINDS):
    raise AssertionError("ARTIFACT_EXPLANATIONS/ALERTED_ARTIFACTS out of step with model.ARTIFACT_KINDS")
if not set(FAILING_OUTCOMES) <= set(get_args(Outcome)):
    raise AssertionError("FAILING_OUTCOMES names an outcome capture.Outcome does not have")
FAILING_MATCHER = 'outcome=~"' + "|".join(FAILING_OUTCOMES) + '"'


# --------------------------------------------------------------------------------------------
# Selectors

DASHBOARD_VARIABLE_DEFAULTS: dict[str, str] = {
    "$__rate_interval": "2m",
    "$__interval": "1m",
    "$__range": "1h",
    "$namespace": ".*",
    "$pod": ".*",
    "$gpu": ".*",
    "$kernel": ".*",
}
"""What `all_queries()` puts in place of Grafana's variables to obtain plain PromQL."""

Scope = Literal["none", "agent", "gpu", "kernel"]

_SCOPE_MATCHERS: dict[str, tuple[str, ...]] = {
    "none": (),
    "agent": ('namespace=~"$namespace"', 'pod=~"$pod"'),
    "gpu": ('namespace=~"$namespace"', 'pod=~"$pod"', 'gpu=~"$gpu"'),
    "kernel": ('namespace=~"$namespace"', 'pod=~"$pod"', 'gpu=~"$gpu"', 'kernel=~"$kernel"'),
}


def series(metric: md.MetricDef, *matchers: str, suffix: str = "") -> str:
    """A series selector for `metric` with the given label matchers (empty ones skipped)."""
    if suffix and metric.type != "histogram":
        raise ValueError(f"{metric.name} is a {metric.type}; only histograms have {suffix} series")
    inner = ", ".join(m for m in matchers if m)
    name = md.exposed_name(metric) + suffix
    return f"{name}{{{inner}}}" if inner else name


def alert_series(s: Settings, metric: md.MetricDef, *matchers: str) -> str:
    """A selector for alert rules: the configured base selector plus `matchers`."""
    return series(metric, s.selector, *matchers)


def dashboard_series(s: Settings, metric: md.MetricDef, scope: Scope, *extra: str, suffix: str = "") -> str:
    """A selector for panels: base selector, the dashboard variables of `scope`, then `extra`."""
    return series(metric, s.selector, *_SCOPE_MATCHERS[scope], *extra, suffix=suffix)


# --------------------------------------------------------------------------------------------
# Alerts


@dataclass(frozen=True, slots=True)
class Runbook:
    """What a runbook page says beyond the rule itself (which it quotes)."""

    meaning: str
    impact: str
    diagnosis: tuple[str, ...]
    mitigation: tuple[str, ...]


Severity = Literal["info", "warning", "critical"]


@dataclass(frozen=True, slots=True)
class AlertDef:
    """One alert, rendered as a Prometheus rule, a Grafana rule and a runbook.

    `summary` and `description` are Go templates restricted to `{{ $labels.NAME }}`,
    `{{ printf "%.Nf" $value }}` and `{{ humanizePercentage $value }}`, so the promtool test
    file can state their exact expansion (see `rules.render_template`).
    """

    name: str
    group: str
    expr: str
    for_: str
    severity: Severity
    summary: str
    description: str
    runbook: Runbook
    thresholds: tuple[tuple[str, str], ...] = ()
    """(setting, value) pairs the runbook lists, so a reader sees the bounds in force."""

    @property
    def slug(self) -> str:
        """Kebab-case name without the project prefix: runbook file stem and Grafana uid tail."""
        bare = self.name.removeprefix("Warpwatch")
        return re.sub(r"(?<!^)(?=[A-Z])", "-", bare).lower()

    @property
    def uid(self) -> str:
        """Stable Grafana rule uid (at most 40 characters)."""
        return f"warpwatch-{self.slug}"

    def runbook_url(self, s: Settings) -> str:
        return f"{s.runbook_url_base}{self.slug}.md"


GROUP_PROFILER = "warpwatch-profiler"
GROUP_OCCUPANCY = "warpwatch-occupancy"
GROUP_AGENT = "warpwatch-agent"
GROUPS: tuple[str, ...] = (GROUP_PROFILER, GROUP_OCCUPANCY, GROUP_AGENT)


def _degraded_branch(s: Settings, metric: md.MetricDef) -> str:
    now = alert_series(s, metric)
    window = f"[{s.degraded_baseline_window}] offset {s.degraded_baseline_offset}"
    return (
        f"(\n    {now}\n      / avg_over_time({now}{window})\n    < {s.degraded_ratio}\n"
        f"  and\n    count_over_time({now}{window}) >= {s.degraded_min_samples}\n  )"
    )


def alerts(s: Settings = DEFAULT_SETTINGS) -> tuple[AlertDef, ...]:
    """Every alert, in group order."""
    artifact_matcher = 'artifact=~"' + "|".join(ALERTED_ARTIFACTS) + '"'
    stale_after = duration_seconds(s.capture_period) * s.stale_periods
    windows = alert_series(s, md.WINDOWS)
    failing = alert_series(s, md.WINDOWS, FAILING_MATCHER)
    pct_share = f"{s.degraded_min_time_share:.0%}"
    return (
        AlertDef(
            name="WarpwatchProfilerArtifacts",
            group=GROUP_PROFILER,
            expr=(
                f"increase({alert_series(s, md.PROFILER_ARTIFACTS, artifact_matcher)}"
                f"[{s.artifact_window}]) > 0"
            ),
            for_=s.artifact_for,
            severity="info",
            summary="Profiler reports wrong numbers for {{ $labels.kernel }} on GPU {{ $labels.gpu }} "
            "({{ $labels.artifact }})",
            description=(
                '{{ printf "%.0f" $value }} launches of {{ $labels.kernel }} on GPU {{ $labels.gpu }} '
                "carried the profiler artefact {{ $labels.artifact }} in the last "
                f"{s.artifact_window}. The raw trace numbers for these launches (Kineto's 'warps per "
                "SM', 'blocks per SM', 'est. achieved occupancy %') are wrong; warpwatch's metrics "
                "are recomputed from the launch configuration and are correct."
            ),
            thresholds=(("artifact_window", s.artifact_window), ("artifact_for", s.artifact_for)),
            runbook=Runbook(
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
                    "Use warpwatch's metrics instead of the trace's numbers; nothing needs fixing in "
                    "the workload.",
                    "Upgrading PyTorch removes the SM-count cases; grid overflow is still present in "
                    "current Kineto.",
                    "To silence it, route severity=info alerts to a low-priority receiver, or "
                    "drop the kinds you accept from `ALERTED_ARTIFACTS`.",
                ),
            ),
        ),
        AlertDef(
            name="WarpwatchKernelOccupancyDegraded",
            group=GROUP_OCCUPANCY,
            expr=(
                "(\n  "
                + _degraded_branch(s, md.KERNEL_ESTIMATED_OCCUPANCY)
                + "\n  or\n  "
                + _degraded_branch(s, md.KERNEL_RESIDENT_WARPS_PER_SM)
                + f"\n)\nand\n  {alert_series(s, md.KERNEL_TIME_SHARE)} > {s.degraded_min_time_share}"
            ),
            for_=s.degraded_for,
            severity="warning",
            summary="{{ $labels.kernel }} on GPU {{ $labels.gpu }} runs at "
            '{{ printf "%.2f" $value }}x its usual occupancy',
            description=(
                "Estimated occupancy (resident warps per SM where occupancy is unknown) of "
                '{{ $labels.kernel }} on GPU {{ $labels.gpu }} is {{ printf "%.2f" $value }} times its '
                f"average over the {s.degraded_baseline_window} ending {s.degraded_baseline_offset} ago "
                f"(bound {s.degraded_ratio}), and the kernel still takes more than {pct_share} of the "
                "GPU's time."
            ),
            thresholds=(
                ("degraded_ratio", str(s.degraded_ratio)),
                ("degraded_baseline_window", s.degraded_baseline_window),
                ("degraded_baseline_offset", s.degraded_baseline_offset),
                ("degraded_min_time_share", str(s.degraded_min_time_share)),
                ("degraded_min_samples", str(s.degraded_min_samples)),
                ("degraded_for", s.degraded_for),
            ),
            runbook=Runbook(
                meaning="A kernel that matters (a meaningful share of GPU time) keeps fewer warps "
                "resident on each SM than it did over the previous day: fewer blocks fit per SM "
                "(more registers or shared memory per block), the grid got smaller than the GPU "
                "(a partial last wave), or the block size changed.",
                impact="Lower latency hiding for that kernel; usually slower steps. Not always a "
                "regression: a deliberate change in shapes or batch size has the same signature.",
                diagnosis=(
                    "On the *Kernels* dashboard pick the kernel: compare *Estimated vs theoretical "
                    "occupancy*. Theoretical fell too: registers/shared memory per block changed "
                    "(new compiler, Triton autotune choice, library upgrade).",
                    "Theoretical unchanged but waves per SM fell below 1: the grid no longer fills "
                    "the GPU (smaller batch, more tensor-parallel ranks).",
                    "Check what was deployed around the time the drop started.",
                ),
                mitigation=(
                    "Roll back or pin the change that altered the launch configuration; retune "
                    "block sizes or autotune configs.",
                    "If the new level is intended, the alert clears once the baseline window "
                    f"({s.degraded_baseline_window}) has absorbed it.",
                ),
            ),
        ),
        AlertDef(
            name="WarpwatchOccupancyDisagreesWithNvml",
            group=GROUP_OCCUPANCY,
            expr=(
                f"abs(\n  {alert_series(s, md.GPU_ESTIMATED_OCCUPANCY)}\n  - "
                f"{alert_series(s, md.NVML_SM_OCCUPANCY)}\n) > {s.nvml_max_difference}"
            ),
            for_=s.nvml_for,
            severity="warning",
            summary="GPU {{ $labels.gpu }}: estimated occupancy and NVML GPM SM occupancy differ by "
            '{{ printf "%.2f" $value }}',
            description=(
                "warpwatch's estimated occupancy of GPU {{ $labels.gpu }} differs from the hardware's "
                '(NVML GPM SM occupancy) by {{ printf "%.2f" $value }} '
                f"(bound {s.nvml_max_difference}). Either other processes share the GPU, the device "
                "indices differ, or the traces miss most of the GPU's work."
            ),
            thresholds=(("nvml_max_difference", str(s.nvml_max_difference)), ("nvml_for", s.nvml_for)),
            runbook=Runbook(
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
                    "captured; look for low-confidence windows and raise the window length.",
                    "Estimate far above NVML: blocks of unequal duration or heavy tail effects; "
                    "compare with Nsight Compute's achieved occupancy for the top kernels.",
                ),
                mitigation=(
                    "Fix the device mapping, or accept the difference for shared GPUs and silence "
                    "the alert for them.",
                    "Lengthen the capture window when long kernels dominate.",
                ),
            ),
        ),
        AlertDef(
            name="WarpwatchNoRecentWindow",
            group=GROUP_AGENT,
            expr=(
                f"time() - {alert_series(s, md.LAST_WINDOW_TIMESTAMP)}\n  > {stale_after:g}"
            ),
            for_=s.stale_for,
            severity="warning",
            summary="warpwatch has not finished a capture window for "
            '{{ printf "%.0f" $value }} s',
            description=(
                'The warpwatch agent has not finished a capture window for {{ printf "%.0f" $value }} s, '
                f"more than {s.stale_periods:g} capture periods of {s.capture_period}. Its metrics "
                "describe the past."
            ),
            thresholds=(
                ("capture_period", s.capture_period),
                ("stale_periods", f"{s.stale_periods:g}"),
                ("stale_for", s.stale_for),
            ),
            runbook=Runbook(
                meaning="The agent is scraped but its last window (any outcome) finished long ago: "
                "its capture loop is stuck or blocked.",
                impact="Occupancy metrics and every other alert of warpwatch stop reflecting the "
                "workload.",
                diagnosis=(
                    "Agent logs: a source that blocks (a trace that never arrives, a full disk).",
                    "*Agent health* dashboard: processing time near the period means windows queue up.",
                    "An agent that is not scraped at all does not raise this alert; watch `up` for "
                    "that.",
                ),
                mitigation=(
                    "Restart the agent; if windows take longer than the period, raise `--period` "
                    "(and `capture_period` here).",
                ),
            ),
        ),
        AlertDef(
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
            runbook=Runbook(
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
            ),
        ),
        AlertDef(
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
            runbook=Runbook(
                meaning="The configured capture window is a large share of the period between windows.",
                impact="CUPTI activity tracing costs the traced process a few percent while it runs; "
                "at high duty that cost is paid most of the time.",
                diagnosis=("Compare the agent's `--window` and `--period` settings.",),
                mitigation=("Shorten the window or lengthen the period.",),
            ),
        ),
    )


# --------------------------------------------------------------------------------------------
# Dashboards


@dataclass(frozen=True, slots=True)
class Query:
    """One panel query. `instant` asks for a single value; `table` for Grafana's table format."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass(frozen=True, slots=True)
class Column:
    """A table column from one query (`Value #<refId>`): its title and unit."""

    ref_id: str
    title: str
    unit: str


PanelKind = Literal["timeseries", "stat", "table", "bargauge", "text"]


@dataclass(frozen=True, slots=True)
class PanelDef:
    """A panel, independent of grafanalib. Queries get refIds A, B, C... in order."""

    kind: PanelKind
    title: str
    description: str
    unit: str = ""
    queries: tuple[Query, ...] = ()
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    thresholds: tuple[tuple[str, float | None], ...] = (("green", None),)
    """(colour, from value) steps; the first starts at minus infinity (None)."""
    columns: tuple[Column, ...] = ()
    keep_labels: tuple[str, ...] = ()
    """Tables: label columns shown (others hidden)."""
    sort_by: str = ""
    content: str = ""
    """Text panels: Markdown."""
    mappings: tuple[tuple[str, str, str], ...] = ()
    """Value mappings (value, text, colour)."""


Variable = Literal["namespace", "pod", "gpu", "kernel"]


@dataclass(frozen=True, slots=True)
class VariableDef:
    """A query variable: the label `name` of `metric`, narrowed by the variables before it."""

    name: Variable
    label: str
    metric: md.MetricDef
    scope: Scope


VARIABLES: dict[str, VariableDef] = {
    "namespace": VariableDef("namespace", "Namespace", md.BUILD_INFO, "none"),
    "pod": VariableDef("pod", "Pod", md.BUILD_INFO, "none"),
    "gpu": VariableDef("gpu", "GPU", md.GPU_INFO, "agent"),
    "kernel": VariableDef("kernel", "Kernel", md.KERNEL_TIME_SHARE, "gpu"),
}


def variable_selector(s: Settings, var: VariableDef) -> str:
    """The series selector of a variable's `label_values(...)` query."""
    extra = ('namespace=~"$namespace"',) if var.name == "pod" else ()
    return dashboard_series(s, var.metric, var.scope, *extra)


@dataclass(frozen=True, slots=True)
class DashboardDef:
    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    panels: tuple[PanelDef, ...]
    tags: tuple[str, ...] = field(default=("warpwatch",))

    @property
    def filename(self) -> str:
        return f"{self.uid}.json"


GPU_LEGEND = "{{pod}} GPU {{gpu}}"
KERNEL_LEGEND = "{{kernel}} (GPU {{gpu}})"
PERCENT = "percentunit"
COUNT = "short"
PER_SECOND = "cps"
SECONDS = "s"


def _overview(s: Settings) -> DashboardDef:
    def g(metric: md.MetricDef) -> str:
        return dashboard_series(s, metric, "gpu")

    return DashboardDef(
        uid="warpwatch-overview",
        title="warpwatch / Overview",
        description="Per GPU: estimated occupancy and resident warps per SM from the traced kernels, "
        "busy ratio, NVML's view beside it, and the kernels that take the time.",
        variables=("namespace", "pod", "gpu"),
        panels=(
            PanelDef(
                "timeseries", "Estimated occupancy per GPU",
                "Time-averaged resident warps per SM over each window, divided by the SM's maximum; "
                "idle time counts as zero. Sampling-corrected.",
                PERCENT, (Query(g(md.GPU_ESTIMATED_OCCUPANCY), GPU_LEGEND),), min=0, max=1,
            ),
            PanelDef(
                "timeseries", "Estimated vs NVML GPM SM occupancy",
                "warpwatch's estimate beside the hardware's SM occupancy (NVML GPM; Hopper and newer "
                "only, absent elsewhere). They agree when the traced process is the GPU's only user.",
                PERCENT,
                (
                    Query(g(md.GPU_ESTIMATED_OCCUPANCY), GPU_LEGEND + " estimated"),
                    Query(g(md.NVML_SM_OCCUPANCY), GPU_LEGEND + " NVML GPM"),
                ),
                min=0, max=1,
            ),
            PanelDef(
                "timeseries", "Resident warps per SM per GPU",
                "Average warps resident on an SM over each window, all kernels and streams together "
                "(capped at the SM's maximum).",
                COUNT, (Query(g(md.GPU_RESIDENT_WARPS_PER_SM), GPU_LEGEND),), min=0,
            ),
            PanelDef(
                "timeseries", "Busy ratio vs NVML utilisation",
                "Share of each window with at least one kernel running (sampling-corrected), beside "
                "NVML's GPU utilisation.",
                PERCENT,
                (
                    Query(g(md.GPU_BUSY), GPU_LEGEND + " busy"),
                    Query(g(md.NVML_GPU_UTILIZATION), GPU_LEGEND + " NVML utilisation"),
                ),
                min=0, max=1,
            ),
            PanelDef(
                "bargauge", "Top kernels by time share",
                "The 10 kernels with the largest average share of GPU time over the selected range "
                "(averaged over the windows in which the kernel was among the top-K; kernels outside "
                "it are folded into `other`).",
                PERCENT,
                (
                    Query(
                        f"topk(10, avg_over_time({g(md.KERNEL_TIME_SHARE)}[$__range]))",
                        "{{kernel}} ({{pod}} GPU {{gpu}})", instant=True,
                    ),
                ),
                height=10, min=0, max=1,
            ),
            PanelDef(
                "table", "GPUs",
                "Devices seen in the traces or by NVML: name, compute capability, SM count, vendor and UUID "
                "(the key to join dcgm-exporter's series: its `gpu` label is another numbering).",
                "none", (Query(g(md.GPU_INFO), instant=True, table=True),),
                height=10,
                keep_labels=("namespace", "pod", "gpu", "name", "compute_capability", "sms", "vendor", "uuid"),
            ),
        ),
    )


def _kernels(s: Settings) -> DashboardDef:
    def k(metric: md.MetricDef) -> str:
        return dashboard_series(s, metric, "kernel")

    def avg(metric: md.MetricDef) -> str:
        return f"avg_over_time({k(metric)}[$__range])"

    return DashboardDef(
        uid="warpwatch-kernels",
        title="warpwatch / Kernels",
        description="Per kernel: corrected and reported warps per SM, resident warps, theoretical and "
        "estimated occupancy, waves, time share and launch rate.",
        variables=("namespace", "pod", "gpu", "kernel"),
        panels=(
            PanelDef(
                "table", "Kernels",
                "Per kernel over the selected range: duration-weighted means averaged over windows; "
                "'reported warps/SM (min)' is the profiler's own uncorrected value (negative = "
                "artefact).",
                "none",
                (
                    Query(avg(md.KERNEL_WARPS_PER_SM), instant=True, table=True),
                    Query(f"min_over_time({k(md.KERNEL_REPORTED_WARPS_MIN)}[$__range])", instant=True,
                          table=True),
                    Query(avg(md.KERNEL_RESIDENT_WARPS_PER_SM), instant=True, table=True),
                    Query(avg(md.KERNEL_THEORETICAL_OCCUPANCY), instant=True, table=True),
                    Query(avg(md.KERNEL_ESTIMATED_OCCUPANCY), instant=True, table=True),
                    Query(avg(md.KERNEL_WAVES_PER_SM), instant=True, table=True),
                    Query(avg(md.KERNEL_TIME_SHARE), instant=True, table=True),
                    Query(avg(md.KERNEL_LAUNCH_RATE), instant=True, table=True),
                ),
                width=24, height=12,
                columns=(
                    Column("A", "Corrected warps/SM", COUNT),
                    Column("B", "Reported warps/SM (min)", COUNT),
                    Column("C", "Resident warps/SM", COUNT),
                    Column("D", "Theoretical occupancy", PERCENT),
                    Column("E", "Estimated occupancy", PERCENT),
                    Column("F", "Waves per SM", COUNT),
                    Column("G", "Time share", PERCENT),
                    Column("H", "Launches/s", PER_SECOND),
                ),
                keep_labels=("namespace", "pod", "gpu", "kernel"),
                sort_by="Time share",
            ),
            PanelDef(
                "table", "Kernel names",
                "The full name behind each `kernel` label over the selected range (warpwatch_kernel_info): "
                "labels are short and stable; a label ending in ~hash was shortened from this name.",
                "none", (Query(f"max_over_time({k(md.KERNEL_INFO)}[$__range])", instant=True, table=True),),
                width=24, height=8, keep_labels=("namespace", "pod", "gpu", "kernel", "name"),
            ),
            PanelDef(
                "timeseries", "Estimated vs theoretical occupancy",
                "Estimated (resident warps / SM maximum, waves and tail included) beside theoretical "
                "(CUDA occupancy calculator) occupancy per kernel. A gap means partial waves.",
                PERCENT,
                (
                    Query(k(md.KERNEL_ESTIMATED_OCCUPANCY), KERNEL_LEGEND + " estimated"),
                    Query(k(md.KERNEL_THEORETICAL_OCCUPANCY), KERNEL_LEGEND + " theoretical"),
                ),
                min=0, max=1,
            ),
            PanelDef(
                "timeseries", "Resident warps per SM",
                "Average warps resident on an SM while the kernel runs.",
                COUNT, (Query(k(md.KERNEL_RESIDENT_WARPS_PER_SM), KERNEL_LEGEND),), min=0,
            ),
            PanelDef(
                "timeseries", "Warps per SM (corrected)",
                "Launched warps per SM, B*ceil(T/warpSize)/SMs: what the profiler's 'warps per SM' "
                "means, computed right. Not bounded by the SM's capacity (all waves count).",
                COUNT, (Query(k(md.KERNEL_WARPS_PER_SM), KERNEL_LEGEND),),
            ),
            PanelDef(
                "timeseries", "Waves per SM",
                "Blocks / (max active blocks per SM x SMs). Below 1 the GPU is not filled.",
                COUNT, (Query(k(md.KERNEL_WAVES_PER_SM), KERNEL_LEGEND),), min=0,
            ),
            PanelDef(
                "timeseries", "Time share",
                "Share of each window's wall time spent in the kernel (sampling-corrected; "
                "concurrent streams add up).",
                PERCENT, (Query(k(md.KERNEL_TIME_SHARE), KERNEL_LEGEND),), min=0,
            ),
            PanelDef(
                "timeseries", "Launches per second",
                "Kernel launches per second in each window (sampling-corrected).",
                PER_SECOND, (Query(k(md.KERNEL_LAUNCH_RATE), KERNEL_LEGEND),), min=0,
            ),
        ),
    )


def _artifact_text() -> str:
    rows = "\n".join(f"| `{kind}` | {ARTIFACT_EXPLANATIONS[kind]} |" for kind in ARTIFACT_KINDS)
    return (
        "### Why is my warps per SM negative?\n\n"
        "The PyTorch profiler (Kineto) computes `warps per SM` from the grid in 32-bit integers and "
        "an SM count that can be wrong, so a trace can say `-12345.5` for a perfectly valid launch. "
        "warpwatch recomputes every value from the launch configuration and counts each launch whose "
        "reported value is wrong, by kind:\n\n"
        "| kind | what went wrong |\n|---|---|\n"
        f"{rows}\n\n"
        "Only the corrected metrics (`warps per SM (corrected)`, occupancy) feed the other dashboards."
    )


def _artifacts(s: Settings) -> DashboardDef:
    def k(metric: md.MetricDef) -> str:
        return dashboard_series(s, metric, "kernel")

    arts = k(md.PROFILER_ARTIFACTS)
    return DashboardDef(
        uid="warpwatch-artifacts",
        title="warpwatch / Profiler artefacts",
        description="Where the profiler's own numbers are wrong, by kind and kernel, and the reported "
        "warps per SM beside the corrected ones.",
        variables=("namespace", "pod", "gpu", "kernel"),
        panels=(
            PanelDef(
                "text", "What the artefact kinds mean",
                "Each kind of profiler artefact warpwatch detects, in one line.",
                width=8, height=18, content=_artifact_text(),
            ),
            PanelDef(
                "timeseries", "Artefacts by kind",
                "Launches per second whose profiler-reported values are wrong, by artefact kind.",
                PER_SECOND,
                (Query(f"sum by (artifact) (rate({arts}[$__rate_interval]))", "{{artifact}}"),),
                width=16, height=9, min=0,
            ),
            PanelDef(
                "timeseries", "Artefacts by kernel",
                "Launches per second with profiler artefacts, by GPU, kernel and kind.",
                PER_SECOND,
                (
                    Query(
                        f"sum by (gpu, kernel, artifact) (rate({arts}[$__rate_interval]))",
                        "GPU {{gpu}} {{kernel}}: {{artifact}}",
                    ),
                ),
                width=16, height=9, min=0,
            ),
            PanelDef(
                "timeseries", "Reported vs corrected warps per SM",
                "Why is my warps per SM negative? The trace's own value (minimum over each window's "
                "launches, uncorrected) beside warpwatch's recomputation for the same kernel.",
                COUNT,
                (
                    Query(k(md.KERNEL_REPORTED_WARPS_MIN), KERNEL_LEGEND + " reported (min)"),
                    Query(k(md.KERNEL_WARPS_PER_SM), KERNEL_LEGEND + " corrected"),
                ),
                width=24, height=10,
            ),
            PanelDef(
                "table", "Artefacts in the selected range",
                "Launches with each artefact kind over the selected range, per kernel.",
                "none",
                (
                    Query(
                        "sum by (namespace, pod, gpu, kernel, artifact) "
                        f"(increase({arts}[$__range])) > 0",
                        instant=True, table=True,
                    ),
                ),
                width=16, height=10,
                columns=(Column("A", "Launches", COUNT),),
                keep_labels=("namespace", "pod", "gpu", "kernel", "artifact"),
                sort_by="Launches",
            ),
            PanelDef(
                "stat", "Artefacts per captured launch",
                "Artefacts counted over the selected range divided by launches captured; above 100 % "
                "when launches carry several kinds.",
                PERCENT,
                (
                    Query(
                        f"(sum(increase({arts}[$__range])) or vector(0))\n  / "
                        f"sum(increase({k(md.KERNEL_LAUNCHES_OBSERVED)}[$__range]))",
                        instant=True,
                    ),
                ),
                width=8, height=10,
            ),
        ),
    )


def _agent_health(s: Settings) -> DashboardDef:
    def a(metric: md.MetricDef, *extra: str, suffix: str = "") -> str:
        return dashboard_series(s, metric, "agent", *extra, suffix=suffix)

    stale_after = duration_seconds(s.capture_period) * s.stale_periods
    failing = a(md.WINDOWS, FAILING_MATCHER)
    quantiles = tuple(
        Query(
            f"histogram_quantile({q}, sum by (namespace, pod, le) "
            f"(rate({a(md.WINDOW_PROCESSING, suffix='_bucket')}[$__rate_interval])))",
            f"{{{{pod}}}} p{round(q * 100)}",
        )
        for q in (0.5, 0.9, 0.99)
    )
    return DashboardDef(
        uid="warpwatch-agent-health",
        title="warpwatch / Agent health",
        description="Is the agent capturing and analysing windows: outcomes, faults, processing time, "
        "duty cycle, folded kernels, last window age, NVML.",
        variables=("namespace", "pod", "gpu"),
        panels=(
            PanelDef(
                "stat", "Last window age",
                f"Seconds since the last window finished (any outcome). Red above {s.stale_periods:g} "
                f"capture periods of {s.capture_period}.",
                SECONDS, (Query(f"time() - {a(md.LAST_WINDOW_TIMESTAMP)}", "{{pod}}", instant=True),),
                width=8, height=5, thresholds=(("green", None), ("red", stale_after)),
            ),
            PanelDef(
                "stat", "Failing windows",
                "Share of windows over the selected range that failed or timed out (0 when none did).",
                PERCENT,
                (
                    Query(
                        f"(\n  sum by (namespace, pod) (increase({failing}[$__range]))\n"
                        f"  or sum by (namespace, pod) (increase({a(md.WINDOWS)}[$__range])) * 0\n)\n"
                        f"/ sum by (namespace, pod) (increase({a(md.WINDOWS)}[$__range]))",
                        "{{pod}}", instant=True,
                    ),
                ),
                width=8, height=5, thresholds=(("green", None), ("red", s.failing_ratio)),
            ),
            PanelDef(
                "stat", "NVML up",
                "Whether NVML answered at the last sample (GPU utilisation and GPM occupancy need it).",
                "none", (Query(a(md.NVML_UP), "{{pod}}", instant=True),),
                width=8, height=5, thresholds=(("red", None), ("green", 1)),
                mappings=(("0", "down", "red"), ("1", "up", "green")),
            ),
            PanelDef(
                "timeseries", "Windows by outcome",
                "Capture windows finished per minute, by outcome (ok, empty, failed, timed_out).",
                "opm",
                (
                    Query(
                        f"sum by (namespace, pod, outcome) (rate({a(md.WINDOWS)}[$__rate_interval])) * 60",
                        "{{pod}} {{outcome}}",
                    ),
                ),
                min=0,
            ),
            PanelDef(
                "timeseries", "Faults by stage and reason",
                "Faults the agent survived per minute: failed or timed-out windows by cause, refused "
                "trace files (links out of the folder, FIFOs, other users' files), NVML errors, wall-clock "
                "steps, overrun rounds. The agent keeps serving its last good snapshot meanwhile.",
                "opm",
                (
                    Query(
                        "sum by (namespace, pod, stage, reason) "
                        f"(rate({a(md.ERRORS)}[$__rate_interval])) * 60 > 0",
                        "{{pod}} {{stage}}/{{reason}}",
                    ),
                ),
                min=0,
            ),
            PanelDef(
                "timeseries", "Window processing time",
                "Time to read and analyse one window's trace: median, 90th and 99th percentile.",
                SECONDS, quantiles, min=0,
            ),
            PanelDef(
                "timeseries", "Capture duty cycle",
                f"Captured time / wall time (window / period). Bound: {s.max_capture_duty:.0%}.",
                PERCENT, (Query(a(md.CAPTURE_DUTY), "{{pod}}"),),
                min=0, thresholds=(("green", None), ("red", s.max_capture_duty)),
            ),
            PanelDef(
                "timeseries", "Kernels folded into other",
                "Kernels per second folded into kernel=\"other\" because they fell outside the "
                "top-K by GPU time; a steady high rate means many small kernels.",
                PER_SECOND,
                (
                    Query(
                        "sum by (namespace, pod, gpu) "
                        f"(rate({dashboard_series(s, md.KERNELS_FOLDED, 'gpu')}[$__rate_interval]))",
                        GPU_LEGEND,
                    ),
                ),
                min=0,
            ),
        ),
    )


def dashboards(s: Settings = DEFAULT_SETTINGS) -> tuple[DashboardDef, ...]:
    """Every dashboard, in the order they are listed."""
    return (_overview(s), _kernels(s), _artifacts(s), _agent_health(s))


def substitute_variables(expr: str) -> str:
    """`expr` with Grafana's variables replaced by `DASHBOARD_VARIABLE_DEFAULTS` (plain PromQL)."""
    # Longest names first so `$__rate_interval` is not cut by a shorter prefix.
    for name in sorted(DASHBOARD_VARIABLE_DEFAULTS, key=len, reverse=True):
        expr = expr.replace(name, DASHBOARD_VARIABLE_DEFAULTS[name])
    return expr


def all_queries(s: Settings = DEFAULT_SETTINGS, *, substitute: bool = True) -> list[tuple[str, str]]:
    """(where, expr) for every PromQL expression the dashboards and alerts use.

    `where` reads `dashboard:<uid>/<panel title>/<refId>`, `variable:<uid>/<name>` or
    `alert:<name>`. With `substitute`, Grafana variables are replaced by plain values.
    """
    out: list[tuple[str, str]] = []
    for dash in dashboards(s):
        for name in dash.variables:
            out.append((f"variable:{dash.uid}/{name}", variable_selector(s, VARIABLES[name])))
        for panel in dash.panels:
            for i, q in enumerate(panel.queries):
                out.append((f"dashboard:{dash.uid}/{panel.title}/{ref_id(i)}", q.expr))
    out.extend((f"alert:{a.name}", a.expr) for a in alerts(s))
    if substitute:
        out = [(where, substitute_variables(expr)) for where, expr in out]
    return out


def ref_id(index: int) -> str:
    """Grafana refId of the index-th query of a panel: A, B, ..."""
    return chr(ord("A") + index)
