"""The dashboards: every panel and its query.

Trends and range tables divide rates of the corrected sums (`queries`); the last window's gauges
appear only in tables titled "now", which say so. Dashboard expressions carry Grafana variables
(`$namespace`, `$__rate_interval`, ...); `all_queries()` substitutes them so every expression is
plain PromQL a Prometheus can evaluate.
"""

from __future__ import annotations

from .. import metricdefs as md
from ..model import ARTIFACT_EXPLANATIONS, ARTIFACT_KINDS
from . import queries as q
from .alerts import alerts
from .panels import (
    COUNT,
    GPU_LEGEND,
    KERNEL_LEGEND,
    PER_SECOND,
    PERCENT,
    SECONDS,
    VARIABLES,
    Column,
    DashboardDef,
    PanelDef,
    Query,
    ref_id,
    substitute_variables,
    variable_selector,
)
from .settings import DEFAULT_SETTINGS, FAILING_MATCHER, Scope, Settings, dashboard_series

RATE = "$__rate_interval"
RANGE = "$__range"
NOW = "Now (last window)"


def _sel(s: Settings, scope: Scope) -> q.Sel:
    def sel(metric: md.MetricDef) -> str:
        return dashboard_series(s, metric, scope)
    return sel


def _overview(s: Settings) -> DashboardDef:
    g = _sel(s, "gpu")

    def gauge(metric: md.MetricDef) -> str:
        return dashboard_series(s, metric, "gpu")

    return DashboardDef(
        uid="warpwatch-overview",
        title="warpwatch / Overview",
        description="Per GPU: estimated occupancy, resident warps and busy ratio from the traced kernels "
        "(rates of corrected sums, empty windows included), NVML's view beside them, the kernels that "
        "take the time, and whether the capture window is long enough for the workload.",
        variables=("namespace", "pod", "gpu"),
        panels=(
            PanelDef(
                "timeseries", "Estimated occupancy per GPU",
                "Resident warps per SM / the SM's maximum, averaged over the time the GPU was watched "
                "(idle and empty windows count as zero): rate of Σ corrected kernel time x estimated "
                "occupancy over rate of observed seconds.",
                PERCENT, (Query(q.gpu_occupancy(g, RATE), GPU_LEGEND),), min=0, max=1,
            ),
            PanelDef(
                "timeseries", "Estimated vs NVML GPM SM occupancy",
                "warpwatch's estimate beside the hardware's SM occupancy (NVML GPM; Hopper and newer "
                "only, absent elsewhere). They agree when the traced process is the GPU's only user and "
                "the window holds its kernels.",
                PERCENT,
                (
                    Query(q.gpu_occupancy(g, RATE), GPU_LEGEND + " estimated"),
                    Query(f"avg_over_time({gauge(md.NVML_SM_OCCUPANCY)}[{RATE}])", GPU_LEGEND + " NVML GPM"),
                ),
                min=0, max=1,
            ),
            PanelDef(
                "timeseries", "Resident warps per SM per GPU",
                "Average warps resident on an SM over the watched time, all kernels and streams together.",
                COUNT, (Query(q.gpu_ratio(g, md.GPU_RESIDENT_WARPS_SECONDS, RATE), GPU_LEGEND),), min=0,
            ),
            PanelDef(
                "timeseries", "Busy ratio vs NVML utilisation",
                "Share of the watched time with at least one kernel running (sampling-corrected, "
                "overlapping streams counted once), beside NVML's GPU utilisation. NVML well above the "
                "estimate: kernels longer than the window are being missed.",
                PERCENT,
                (
                    Query(q.gpu_ratio(g, md.GPU_BUSY_SECONDS, RATE), GPU_LEGEND + " busy"),
                    Query(f"avg_over_time({gauge(md.NVML_GPU_UTILIZATION)}[{RATE}])",
                          GPU_LEGEND + " NVML utilisation"),
                ),
                min=0, max=1,
            ),
            PanelDef(
                "bargauge", "Top kernels by time share",
                "The 10 kernels with the largest share of their GPU's watched time over the selected "
                "range: rate of the kernel's corrected seconds over rate of the GPU's observed seconds "
                "(kernels outside the top-K are summed into `other`).",
                PERCENT,
                (Query(f"topk(10,\n{q.time_share(g, RANGE)}\n)", "{{kernel}} ({{pod}} GPU {{gpu}})",
                       instant=True),),
                height=10, min=0, max=1,
            ),
            PanelDef(
                "timeseries", "Coverage: is the window long enough?",
                "Share of the watched time in windows that captured no kernel (idle, or inside a kernel "
                "longer than the window), in low-confidence windows, and the longest captured kernel as "
                "a share of its window (maximum over each interval). Near 0.5 or above, or empty "
                "windows while the workload runs: the window is too short (alert "
                "WarpwatchWindowTooShort).",
                PERCENT,
                (
                    Query(q.gpu_ratio(g, md.GPU_EMPTY_SECONDS, RATE), GPU_LEGEND + " empty windows"),
                    Query(q.gpu_ratio(g, md.GPU_LOW_CONFIDENCE_SECONDS, RATE), GPU_LEGEND + " low confidence"),
                    Query(f"max_over_time({gauge(md.GPU_LONGEST_KERNEL_RATIO)}[{RATE}])",
                          GPU_LEGEND + " longest kernel / window"),
                ),
                min=0,
            ),
            PanelDef(
                "table", f"GPUs: {NOW}",
                "The last round's values per GPU, for a glance at the present only (never average "
                "them over time: the trends above are built from rates of sums). Device name, compute "
                "capability and SM count from the traces or NVML.",
                "none",
                (
                    Query(gauge(md.GPU_BUSY), instant=True, table=True),
                    Query(gauge(md.GPU_ESTIMATED_OCCUPANCY), instant=True, table=True),
                    Query(gauge(md.GPU_RESIDENT_WARPS_PER_SM), instant=True, table=True),
                    Query(gauge(md.GPU_LONGEST_KERNEL_RATIO), instant=True, table=True),
                    Query(gauge(md.GPU_LOW_CONFIDENCE), instant=True, table=True),
                    Query(gauge(md.GPU_INFO), instant=True, table=True),
                ),
                width=24, height=8,
                columns=(
                    Column("A", "Busy (last window)", PERCENT),
                    Column("B", "Estimated occupancy (last window)", PERCENT),
                    Column("C", "Resident warps/SM (last window)", COUNT),
                    Column("D", "Longest kernel / window (last window)", PERCENT),
                    Column("E", "Low confidence (last window)", COUNT),
                ),
                keep_labels=("namespace", "pod", "gpu", "name", "compute_capability", "sms"),
            ),
        ),
    )


