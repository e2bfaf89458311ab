"""The dashboards: every panel and its query.

Trends and range tables divide rates of the corrected sums (`queries`); the last window's gauges
appear only in tables titled "now", which say so. Dashboard expressions carry Grafana variables
(`$namespace`, `$__rate_interval`, ...); `all_queries()` substitutes them so every expression is
plain PromQL a Prometheus can evaluate.
"""

from __future__ import annotations

from collections.abc import Callable

from ..export import metricdefs as md
from . import queries as q
from .alerts import alerts
from .boards_load import code_and_load_panels
from .fleet import fleet
from .health import agent_health, artifacts
from .panels import (
    COUNT,
    GPU_LEGEND,
    KERNEL_LEGEND,
    PER_SECOND,
    PERCENT,
    RANGE,
    RATE,
    DashboardDef,
    PanelDef,
    Query,
    agent_starts,
    board_variables,
    ref_id,
    substitute_variables,
    table_panel,
    variable_selector,
)
from .settings import DEFAULT_SETTINGS, Scope, Settings, dashboard_series, record_matchers

NOW = "Now (last window)"


def _sel(s: Settings, scope: Scope) -> q.Sel:
    def sel(metric: md.MetricDef) -> str:
        return dashboard_series(s, metric, scope)

    return sel


def _gpu_ratio(s: Settings, num: md.MetricDef) -> str:
    """A per-GPU counter per observed second, from the per-pod tier's records."""
    return q.record_ratio(s, num, "pod_gpu", md.GPU_OBSERVED_SECONDS, "pod_gpu", record_matchers(s, "gpu"))


def _overview(s: Settings) -> DashboardDef:
    return DashboardDef(
        uid="warpwatch-overview",
        title="warpwatch / Overview",
        description="Per GPU: estimated occupancy, resident warps and busy ratio from the traced kernels "
        "(rates of corrected sums, empty windows included), NVML's view beside them, the kernels that "
        "take the time, and whether the capture window is long enough for the workload.",
        variables=("namespace", "pod", "gpu"),
        panels=(*_occupancy_panels(s), *_time_and_coverage_panels(s)),
    )


def _occupancy_panels(s: Settings) -> tuple[PanelDef, ...]:
    """Occupancy, resident warps and busy ratio per GPU, NVML's view beside them."""
    gauge = _sel(s, "gpu")
    return (
        PanelDef(
            "timeseries",
            "Estimated occupancy per GPU",
            "Resident warps per SM / the SM's maximum, averaged over the time the GPU was watched "
            "(idle and empty windows count as zero): rate of Σ corrected kernel time x estimated "
            "occupancy over rate of observed seconds.",
            PERCENT,
            (Query(_gpu_ratio(s, md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS), GPU_LEGEND),),
            min=0,
            max=1,
        ),
        PanelDef(
            "timeseries",
            "Estimated vs NVML GPM SM occupancy",
            "warpwatch's estimate beside the hardware's SM occupancy (NVML GPM; Hopper and newer "
            "only, absent elsewhere). They agree when the traced process is the GPU's only user and "
            "the window holds its kernels.",
            PERCENT,
            (
                Query(_gpu_ratio(s, md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS), GPU_LEGEND + " estimated"),
                Query(f"avg_over_time({gauge(md.NVML_SM_OCCUPANCY)}[{RATE}])", GPU_LEGEND + " NVML GPM"),
            ),
            min=0,
            max=1,
        ),
        PanelDef(
            "timeseries",
            "Resident warps per SM per GPU",
            "Average warps resident on an SM over the watched time, all kernels and streams together.",
            COUNT,
            (Query(_gpu_ratio(s, md.GPU_RESIDENT_WARPS_SECONDS), GPU_LEGEND),),
            min=0,
        ),
        PanelDef(
            "timeseries",
            "Busy ratio vs NVML utilisation",
            "Share of the watched time with at least one kernel running (sampling-corrected, "
            "overlapping streams counted once), beside NVML's GPU utilisation. NVML well above the "
            "estimate: kernels longer than the window are being missed.",
            PERCENT,
            (
                Query(_gpu_ratio(s, md.GPU_BUSY_SECONDS), GPU_LEGEND + " busy"),
                Query(f"avg_over_time({gauge(md.NVML_GPU_UTILIZATION)}[{RATE}])", GPU_LEGEND + " NVML utilisation"),
            ),
            min=0,
            max=1,
        ),
    )


