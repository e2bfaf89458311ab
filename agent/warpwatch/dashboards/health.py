"""The profiler-artefacts and agent-health dashboards (counters of events, no estimates to pool)."""

from __future__ import annotations

from functools import partial

from ..export import metricdefs as md
from ..model import ARTIFACT_EXPLANATIONS, ARTIFACT_KINDS
from . import queries as q
from .panels import (
    COUNT,
    GPU_LEGEND,
    KERNEL_LEGEND,
    PER_SECOND,
    PERCENT,
    RATE,
    SECONDS,
    Column,
    DashboardDef,
    PanelDef,
    Query,
)
from .settings import FAILING_MATCHER, Settings, dashboard_series, record_matchers


def _agent(s: Settings, metric: md.MetricDef, *extra: str, suffix: str = "") -> str:
    """`metric` as the agent-level panels select it."""
    return dashboard_series(s, metric, "agent", *extra, suffix=suffix)


def _kernel(s: Settings, metric: md.MetricDef) -> str:
    """`metric` as the kernel-level panels select it."""
    return dashboard_series(s, metric, "kernel")


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


def artifacts(s: Settings) -> DashboardDef:
    """Where the profiler's own numbers are wrong."""

    return DashboardDef(
        uid="warpwatch-artifacts",
        title="warpwatch / Profiler artefacts",
        description="Where the profiler's own numbers are wrong, by kind and kernel, and the reported "
        "warps per SM beside the corrected ones.",
        variables=("namespace", "pod", "gpu", "kernel"),
        panels=(*_artifact_rate_panels(s), *_artifact_range_panels(s)),
    )


def _artifact_rate_panels(s: Settings) -> tuple[PanelDef, ...]:
    """What the artefacts mean, and their rate by kind and by kernel."""
    arts = _kernel(s, md.PROFILER_ARTIFACTS)
    return (
        PanelDef(
            "text",
            "What the artefact kinds mean",
            "Each kind of profiler artefact warpwatch detects, in one line.",
            width=8,
            height=18,
            content=_artifact_text(),
        ),
        PanelDef(
            "timeseries",
            "Artefacts by kind",
            "Launches per second whose profiler-reported values are wrong, by artefact kind.",
            PER_SECOND,
            (Query(f"sum by (artifact) (rate({arts}[$__rate_interval]))", "{{artifact}}"),),
            width=16,
            height=9,
            min=0,
        ),
        PanelDef(
            "timeseries",
            "Artefacts by kernel",
            "Launches per second with profiler artefacts, by GPU, kernel and kind.",
            PER_SECOND,
            (
                Query(
                    f"sum by (gpu, kernel, artifact) (rate({arts}[$__rate_interval]))",
                    "GPU {{gpu}} {{kernel}}: {{artifact}}",
                ),
            ),
            width=16,
            height=9,
            min=0,
        ),
    )


def _artifact_range_panels(s: Settings) -> tuple[PanelDef, ...]:
    """The reported against the corrected values, and the artefacts over the selected range."""
    arts = _kernel(s, md.PROFILER_ARTIFACTS)
    return (
        PanelDef(
            "timeseries",
            "Reported vs corrected warps per SM",
            "Why is my warps per SM negative? The trace's own value (minimum over the launches, "
            "uncorrected) beside warpwatch's recomputation for the same kernel (duration-weighted mean).",
            COUNT,
            (
                Query(
                    f"min_over_time({_kernel(s, md.KERNEL_REPORTED_WARPS_MIN)}[{RATE}])",
                    KERNEL_LEGEND + " reported (min)",
                ),
                Query(q.kernel_mean(partial(_kernel, s), "warps_per_sm", RATE), KERNEL_LEGEND + " corrected"),
            ),
            width=24,
            height=10,
        ),
        PanelDef(
            "table",
            "Artefacts in the selected range",
            "Launches with each artefact kind over the selected range, per kernel.",
            "none",
            (
                Query(
                    f"sum by (namespace, pod, gpu, kernel, artifact) (increase({arts}[$__range])) > 0",
                    instant=True,
                    table=True,
                ),
            ),
            width=16,
            height=10,
            columns=(Column("A", "Launches", COUNT),),
            keep_labels=("namespace", "pod", "gpu", "kernel", "artifact"),
            sort_by="Launches",
        ),
        PanelDef(
            "stat",
            "Artefacts per captured launch",
            "Artefacts counted over the selected range divided by launches captured; above 100 % "
            "when launches carry several kinds.",
            PERCENT,
            (
                Query(
                    f"(sum(increase({arts}[$__range])) or vector(0))\n  / "
                    f"sum(increase({_kernel(s, md.KERNEL_LAUNCHES_OBSERVED)}[$__range]))",
                    instant=True,
                ),
            ),
            width=8,
            height=10,
        ),
    )


