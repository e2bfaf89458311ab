"""The capture rounds as the window snapshot shows them: outcomes, faults, timing, the period and
window in force, and the agent's build."""

from __future__ import annotations

from .definition import MetricDef

WINDOWS = MetricDef(
    "warpwatch_windows", "counter", "Capture windows by outcome (ok, empty, failed, timed_out).", ("outcome",)
)
ERRORS = MetricDef(
    "warpwatch_errors",
    "counter",
    "Faults the agent survived, by stage (capture, read, analysis, nvml, clock, round, export) and reason "
    "(a fixed set per stage); every failed or timed-out window adds one.",
    ("stage", "reason"),
)
WINDOW_PROCESSING = MetricDef(
    "warpwatch_window_processing_seconds", "histogram", "Time to read and analyse one window's trace.", unit="seconds"
)
LAST_WINDOW_TIMESTAMP = MetricDef(
    "warpwatch_last_window_timestamp_seconds",
    "gauge",
    "Unix time at which the last window finished processing (any outcome).",
    unit="seconds",
)
CAPTURE_DUTY = MetricDef(
    "warpwatch_capture_duty_ratio", "gauge", "Configured capture time / wall time (window / period)."
)
CAPTURE_PERIOD = MetricDef(
    "warpwatch_capture_period_seconds",
    "gauge",
    "Time between capture rounds now: --period, stretched while the measured cost to the server exceeds "
    "--overhead-budget; staleness alerts are multiples of it.",
    unit="seconds",
)
CAPTURE_WINDOW = MetricDef(
    "warpwatch_capture_window_seconds",
    "gauge",
    "Capture window the agent asks its sources for now (--window; lengthened by --adaptive-window).",
    unit="seconds",
)
BUILD_INFO = MetricDef("warpwatch_build_info", "gauge", "warpwatch build; value 1.", ("version",))