def _time_and_coverage_panels(s: Settings) -> tuple[PanelDef, ...]:
    """The kernels that take the time, whether the window holds them, and the GPUs now."""
    pod = (*s.fleet, "pod")
    pods = record_matchers(s, "agent")
    pod_share = q.record_ratio(
        s, md.KERNEL_SECONDS, "pod_kernel", md.GPU_OBSERVED_SECONDS, "pod_gpu", pods, RANGE, on=pod, den_by=pod
    )
    gauge = _sel(s, "gpu")
    return (
        PanelDef(
            "bargauge",
            "Top kernels by time share",
            "The 10 kernels with the largest share of the pod's watched GPU time over the selected "
            "range (the pod's GPUs together): recorded rate of the kernel's corrected seconds over "
            "recorded rate of the GPUs' observed seconds (kernels outside the top-K are summed into "
            "`other`). Per GPU: the *Kernels* dashboard.",
            PERCENT,
            (Query(f"topk(10,\n{pod_share}\n)", "{{kernel}} ({{pod}})", instant=True),),
            height=10,
            min=0,
            max=1,
        ),
        PanelDef(
            "timeseries",
            "Coverage: is the window long enough?",
            "Share of the watched time in windows that captured no kernel (idle, or inside a kernel "
            "longer than the window), in low-confidence windows, and the longest captured kernel as "
            "a share of its window (maximum over each interval). Near 0.5 or above, or empty "
            "windows while the workload runs: the window is too short (alert "
            "WarpwatchWindowTooShort).",
            PERCENT,
            (
                Query(_gpu_ratio(s, md.GPU_EMPTY_SECONDS), GPU_LEGEND + " empty windows"),
                Query(_gpu_ratio(s, md.GPU_LOW_CONFIDENCE_SECONDS), GPU_LEGEND + " low confidence"),
                Query(
                    f"max_over_time({gauge(md.GPU_LONGEST_KERNEL_RATIO)}[{RATE}])",
                    GPU_LEGEND + " longest kernel / window",
                ),
            ),
            min=0,
        ),
        table_panel(
            f"GPUs: {NOW}",
            "The last round's values per GPU, for a glance at the present only (never average "
            "them over time: the trends above are built from rates of sums). Device name, compute "
            "capability, SM count, vendor and UUID from the traces or NVML (the UUID is the key to "
            "join dcgm-exporter's series: its `gpu` label is another numbering).",
            (
                (gauge(md.GPU_BUSY), "Busy (last window)", PERCENT),
                (gauge(md.GPU_ESTIMATED_OCCUPANCY), "Estimated occupancy (last window)", PERCENT),
                (gauge(md.GPU_RESIDENT_WARPS_PER_SM), "Resident warps/SM (last window)", COUNT),
                (gauge(md.GPU_LONGEST_KERNEL_RATIO), "Longest kernel / window (last window)", PERCENT),
                (gauge(md.GPU_LOW_CONFIDENCE), "Low confidence (last window)", COUNT),
                (gauge(md.GPU_INFO), None, ""),
            ),
            height=8,
            keep_labels=("namespace", "pod", "gpu", "name", "compute_capability", "sms", "vendor", "uuid"),
        ),
    )


def evidence_link(s: Settings) -> tuple[str, str]:
    """The data link from a kernel's series to the traces its pod's agent kept over the board's range."""
    url = s.evidence_link("${__field.labels.namespace}", "${__field.labels.pod}")
    return ("Traces kept by this pod's agent in this range", url + EVIDENCE_RANGE)


EVIDENCE_RANGE = "?since=${__from:date:seconds}&until=${__to:date:seconds}"
"""The board's time range as `/evidence` filters (Unix seconds)."""


