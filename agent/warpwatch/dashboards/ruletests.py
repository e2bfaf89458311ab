"""promtool unit tests for the generated rules (`warpwatch-rules.test.yaml`).

For every alert: input series that fire it and near misses that stay silent, with the exact
labels and annotations expected; for the fleet recording rules: input counters of two pods and
the recorded values, written as arithmetic on those inputs (and unlike the mean of the pods'
ratios). The scenarios are computed from the thresholds in `Settings`, so changing a threshold
changes the inputs and expectations with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..export import metricdefs as md
from ..model import ARTIFACT_KINDS
from . import queries as q
from .alerts import GROUPS, AlertDef, alerts
from .rules import _annotations, render_template
from .ruletests_inputs import (
    AGENT,
    SCRAPE,
    STEP_S,
    Firing,
    Scenario,
    counter,
    gauge,
    input_series,
    minutes,
    ramp,
    selector_labels,
)
from .ruletests_occupancy import deployment_scenarios, kernel_scenarios, launch_scenarios, one_deployment_each
from .ruletests_overhead import overhead_recording_test, slows_serving_scenarios
from .ruletests_recording import recording_test
from .settings import ALERTED_ARTIFACTS, Settings, duration_seconds, format_duration


def _artifact_scenarios(s: Settings, alert: AlertDef) -> list[Scenario]:
    window, hold = minutes(s.artifact_window), minutes(alert.for_)
    t = max(window, hold) + 5
    base = {**selector_labels(s), **AGENT, **SCRAPE}
    per_min = 2
    places = ({"gpu": "0", "kernel": "gemm_bf16"}, {"gpu": "1", "kernel": "flash_attn_fwd"})
    pod = {"namespace": AGENT["namespace"], "pod": AGENT["pod"]}
    fires = tuple(Firing({**pod, "artifact": kind}, per_min * window * len(places)) for kind in ALERTED_ARTIFACTS)
    quiet_kinds = [k for k in ARTIFACT_KINDS if k not in ALERTED_ARTIFACTS]

    def inputs(kinds: list[str] | tuple[str, ...], values: str) -> tuple[tuple[str, str], ...]:
        return tuple(
            (input_series(md.PROFILER_ARTIFACTS, {**base, **place, "artifact": kind}), values)
            for kind in kinds
            for place in places
        )

    return [
        Scenario(
            "every alerted kind increasing on two kernels and GPUs fires once per pod and kind "
            "(not before the for-duration)",
            inputs(ALERTED_ARTIFACTS, counter(0, per_min, t + 1)),
            t,
            fires,
            silent_at=(hold,) if hold > 1 else (),
        ),
        Scenario(
            "near miss: alerted kinds flat, non-alerted kinds increasing",
            inputs(ALERTED_ARTIFACTS, gauge((7, t + 1))) + inputs(quiet_kinds, counter(0, per_min, t + 1)),
            t,
        ),
    ]


def _nvml_scenarios(s: Settings, alert: AlertDef) -> list[Scenario]:
    """Two kernels whose Σh·d·estimated_occupancy grow by 30 and 18 per 60 observed seconds: the
    GPU's occupancy is 0.8 (the sum over its kernels per observed second)."""
    t = minutes(s.nvml_window) + minutes(alert.for_) + 10
    labels = {**selector_labels(s), **AGENT, **SCRAPE, "gpu": "0"}
    fired = {k: v for k, v in {**AGENT, "gpu": "0"}.items() if k in q.pod_gpu_labels(s)}
    ours = 0.8
    far = round(max(0.0, ours - 1.6 * s.nvml_max_difference), 6)
    close = round(ours - 0.8 * s.nvml_max_difference, 6)
    est = tuple(
        (input_series(md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, {**labels, "kernel": k}), ramp((v, t)))
        for k, v in (("gemm", 30), ("attn", 18))
    )
    observed = (input_series(md.GPU_OBSERVED_SECONDS, labels), ramp((60, t)))
    nvml = input_series(md.NVML_SM_OCCUPANCY, labels)
    return [
        Scenario(
            "estimate far above NVML",
            (*est, observed, (nvml, gauge((far, t + 1)))),
            t,
            (Firing(fired, abs(ours - far)),),
        ),
        Scenario("near miss: within the bound", (*est, observed, (nvml, gauge((close, t + 1)))), t),
        Scenario("near miss: no NVML GPM on this GPU", (*est, observed), t),
    ]


