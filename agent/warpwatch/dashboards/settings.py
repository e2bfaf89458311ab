"""Settings, durations and selectors: what every generated query, panel and rule is built from.

`Settings` holds every knob of the generated dashboards and rules (thresholds, durations, the
base selector, fleet labels); `warpwatch dashboards build --set NAME=VALUE` overrides them.
Metric names are never spelled here: selectors are built from `metricdefs`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Literal, get_args

from ..capture import Outcome
from ..config.table import MAX_DUTY
from ..errors import ConfigError
from ..export import metricdefs as md
from ..model import ARTIFACT_KINDS
from ..overhead import PERIOD_CHANGE

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
    evidence_url: str = "http://localhost:8001/api/v1/namespaces/{namespace}/pods/{pod}:9946/proxy/evidence"
    """Where a pod's kept traces are listed (the agent's `/evidence`), `{namespace}` and `{pod}` replaced by
    the pod's: the pod-alerts' `evidence_url` annotation and the Kernels board's data link. The default
    goes through `kubectl proxy` (port 8001) to the agent's default port."""
    deployment_pod_label: str = "app.kubernetes.io/instance"
    """The pod label the scrape turns into `deployment` (the chart's `serviceMonitor.deploymentLabel`):
    the alerts about a whole deployment name its pods with it (`kubectl get pods -l`) to pull their
    kept traces."""
    datasource_uid: str = "warpwatch-prometheus"
    datasource_name: str = "Prometheus (warpwatch)"
    folder_uid: str = "warpwatch"
    folder_title: str = "warpwatch"
    dashboards_path: str = "/var/lib/grafana/dashboards/warpwatch"
    rule_interval: str = "1m"
    prometheus_version: str = "2.42.0"
    """The Prometheus the provisioned datasource names (Grafana then asks the label-values API for a
    variable's values instead of downloading every matching series)."""
    capture_period: str = "1m"
    """The agents' `--period`: every rate spans at least two of them (`min_interval`)."""

    # recording rules (two tiers: per pod/GPU from raw series, fleet from those records)
    fleet_labels: str = "namespace,deployment"
    """Comma-separated labels the fleet tier sums by. Each must be attached by the scrape (the chart's
    ServiceMonitor attaches `namespace` and `pod`, and `deployment` from the pod's
    `app.kubernetes.io/instance` label); add e.g. `model` only with a relabeling that attaches it."""
    recording_window: str = "5m"
    """Range of the rates the recording rules record; at least two capture periods."""
    cluster_label: str = ""
    """The label that names a series' cluster in a Prometheus holding several (Thanos, Mimir: usually an
    external label such as `cluster`); empty: one cluster. Set, every board gets a `cluster` variable and
    every raw-series selector `<cluster_label>=~"$cluster"`; the recorded series (`pod_gpu:`, `fleet:`...)
    only where this label is one of `fleet_labels`, since the recording rules sum every other label away."""

    # (1) profiler artefacts
    artifact_window: str = "30m"
    artifact_for: str = "5m"
    # (2) kernel degraded against its own baseline
    degraded_ratio: float = 0.7
    degraded_window: str = "15m"
    """Range of the "now" side: the kernel's mean occupancy over this long."""
    degraded_baseline_window: str = "1d"
    degraded_baseline_offset: str = "1h"
    degraded_min_time_share: float = 0.05
    degraded_min_samples: int = 60
    """Scraped samples the baseline window must hold; a kernel seen briefly never alerts."""
    degraded_for: str = "30m"
    launch_changed_for: str = "10m"
    """`for` of WarpwatchKernelLaunchChanged (info): new launch resources held this long."""
    inhibit_margin: str = "5m"
    """How much longer an alert that an inhibition holds back (the per-deployment kernel alert) waits
    than its cause (the per-GPU alert): the cause reaches Alertmanager first, within group_wait."""
    # (3) our estimate against NVML GPM
    nvml_window: str = "15m"
    nvml_max_difference: float = 0.25
    nvml_for: str = "30m"
    # (4) the window is too short for the workload
    short_window: str = "30m"
    short_max_kernel_ratio: float = 0.5
    """Longest captured kernel / window at or above which the window is too short."""
    short_max_nvml_gap: float = 0.2
    """NVML utilisation minus the estimated busy ratio above which kernels are being missed."""
    short_for: str = "15m"
    # (5) agent health
    stale_periods: float = 3.0
    """Staleness bound, in capture periods (`warpwatch_capture_period_seconds`)."""
    stale_for: str = "5m"
    failing_window: str = "15m"
    failing_ratio: float = 0.5
    failing_for: str = "15m"
    max_capture_duty: float = MAX_DUTY
    """Bound on captured time / wall time; profiling costs the workload while it runs."""
    duty_for: str = "5m"
    overhead_rounds: int = 3
    """Capture periods (`capture_period`) the agent's estimated cost must stay above its budget before
    WarpwatchSlowsServing fires (`overhead_for`)."""
    overhead_tolerance: float = PERIOD_CHANGE
    """Share above its budget the agent's estimated cost may rest at without an alert: the agent takes a
    new period only when it differs from the current one by more than this share."""

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
        if duration_seconds(self.recording_window) < 2 * duration_seconds(self.capture_period):
            raise ConfigError(
                f"setting recording_window={self.recording_window}: must span at least two "
                f"capture periods (capture_period={self.capture_period})"
            )
        for label in self.fleet:
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label):
                raise ConfigError(f"setting fleet_labels={self.fleet_labels!r}: {label!r} is not a label name")
        if self.cluster_label and not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", self.cluster_label):
            raise ConfigError(f"setting cluster_label={self.cluster_label!r}: not a label name (e.g. cluster)")

    def evidence_link(self, namespace: str, pod: str) -> str:
        """`evidence_url` for one pod (`namespace` and `pod` may be templates that name them)."""
        return self.evidence_url.replace("{namespace}", namespace).replace("{pod}", pod)

    def evidence_agent(self, namespace: str, pod: str) -> str:
        """The agent's URL for `warpwatch evidence pull`: `evidence_link` without its `/evidence`."""
        link = self.evidence_link(namespace, pod)
        return link.removesuffix("/evidence") if link.endswith("/evidence") else link

    @property
    def degraded_kernel_for(self) -> str:
        """`for` of WarpwatchKernelOccupancyRegressed: `degraded_for` + `inhibit_margin`."""
        return format_duration(duration_seconds(self.degraded_for) + duration_seconds(self.inhibit_margin))

    @property
    def overhead_for(self) -> str:
        """`for` of WarpwatchSlowsServing: `overhead_rounds` capture periods."""
        return format_duration(self.overhead_rounds * duration_seconds(self.capture_period))

    @property
    def min_interval(self) -> str:
        """Panel min interval: two capture periods, so Grafana's `$__rate_interval` (at least the
        interval plus one scrape) never spans fewer than two increments of a counter."""
        return format_duration(2 * duration_seconds(self.capture_period))

    @property
    def fleet(self) -> tuple[str, ...]:
        """`fleet_labels` as a tuple."""
        return tuple(x.strip() for x in self.fleet_labels.split(",") if x.strip())