def _kernels(s: Settings) -> DashboardDef:
    return DashboardDef(
        uid="warpwatch-kernels",
        title="warpwatch / Kernels",
        description="Per kernel: corrected and reported warps per SM, resident warps, theoretical and "
        "estimated occupancy, waves, time share and launch rate, each a ratio of rates of corrected sums.",
        variables=("namespace", "pod", "gpu", "kernel"),
        panels=(
            _kernels_over_range(s),
            _kernel_names(s),
            _estimated_vs_theoretical(s),
            *code_and_load_panels(s),
            *(_kernel_trend(s, *row) for row in KERNEL_TRENDS),
            _kernels_recently(s),
        ),
    )


def _kernel_mean(field: str) -> Callable[[q.Sel, str], str]:
    """The duration-weighted mean of a kernel's `field`, as a function of selector and range."""

    def mean(sel: q.Sel, rng: str) -> str:
        return q.kernel_mean(sel, field, rng)

    return mean


def _time_share(sel: q.Sel, rng: str) -> str:
    return q.time_share(sel, rng)


def _launch_rate(sel: q.Sel, rng: str) -> str:
    return q.launch_rate(sel, rng)


KERNEL_TRENDS: tuple[tuple[str, str, str, Callable[[q.Sel, str], str], float | None], ...] = (
    (
        "Resident warps per SM",
        "Average warps resident on an SM while the kernel runs (duration-weighted).",
        COUNT,
        _kernel_mean("resident_warps_per_sm"),
        0,
    ),
    (
        "Warps per SM (corrected)",
        "Launched warps per SM, B*ceil(T/warpSize)/SMs: what the profiler's 'warps per SM' "
        "means, computed right. Not bounded by the SM's capacity (all waves count).",
        COUNT,
        _kernel_mean("warps_per_sm"),
        None,
    ),
    (
        "Waves per SM",
        "Blocks / (max active blocks per SM x SMs), duration-weighted. Below 1 the GPU is not filled.",
        COUNT,
        _kernel_mean("waves_per_sm"),
        0,
    ),
    (
        "Time share",
        "Share of the GPU's watched time spent in the kernel (sampling-corrected; concurrent "
        "streams add up), empty windows included.",
        PERCENT,
        _time_share,
        0,
    ),
    (
        "Launches per second",
        "Kernel launches per second of watched time (sampling-corrected).",
        PER_SECOND,
        _launch_rate,
        0,
    ),
)
"""The Kernels board's per-kernel trends, one panel each: (title, description, unit, the query as a
function of selector and range, y-axis minimum)."""


def _kernel_trend(
    s: Settings, title: str, description: str, unit: str, query: Callable[[q.Sel, str], str], lo: float | None
) -> PanelDef:
    expr = query(_sel(s, "kernel"), RATE)
    return PanelDef("timeseries", title, description, unit, (Query(expr, KERNEL_LEGEND),), min=lo)


def _kernels_over_range(s: Settings) -> PanelDef:
    k = _sel(s, "kernel")

    return table_panel(
        "Kernels over the selected range",
        "Per kernel over the selected range: duration-weighted means = rate(Σh·d·x) / rate(Σh·d); "
        "time share and launches per second per second the GPU was watched. 'Reported warps/SM "
        "(min)' is the profiler's own uncorrected value (negative = artefact).",
        (
            (q.kernel_mean(k, "warps_per_sm", RANGE), "Corrected warps/SM", COUNT),
            (
                f"min_over_time({k(md.KERNEL_REPORTED_WARPS_MIN)}[{RANGE}])",
                "Reported warps/SM (min)",
                COUNT,
            ),
            (q.kernel_mean(k, "resident_warps_per_sm", RANGE), "Resident warps/SM", COUNT),
            (q.kernel_mean(k, "theoretical_occupancy", RANGE), "Theoretical occupancy", PERCENT),
            (q.kernel_mean(k, "estimated_occupancy", RANGE), "Estimated occupancy", PERCENT),
            (q.kernel_mean(k, "waves_per_sm", RANGE), "Waves per SM", COUNT),
            (q.time_share(k, RANGE), "Time share", PERCENT),
            (q.launch_rate(k, RANGE), "Launches/s", PER_SECOND),
        ),
        height=12,
        keep_labels=("namespace", "pod", "gpu", "kernel"),
        sort_by="Time share",
    )