def _short_window_scenarios(s: Settings, alert: AlertDef) -> list[Scenario]:
    t = minutes(s.short_window) + minutes(alert.for_) + 5
    labels = {**selector_labels(s), **AGENT, **SCRAPE, "gpu": "0"}
    fired = {k: v for k, v in {**AGENT, "gpu": "0"}.items() if k in q.pod_gpu_labels(s)}
    ratio = input_series(md.GPU_LONGEST_KERNEL_RATIO, labels)
    long_ratio = round(min(0.99, s.short_max_kernel_ratio + 0.2), 6)
    short_ratio = round(s.short_max_kernel_ratio / 2, 6)
    busy, observed = input_series(md.GPU_BUSY_SECONDS, labels), input_series(md.GPU_OBSERVED_SECONDS, labels)
    util = input_series(md.NVML_GPU_UTILIZATION, labels)
    gap = round(min(0.45, s.short_max_nvml_gap * 2), 6)
    near = round(s.short_max_nvml_gap / 2, 6)
    busy_series = ((busy, ramp((30, t))), (observed, ramp((60, t))))  # busy 0.5
    return [
        Scenario(
            "one long captured kernel in the last half hour",
            ((ratio, gauge((short_ratio, t - 20), (long_ratio, 1), (short_ratio, 20))),),
            t,
            (Firing({**fired, "evidence": "long_kernels"}, long_ratio),),
        ),
        Scenario(
            "NVML utilisation well above the estimated busy ratio",
            ((ratio, gauge((short_ratio, t + 1))), *busy_series, (util, gauge((0.5 + gap, t + 1)))),
            t,
            (Firing({**fired, "evidence": "nvml_busier"}, gap),),
        ),
        Scenario(
            "near miss: short kernels only, NVML close to the estimate",
            ((ratio, gauge((short_ratio, t + 1))), *busy_series, (util, gauge((0.5 + near, t + 1)))),
            t,
        ),
    ]


def _stale_scenarios(s: Settings, alert: AlertDef) -> list[Scenario]:
    period = 60.0
    bound = period * s.stale_periods
    t = math.ceil((bound + duration_seconds(alert.for_) + 120) / STEP_S)
    labels = {**selector_labels(s), **AGENT}
    metric = input_series(md.LAST_WINDOW_TIMESTAMP, labels)
    periods = input_series(md.CAPTURE_PERIOD, labels)
    almost = t * STEP_S - bound + 30  # age at t: bound - 30 s
    return [
        Scenario(
            "last window at time 0, never again",
            ((metric, gauge((0, t + 1))), (periods, gauge((period, t + 1)))),
            t,
            (Firing(labels, t * STEP_S),),
        ),
        Scenario(
            "near miss: last window just inside the bound",
            ((metric, gauge((almost, t + 1))), (periods, gauge((period, t + 1)))),
            t,
        ),
        Scenario(
            "near miss: the same age is fine for an agent with a longer period",
            ((metric, gauge((0, t + 1))), (periods, gauge((t * STEP_S, t + 1)))),
            t,
        ),
        Scenario(
            "near miss: a window every minute",
            ((metric, counter(0, STEP_S, t + 1)), (periods, gauge((period, t + 1)))),
            t,
        ),
    ]


def _failing_scenarios(s: Settings, alert: AlertDef) -> list[Scenario]:
    t = minutes(s.failing_window) + minutes(alert.for_) + 5
    labels = {**selector_labels(s), **AGENT}

    def outcome(name: str, per_min: float) -> tuple[str, str]:
        return (input_series(md.WINDOWS, {**labels, "outcome": name}), counter(10, per_min, t + 1))

    share = round(s.failing_ratio * 0.8, 2)
    bad = round(100 * share)
    return [
        Scenario(
            "every window fails or times out",
            (outcome("ok", 0), outcome("failed", 1), outcome("timed_out", 1)),
            t,
            (Firing(labels, 1.0),),
        ),
        Scenario(
            "near miss: some windows fail, below the bound",
            (outcome("ok", 100 - bad), outcome("failed", bad), outcome("timed_out", 0)),
            t,
        ),
        Scenario("near miss: no windows at all (NoRecentWindow's case)", (outcome("ok", 0), outcome("failed", 0)), t),
    ]