_DURATION_SUFFIXES = ("_window", "_for", "_offset", "_period", "_interval", "_margin")
POD_LABELS: tuple[str, ...] = ("namespace", "deployment", "pod")
"""What the per-pod tier keeps: the labels the chart's scrape object attaches to every target
(`helm/warpwatch/templates/servicemonitor.yaml`); `instance`, `job`, `container`... are summed away."""
_RANGES = (
    ("degraded_ratio", 0, 1),
    ("degraded_min_time_share", 0, 1),
    ("degraded_min_samples", 0, 1_000_000),
    ("nvml_max_difference", 0, 1),
    ("short_max_kernel_ratio", 0, 1),
    ("short_max_nvml_gap", 0, 1),
    ("stale_periods", 1, 1000),
    ("failing_ratio", 0, 1),
    ("max_capture_duty", 0, 1),
    ("overhead_rounds", 0, 1000),
    ("overhead_tolerance", 0, 1),
)

DEFAULT_SETTINGS = Settings()

ALERTED_ARTIFACTS: tuple[str, ...] = (
    "negative_warps_per_sm",
    "non_finite",
    "occupancy_sentinel",
    "grid_overflow",
    "sm_count_invalid",
)
"""Artefact kinds that make the raw trace numbers plainly wrong; these raise an (info) alert.
What each kind means: `model.ARTIFACT_EXPLANATIONS` (the one table)."""