def _kernels(s: Settings) -> DashboardDef:
    k = _sel(s, "kernel")

    def gauge(metric: md.MetricDef) -> str:
        return dashboard_series(s, metric, "kernel")

    def mean(field: str, rng: str = RATE) -> str:
        return q.kernel_mean(k, field, rng)

    return DashboardDef(
        uid="warpwatch-kernels",
        title="warpwatch / Kernels",
        description="Per kernel: corrected and reported warps per SM, resident warps, theoretical and "
        "estimated occupancy, waves, time share and launch rate, each a ratio of rates of corrected sums.",
        variables=("namespace", "pod", "gpu", "kernel"),
        panels=(
            PanelDef(
                "table", "Kernels over the selected range",
                "Per kernel over the selected range: duration-weighted means = rate(Σh·d·x) / rate(Σh·d); "
                "time share and launches per second per second the GPU was watched. 'Reported warps/SM "
                "(min)' is the profiler's own uncorrected value (negative = artefact).",
                "none",
                (
                    Query(mean("warps_per_sm", RANGE), instant=True, table=True),
                    Query(f"min_over_time({gauge(md.KERNEL_REPORTED_WARPS_MIN)}[{RANGE}])", instant=True,
                          table=True),
                    Query(mean("resident_warps_per_sm", RANGE), instant=True, table=True),
                    Query(mean("theoretical_occupancy", RANGE), instant=True, table=True),
                    Query(mean("estimated_occupancy", RANGE), instant=True, table=True),
                    Query(mean("waves_per_sm", RANGE), instant=True, table=True),
                    Query(q.time_share(k, RANGE), instant=True, table=True),
                    Query(q.launch_rate(k, RANGE), instant=True, table=True),
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
                "timeseries", "Estimated vs theoretical occupancy",
                "Estimated (resident warps / SM maximum, waves and tail included) beside theoretical "
                "(CUDA occupancy calculator) occupancy per kernel, duration-weighted. A gap means partial "
                "waves.",
                PERCENT,
                (
                    Query(mean("estimated_occupancy"), KERNEL_LEGEND + " estimated"),
                    Query(mean("theoretical_occupancy"), KERNEL_LEGEND + " theoretical"),
                ),
                min=0, max=1,
            ),
            PanelDef(
                "timeseries", "Resident warps per SM",
                "Average warps resident on an SM while the kernel runs (duration-weighted).",
                COUNT, (Query(mean("resident_warps_per_sm"), KERNEL_LEGEND),), min=0,
            ),
            PanelDef(
                "timeseries", "Warps per SM (corrected)",
                "Launched warps per SM, B*ceil(T/warpSize)/SMs: what the profiler's 'warps per SM' "
                "means, computed right. Not bounded by the SM's capacity (all waves count).",
                COUNT, (Query(mean("warps_per_sm"), KERNEL_LEGEND),),
            ),
            PanelDef(
                "timeseries", "Waves per SM",
                "Blocks / (max active blocks per SM x SMs), duration-weighted. Below 1 the GPU is not filled.",
                COUNT, (Query(mean("waves_per_sm"), KERNEL_LEGEND),), min=0,
            ),
            PanelDef(
                "timeseries", "Time share",
                "Share of the GPU's watched time spent in the kernel (sampling-corrected; concurrent "
                "streams add up), empty windows included.",
                PERCENT, (Query(q.time_share(k, RATE), KERNEL_LEGEND),), min=0,
            ),
            PanelDef(
                "timeseries", "Launches per second",
                "Kernel launches per second of watched time (sampling-corrected).",
                PER_SECOND, (Query(q.launch_rate(k, RATE), KERNEL_LEGEND),), min=0,
            ),
            PanelDef(
                "table", f"Kernels: {NOW}",
                "The last round's values per kernel, for a glance at the present only: one window "
                "holds few launches of long kernels and none of kernels it missed. Never average these "
                "over time; the panels above are the trends.",
                "none",
                (
                    Query(gauge(md.KERNEL_TIME_SHARE), instant=True, table=True),
                    Query(gauge(md.KERNEL_LAUNCH_RATE), instant=True, table=True),
                    Query(gauge(md.KERNEL_WARPS_PER_SM), instant=True, table=True),
                    Query(gauge(md.KERNEL_RESIDENT_WARPS_PER_SM), instant=True, table=True),
                    Query(gauge(md.KERNEL_THEORETICAL_OCCUPANCY), instant=True, table=True),
                    Query(gauge(md.KERNEL_ESTIMATED_OCCUPANCY), instant=True, table=True),
                    Query(gauge(md.KERNEL_WAVES_PER_SM), instant=True, table=True),
                ),
                width=24, height=8,
                columns=(
                    Column("A", "Time share (last window)", PERCENT),
                    Column("B", "Launches/s (last window)", PER_SECOND),
                    Column("C", "Warps/SM (last window)", COUNT),
                    Column("D", "Resident warps/SM (last window)", COUNT),
                    Column("E", "Theoretical occupancy (last window)", PERCENT),
                    Column("F", "Estimated occupancy (last window)", PERCENT),
                    Column("G", "Waves per SM (last window)", COUNT),
                ),
                keep_labels=("namespace", "pod", "gpu", "kernel"),
                sort_by="Time share (last window)",
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
                "Why is my warps per SM negative? The trace's own value (minimum over the launches, "
                "uncorrected) beside warpwatch's recomputation for the same kernel (duration-weighted mean).",
                COUNT,
                (
                    Query(f"min_over_time({k(md.KERNEL_REPORTED_WARPS_MIN)}[{RATE}])",
                          KERNEL_LEGEND + " reported (min)"),
                    Query(q.kernel_mean(_sel(s, "kernel"), "warps_per_sm", RATE), KERNEL_LEGEND + " corrected"),
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
                f"Time since the last window finished (any outcome), in capture periods "
                f"(`{md.CAPTURE_PERIOD.name}`). Red from {s.stale_periods:g}: alert WarpwatchNoRecentWindow.",
                COUNT,
                (Query(f"(time() - {a(md.LAST_WINDOW_TIMESTAMP)})\n  / {a(md.CAPTURE_PERIOD)}", "{{pod}}",
                       instant=True),),
                width=8, height=5, thresholds=(("green", None), ("red", s.stale_periods)),
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
                "timeseries", "Capture window and period",
                "The window the agent asks its sources for (it grows with --adaptive-window) and the "
                "period between rounds.",
                SECONDS,
                (
                    Query(a(md.CAPTURE_WINDOW), "{{pod}} window"),
                    Query(a(md.CAPTURE_PERIOD), "{{pod}} period"),
                ),
                min=0,
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


def all_queries(s: Settings = DEFAULT_SETTINGS, *, substitute: bool = True) -> list[tuple[str, str]]:
    """(where, expr) for every PromQL expression the dashboards and alerts use.

    `where` reads `dashboard:<uid>/<panel title>/<refId>`, `variable:<uid>/<name>`,
    `alert:<name>` or `recording:<record>`. With `substitute`, Grafana variables are replaced by plain values.
    """
    out: list[tuple[str, str]] = []
    for dash in dashboards(s):
        for name in dash.variables:
            out.append((f"variable:{dash.uid}/{name}", variable_selector(s, VARIABLES[name])))
        for panel in dash.panels:
            for i, query in enumerate(panel.queries):
                out.append((f"dashboard:{dash.uid}/{panel.title}/{ref_id(i)}", query.expr))
    out.extend((f"alert:{a.name}", a.expr) for a in alerts(s))
    out.extend((f"recording:{r.record}", r.expr) for r in q.recording_rules(s))
    if substitute:
        out = [(where, substitute_variables(expr)) for where, expr in out]
    return out