def _duty_scenarios(s: Settings, alert: AlertDef) -> list[Scenario]:
    t = minutes(alert.for_) + 5
    labels = {**selector_labels(s), **AGENT}
    metric = input_series(md.CAPTURE_DUTY, labels)
    high = round(s.max_capture_duty * 2, 6)
    return [
        Scenario("duty twice the bound", ((metric, gauge((high, t + 1))),), t, (Firing(labels, high),)),
        Scenario("near miss: just under the bound", ((metric, gauge((round(s.max_capture_duty * 0.9, 6), t + 1))),), t),
    ]


SCENARIOS: dict[str, Callable[[Settings, AlertDef], list[Scenario]]] = {
    "WarpwatchProfilerArtifacts": _artifact_scenarios,
    "WarpwatchKernelOccupancyRegressed": kernel_scenarios,
    "WarpwatchOccupancyRegressed": deployment_scenarios,
    "WarpwatchKernelLaunchChanged": launch_scenarios,
    "WarpwatchOccupancyDisagreesWithNvml": _nvml_scenarios,
    "WarpwatchWindowTooShort": _short_window_scenarios,
    "WarpwatchNoRecentWindow": _stale_scenarios,
    "WarpwatchWindowsFailing": _failing_scenarios,
    "WarpwatchCaptureDutyHigh": _duty_scenarios,
    "WarpwatchSlowsServing": slows_serving_scenarios,
}


MERGED = frozenset(("WarpwatchKernelOccupancyRegressed", "WarpwatchOccupancyRegressed", "WarpwatchKernelLaunchChanged"))
"""Alerts whose scenarios run as one promtool test per evaluation time (`one_deployment_each`)."""


def scenarios(s: Settings) -> list[tuple[AlertDef, Scenario]]:
    """Every alert's scenarios; each alert needs at least one that fires and one that does not."""
    out: list[tuple[AlertDef, Scenario]] = []
    for alert in alerts(s):
        if alert.name not in SCENARIOS:
            raise ValueError(f"alert {alert.name} has no promtool scenarios in rules.SCENARIOS")
        found = SCENARIOS[alert.name](s, alert)
        if not any(sc.fires for sc in found) or all(sc.fires for sc in found):
            raise ValueError(f"alert {alert.name} needs a firing scenario and a silent near miss")
        out.extend((alert, sc) for sc in found)
    return out


def _expected(alert: AlertDef, s: Settings, firing: Firing) -> dict[str, Any]:
    labels = dict(firing.labels)
    return {
        "exp_labels": {**labels, "severity": alert.severity},
        "exp_annotations": {k: render_template(v, labels, firing.value) for k, v in _annotations(alert, s).items()},
    }


def _test(alert: AlertDef, sc: Scenario, s: Settings) -> dict[str, Any]:
    checks: list[dict[str, Any]] = [
        {"eval_time": format_duration(minute * STEP_S), "alertname": alert.name, "exp_alerts": []}
        for minute in sc.silent_at
    ]
    checks.append(
        {
            "eval_time": format_duration(sc.eval_min * STEP_S),
            "alertname": alert.name,
            "exp_alerts": [_expected(alert, s, f) for f in sc.fires],
        }
    )
    return {
        "name": f"{alert.name}: {sc.name}",
        "interval": format_duration(STEP_S),
        "input_series": [{"series": name, "values": values} for name, values in sc.series],
        "alert_rule_test": checks,
    }


def promtool_tests(s: Settings, rule_file: str) -> dict[str, Any]:
    """A `promtool test rules` document for `rule_file` (a path relative to the test file)."""
    tests = []
    found: dict[str, list[Scenario]] = {}
    alert_of: dict[str, AlertDef] = {}
    for alert, sc in scenarios(s):
        found.setdefault(alert.name, []).append(sc)
        alert_of[alert.name] = alert
    for name, scs in found.items():
        alert = alert_of[name]
        for sc in one_deployment_each(scs, s) if name in MERGED else scs:
            tests.append(_test(alert, sc, s))
    tests.append(recording_test(s))
    tests.append(overhead_recording_test(s))
    # Records first, then the alerts that read them: at each step an alert sees that step's records
    # (without an order promtool picks one at random per test, and an alert may lag its record a step).
    order = [*q.GROUPS_RECORDING, *GROUPS]
    return {
        "rule_files": [rule_file],
        "evaluation_interval": format_duration(STEP_S),
        "group_eval_order": order,
        "tests": tests,
    }