def agent_health(s: Settings) -> DashboardDef:
    """Is the agent capturing and analysing windows."""

    return DashboardDef(
        uid="warpwatch-agent-health",
        title="warpwatch / Agent health",
        description="Is the agent capturing and analysing windows: outcomes, faults, processing time, "
        "duty cycle, folded kernels, last window age, NVML.",
        variables=("namespace", "pod", "gpu"),
        panels=(*_agent_status_panels(s), *_window_panels(s), *_capture_panels(s), *_cost_panels(s)),
    )


def _agent_status_panels(s: Settings) -> tuple[PanelDef, ...]:
    """The agent at a glance: last window age, failing windows, NVML."""

    failing = _agent(s, md.WINDOWS, FAILING_MATCHER)
    return (
        _pod_stat(
            "Last window age",
            f"Time since the last window finished (any outcome), in capture periods "
            f"(`{md.CAPTURE_PERIOD.name}`). Red from {s.stale_periods:g}: alert WarpwatchNoRecentWindow.",
            COUNT,
            f"(time() - {_agent(s, md.LAST_WINDOW_TIMESTAMP)})\n  / {_agent(s, md.CAPTURE_PERIOD)}",
            thresholds=(("green", None), ("red", s.stale_periods)),
        ),
        _pod_stat(
            "Failing windows",
            "Share of windows over the selected range that failed or timed out (0 when none did).",
            PERCENT,
            f"(\n  sum by (namespace, pod) (increase({failing}[$__range]))\n"
            f"  or sum by (namespace, pod) (increase({_agent(s, md.WINDOWS)}[$__range])) * 0\n)\n"
            f"/ sum by (namespace, pod) (increase({_agent(s, md.WINDOWS)}[$__range]))",
            thresholds=(("green", None), ("red", s.failing_ratio)),
        ),
        _pod_stat(
            "NVML up",
            "Whether NVML answered at the last sample (GPU utilisation and GPM occupancy need it).",
            "none",
            _agent(s, md.NVML_UP),
            thresholds=(("red", None), ("green", 1)),
            mappings=(("0", "down", "red"), ("1", "up", "green")),
        ),
    )


def _pod_stat(
    title: str,
    description: str,
    unit: str,
    expr: str,
    *,
    thresholds: tuple[tuple[str, float | None], ...],
    mappings: tuple[tuple[str, str, str], ...] = (),
) -> PanelDef:
    """A small (8 x 5) stat panel of one instant query: a value per pod."""
    query = Query(expr, "{{pod}}", instant=True)
    return PanelDef(
        "stat", title, description, unit, (query,), width=8, height=5, thresholds=thresholds, mappings=mappings
    )


def _window_panels(s: Settings) -> tuple[PanelDef, ...]:
    """What happens to the windows: outcomes, faults, processing time."""

    quantiles = tuple(
        Query(
            f"histogram_quantile({q}, sum by (namespace, pod, le) "
            f"(rate({_agent(s, md.WINDOW_PROCESSING, suffix='_bucket')}[$__rate_interval])))",
            f"{{{{pod}}}} p{round(q * 100)}",
        )
        for q in (0.5, 0.9, 0.99)
    )
    return (
        _per_minute(
            "Windows by outcome",
            "Capture windows finished per minute, by outcome (ok, empty, failed, timed_out).",
            f"sum by (namespace, pod, outcome) (rate({_agent(s, md.WINDOWS)}[$__rate_interval])) * 60",
            "{{pod}} {{outcome}}",
        ),
        _per_minute(
            "Faults by stage and reason",
            "Faults the agent survived per minute: failed or timed-out windows by cause, refused "
            "trace files (links out of the folder, FIFOs, other users' files), NVML errors, wall-clock "
            "steps, overrun rounds. The agent keeps serving its last good snapshot meanwhile.",
            f"sum by (namespace, pod, stage, reason) (rate({_agent(s, md.ERRORS)}[$__rate_interval])) * 60 > 0",
            "{{pod}} {{stage}}/{{reason}}",
        ),
        PanelDef(
            "timeseries",
            "Window processing time",
            "Time to read and analyse one window's trace: median, 90th and 99th percentile.",
            SECONDS,
            quantiles,
            min=0,
        ),
    )