FAILING_OUTCOMES: tuple[str, ...] = ("failed", "timed_out")
"""Window outcomes that count as failures (`warpwatch_windows_total{outcome}`)."""

if not set(ALERTED_ARTIFACTS) <= set(ARTIFACT_KINDS):
    raise AssertionError("ALERTED_ARTIFACTS names a kind model.ARTIFACT_KINDS does not have")
if not set(FAILING_OUTCOMES) <= set(get_args(Outcome)):
    raise AssertionError("FAILING_OUTCOMES names an outcome capture.Outcome does not have")
FAILING_MATCHER = 'outcome=~"' + "|".join(FAILING_OUTCOMES) + '"'

# --------------------------------------------------------------------------------------------
# Selectors

DASHBOARD_VARIABLE_DEFAULTS: dict[str, str] = {
    "$__rate_interval": "2m30s",
    "$__interval": "2m",
    "$__range": "1h",
    "$namespace": ".*",
    "$pod": ".*",
    "$gpu": ".*",
    "$kernel": ".*",
    "$deployment": ".*",
    "$cluster": ".*",
}
"""What `all_queries()` puts in place of Grafana's variables to obtain plain PromQL."""

Scope = Literal["none", "fleet", "agent", "gpu", "kernel"]

_SCOPE_MATCHERS: dict[str, tuple[str, ...]] = {
    "none": (),
    "fleet": ('namespace=~"$namespace"', 'deployment=~"$deployment"'),
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


def cluster_matchers(s: Settings) -> tuple[str, ...]:
    """The `cluster` variable's matcher where `cluster_label` is set, else none. Its All value `.*` also
    matches series without the label."""
    return (f'{s.cluster_label}=~"$cluster"',) if s.cluster_label else ()


def record_matchers(s: Settings, scope: Scope) -> tuple[str, ...]:
    """The matchers of a recorded series (`pod_gpu:`, `fleet_kernel:`...) read at `scope`: the scope's
    variables, and the cluster's only where the records are known to keep its label: where it is one of
    `fleet_labels`, which every tier sums by. Otherwise a target label `cluster` is summed away by the
    rules, and an external one (Thanos, Mimir) is on the records only where each cluster evaluates its
    own rules, which the boards cannot know; a record without the label would vanish once one cluster is
    picked."""
    cluster = cluster_matchers(s) if s.cluster_label in s.fleet else ()
    return (*cluster, *_SCOPE_MATCHERS[scope])


def dashboard_series(s: Settings, metric: md.MetricDef, scope: Scope, *extra: str, suffix: str = "") -> str:
    """A selector for panels: base selector, the cluster variable (`cluster_matchers`), the dashboard
    variables of `scope` (the `gpu` and `kernel` ones only where the metric has that label: a GPU's
    observed seconds divide every kernel's, whichever kernel is selected), then `extra`."""
    scoped = [
        m
        for m in _SCOPE_MATCHERS[scope]
        if m.split("=")[0] not in ("gpu", "kernel") or m.split("=")[0] in metric.labels
    ]
    return series(metric, s.selector, *cluster_matchers(s), *scoped, *extra, suffix=suffix)