def _kernel_names(s: Settings) -> PanelDef:
    gauge = _sel(s, "kernel")
    return table_panel(
        "Kernel names",
        "The full name behind each `kernel` label over the selected range (warpwatch_kernel_info): "
        "labels are short and stable; a label ending in ~hash was shortened from this name.",
        ((f"max_over_time({gauge(md.KERNEL_INFO)}[{RANGE}])", None, ""),),
        height=8,
        keep_labels=("namespace", "pod", "gpu", "kernel", "name"),
    )


def _estimated_vs_theoretical(s: Settings) -> PanelDef:
    k = _sel(s, "kernel")

    return PanelDef(
        "timeseries",
        "Estimated vs theoretical occupancy",
        "Estimated (resident warps / SM maximum, waves and tail included) beside theoretical "
        "(CUDA occupancy calculator) occupancy per kernel, duration-weighted. A gap means partial "
        "waves.",
        PERCENT,
        (
            Query(q.kernel_mean(k, "estimated_occupancy", RATE), KERNEL_LEGEND + " estimated"),
            Query(q.kernel_mean(k, "theoretical_occupancy", RATE), KERNEL_LEGEND + " theoretical"),
        ),
        min=0,
        max=1,
        links=(evidence_link(s),),
    )


def _kernels_recently(s: Settings) -> PanelDef:
    k = _sel(s, "kernel")

    return table_panel(
        f"Kernels: last {s.recording_window}",
        f"Per kernel over the last {s.recording_window} (at least two capture periods), for a "
        "glance at the present: the same ratios of rates as above over a short fixed range. "
        "Few launches of long kernels fall in it. The last round's gauges themselves are opt-in "
        "(`--kernel-gauges`).",
        (
            (q.time_share(k, s.recording_window), "Time share", PERCENT),
            (q.launch_rate(k, s.recording_window), "Launches/s", PER_SECOND),
            (q.kernel_mean(k, "warps_per_sm", s.recording_window), "Warps/SM", COUNT),
            (q.kernel_mean(k, "resident_warps_per_sm", s.recording_window), "Resident warps/SM", COUNT),
            (q.kernel_mean(k, "theoretical_occupancy", s.recording_window), "Theoretical occupancy", PERCENT),
            (q.kernel_mean(k, "estimated_occupancy", s.recording_window), "Estimated occupancy", PERCENT),
            (q.kernel_mean(k, "waves_per_sm", s.recording_window), "Waves per SM", COUNT),
        ),
        height=8,
        keep_labels=("namespace", "pod", "gpu", "kernel"),
        sort_by="Time share",
    )


def dashboards(s: Settings = DEFAULT_SETTINGS) -> tuple[DashboardDef, ...]:
    """Every dashboard, in the order they are listed."""
    return (fleet(s), _overview(s), _kernels(s), artifacts(s), agent_health(s))


def all_queries(s: Settings = DEFAULT_SETTINGS, *, substitute: bool = True) -> list[tuple[str, str]]:
    """(where, expr) for every PromQL expression the dashboards and alerts use.

    `where` reads `dashboard:<uid>/<panel title>/<refId>`, `variable:<uid>/<name>`,
    `annotation:<uid>/<name>`, `alert:<name>` or `recording:<record>`. With `substitute`, Grafana
    variables are replaced by plain values.
    """
    out: list[tuple[str, str]] = []
    for dash in dashboards(s):
        for var in board_variables(s, dash):
            out.append((f"variable:{dash.uid}/{var.name}", variable_selector(s, var)))
        starts = agent_starts(s, dash)
        out.append((f"annotation:{dash.uid}/{starts.name}", starts.expr))
        for panel in dash.panels:
            for i, query in enumerate(panel.queries):
                out.append((f"dashboard:{dash.uid}/{panel.title}/{ref_id(i)}", query.expr))
    out.extend((f"alert:{a.name}", a.expr) for a in alerts(s))
    out.extend((f"recording:{r.record}", r.expr) for r in q.recording_rules(s))
    if substitute:
        out = [(where, substitute_variables(expr)) for where, expr in out]
    return out