def _per_minute(title: str, description: str, expr: str, legend: str) -> PanelDef:
    """A timeseries of one query that counts per minute (from 0)."""
    return PanelDef("timeseries", title, description, "opm", (Query(expr, legend),), min=0)


def _capture_panels(s: Settings) -> tuple[PanelDef, ...]:
    """What the agent captures: duty cycle, window and period, folded kernels."""

    return (
        PanelDef(
            "timeseries",
            "Capture duty cycle",
            f"Captured time / wall time (window / period). Bound: {s.max_capture_duty:.0%}.",
            PERCENT,
            (Query(_agent(s, md.CAPTURE_DUTY), "{{pod}}"),),
            min=0,
            thresholds=(("green", None), ("red", s.max_capture_duty)),
        ),
        PanelDef(
            "timeseries",
            "Capture window and period",
            "The window the agent asks its sources for (it grows with --adaptive-window) and the "
            "period in force between rounds: --period, stretched while the measured cost to the server "
            "is above --overhead-budget.",
            SECONDS,
            (
                Query(_agent(s, md.CAPTURE_WINDOW), "{{pod}} window"),
                Query(_agent(s, md.CAPTURE_PERIOD), "{{pod}} period"),
            ),
            min=0,
        ),
        PanelDef(
            "timeseries",
            "Kernels folded into other",
            'Kernels per second folded into kernel="other" because they fell outside the '
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
    )


def _cost_panels(s: Settings) -> tuple[PanelDef, ...]:
    """What the agent costs the server it profiles (`warpwatch.overhead`), and its budget."""

    return (*_budget_panels(s), *_cost_cause_panels(s))


def _budget_panels(s: Settings) -> tuple[PanelDef, ...]:
    """The agent's cost to the server against its budget, now and over time."""

    bound = 1 + s.overhead_tolerance
    budget_used = f"{q.OVERHEAD_BUDGET_USED}{{{', '.join(record_matchers(s, 'agent'))}}}"
    return (
        PanelDef(
            "stat",
            "Overhead budget used",
            "The agent's estimated cost to the server over its --overhead-budget, now (1: at the budget). "
            f"Red from {bound:g}: alert WarpwatchSlowsServing once it stays there {s.overhead_rounds} "
            "capture periods.",
            COUNT,
            (Query(budget_used, "{{pod}}", instant=True),),
            width=6,
            height=8,
            thresholds=(("green", None), ("red", bound)),
        ),
        PanelDef(
            "timeseries",
            "Cost to the server",
            "Estimated share of the profiled server's time the agent costs at the period in force (served "
            "slowdown inside windows or stop stall, per period; absent until measured), beside its "
            "--overhead-budget. Above the budget the agent stretches its period (*Capture window and period*).",
            PERCENT,
            (Query(_agent(s, md.OVERHEAD), "{{pod}} cost"), Query(_agent(s, md.OVERHEAD_BUDGET), "{{pod}} budget")),
            width=6,
            height=8,
            min=0,
        ),
    )


def _cost_cause_panels(s: Settings) -> tuple[PanelDef, ...]:
    """Where the cost comes from: the stall of each stop and the slowdown inside windows."""

    stops = tuple(
        Query(
            f"histogram_quantile({quantile}, sum by (namespace, pod, source, le) "
            f"(rate({_agent(s, md.CAPTURE_STOP, suffix='_bucket')}[$__rate_interval])))",
            f"{{{{pod}}}} {{{{source}}}} p{round(quantile * 100)}",
        )
        for quantile in (0.5, 0.99)
    )
    return (
        PanelDef(
            "timeseries",
            "Capture stop stall",
            "Seconds from asking a source to end its window until it answered (the engine writing its "
            "trace; a vLLM or SGLang worker serves nothing meanwhile), median and 99th percentile by source.",
            SECONDS,
            stops,
            width=6,
            height=8,
            min=0,
        ),
        PanelDef(
            "timeseries",
            "Served slowdown",
            "Mean inter-token latency the server reported inside capture windows over the mean outside "
            "them, minus 1, over the last rounds (vllm and sglang sources; absent until known).",
            PERCENT,
            (Query(_agent(s, md.SERVED_SLOWDOWN), "{{pod}} {{source}}"),),
            width=6,
            height=8,
        ),
    )
