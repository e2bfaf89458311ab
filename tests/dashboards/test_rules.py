"""Alert rules: valid for the real promtool in both shapes, fired and held silent by promtool unit
tests, mirrored into Grafana's file-provisioning format, each with a runbook."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.patience import hang_guard
from warpwatch import overhead
from warpwatch.config import table as config
from warpwatch.dashboards import build, ruletests
from warpwatch.dashboards.alerts import alerts
from warpwatch.dashboards.queries import recording_rules
from warpwatch.dashboards.ruletests import MERGED
from warpwatch.dashboards.settings import (
    ALERTED_ARTIFACTS,
    DEFAULT_SETTINGS,
    Settings,
    duration_seconds,
)
from warpwatch.errors import ConfigError
from warpwatch.export import metricdefs as md

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "dashboards" / "alerts"
RUNBOOKS = ROOT / "dashboards" / "runbooks"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian/Ubuntu package `prometheus`; CI installs it)"
)
ALERT_NAMES = [a.name for a in alerts()]


def load(name: str) -> Any:
    return yaml.safe_load((ALERTS / name).read_text())


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=hang_guard(120))


def prometheus_rules() -> list[dict[str, Any]]:
    """The alerting rules (the recording rules are `recording()`)."""
    return [r for g in load("warpwatch-rules.yaml")["groups"] for r in g["rules"] if "alert" in r]


def recording() -> list[dict[str, Any]]:
    return [r for g in load("warpwatch-rules.yaml")["groups"] for r in g["rules"] if "record" in r]


@needs_promtool
def test_rules_file_passes_promtool_check() -> None:
    result = promtool("check", "rules", str(ALERTS / "warpwatch-rules.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERT_NAMES) + len(recording_rules(DEFAULT_SETTINGS))} rules found" in result.stdout


@needs_promtool
def test_prometheusrule_object_holds_the_same_valid_groups(tmp_path: Path) -> None:
    obj = load("warpwatch-prometheusrule.yaml")
    assert (obj["apiVersion"], obj["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert obj["metadata"]["name"] == "warpwatch"
    assert obj["spec"]["groups"] == load("warpwatch-rules.yaml")["groups"]
    extracted = tmp_path / "from-prometheusrule.yaml"
    extracted.write_text(yaml.safe_dump({"groups": obj["spec"]["groups"]}))
    result = promtool("check", "rules", str(extracted))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", "warpwatch-rules.test.yaml", cwd=ALERTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_unit_tests_fire_and_hold_every_alert() -> None:
    tests = load("warpwatch-rules.test.yaml")
    assert tests["rule_files"] == ["warpwatch-rules.yaml"]
    checks = [c for t in tests["tests"] for c in t.get("alert_rule_test", [])]
    fired = {c["alertname"] for c in checks if c["exp_alerts"]}
    silent = {c["alertname"] for c in checks if c["exp_alerts"] == []}
    # Scenarios merged into one test, a deployment each (ruletests.MERGED): promtool fails the test
    # if a deployment expected silent fires, so a deployment of the input with no expected alert is
    # a silent near miss.
    for t in tests["tests"]:
        given = set(re.findall(r'deployment="([^"]+)"', " ".join(i["series"] for i in t["input_series"])))
        for c in t.get("alert_rule_test", []):
            if c["alertname"] in MERGED and given - {e["exp_labels"]["deployment"] for e in c["exp_alerts"]}:
                silent.add(c["alertname"])
    assert fired == set(ALERT_NAMES)
    assert silent == set(ALERT_NAMES)
    # Every expectation states the full labels and every annotation, so promtool compares them; an
    # alert whose text names its pod also links to that pod's kept traces, one that names only its
    # deployment says how to pull every pod's.
    texts = {a.name: a.summary + a.description for a in alerts(DEFAULT_SETTINGS)}
    naming_a_pod = {name for name, text in texts.items() if "$labels.pod" in text}
    naming_a_deployment = {name for name, text in texts.items() if "$labels.deployment" in text} - naming_a_pod
    for c in checks:
        for exp in c["exp_alerts"]:
            name = c["alertname"]
            assert set(exp["exp_annotations"]) == {"summary", "description", "runbook_url"} | (
                {"evidence_url"} if name in naming_a_pod else {"evidence"} if name in naming_a_deployment else set()
            )
            assert exp["exp_labels"]["severity"]


def test_artifact_alert_covers_the_wrong_number_kinds_and_names_them() -> None:
    rule = next(r for r in prometheus_rules() if r["alert"] == "WarpwatchProfilerArtifacts")
    assert rule["labels"]["severity"] == "info"
    kinds = re.search(r'artifact=~"([^"]+)"', rule["expr"])
    assert kinds is not None and kinds.group(1).split("|") == list(ALERTED_ARTIFACTS)
    assert set(ALERTED_ARTIFACTS) == {
        "negative_warps_per_sm",
        "non_finite",
        "occupancy_sentinel",
        "grid_overflow",
        "sm_count_invalid",
    }
    assert "{{ $labels.artifact }}" in rule["annotations"]["description"]
    assert "raw trace numbers" in rule["annotations"]["description"]
    tests = load("warpwatch-rules.test.yaml")["tests"]
    fired = [
        e
        for t in tests
        for c in t.get("alert_rule_test", [])
        if c["alertname"] == rule["alert"]
        for e in c["exp_alerts"]
    ]
    assert sorted(e["exp_labels"]["artifact"] for e in fired) == sorted(ALERTED_ARTIFACTS)
    overflow = next(e for e in fired if e["exp_labels"]["artifact"] == "grid_overflow")
    # one alert per pod and kind: two kernels on two GPUs, 2 launches a minute each, over 30 minutes
    assert set(overflow["exp_labels"]) == {"namespace", "pod", "artifact", "severity"}
    assert overflow["exp_annotations"]["description"].startswith(
        "120 kernel launches in pod ml/llm-0 carried the profiler artefact grid_overflow in the last 30m"
    )


def test_regression_alert_compares_theoretical_occupancy_of_recorded_rates_per_deployment_and_kernel() -> None:
    """Issues 24 and 45: it reads the fleet tier (a few series per deployment and kernel), never raw
    series, and fires per (namespace, deployment, kernel) on the theoretical occupancy (what the code
    decides), never the estimated one or resident warps (what the load moves): the mean of a recorded
    rate over a range is the rate over that range, so the ratios are ratios of sums."""
    expr = next(r["expr"] for r in prometheus_rules() if r["alert"] == "WarpwatchKernelOccupancyRegressed")
    s = DEFAULT_SETTINGS
    window = f"[{s.degraded_baseline_window}] offset {s.degraded_baseline_offset}"
    seconds = 'fleet_kernel:warpwatch_kernel_seconds_total:rate5m{kernel!="other"}'
    num = 'fleet_kernel:warpwatch_kernel_theoretical_occupancy_seconds_total:rate5m{kernel!="other"}'
    assert f"(avg_over_time({num}[{s.degraded_window}]) / avg_over_time({seconds}[{s.degraded_window}]))" in expr
    assert f"(avg_over_time({num}{window}) / avg_over_time({seconds}{window}))" in expr
    assert f"count_over_time({seconds}{window}) >= {s.degraded_min_samples}" in expr
    assert f"< {s.degraded_ratio}" in expr
    assert f") > {s.degraded_min_time_share}" in expr
    for by_load in ("estimated_occupancy", "resident_warps", "waves", "busy"):
        assert by_load not in expr
    assert "warpwatch_kernel_seconds_total[" not in expr  # no raw series
    tests = load("warpwatch-rules.test.yaml")["tests"]
    fired = [
        e["exp_labels"]
        for t in tests
        for c in t.get("alert_rule_test", [])
        if c["alertname"] == "WarpwatchKernelOccupancyRegressed"
        for e in c["exp_alerts"]
    ]
    assert fired and all(set(f) == {"namespace", "deployment", "kernel", "severity"} for f in fired)


def test_every_alert_reads_recorded_series_or_per_pod_gauges_only() -> None:
    """No alert takes a range of a raw per-kernel series (the cost that grew with pods x GPUs x kernels)."""
    per_kernel = [md.exposed_name(m) for m in md.ALL if "kernel" in m.labels and m is not md.PROFILER_ARTIFACTS]
    for rule in prometheus_rules():
        for name in per_kernel:
            assert f"{name}[" not in rule["expr"] and f"{name}{{" not in rule["expr"], (rule["alert"], name)


def test_window_too_short_alert_names_its_evidence() -> None:
    rule = next(r for r in prometheus_rules() if r["alert"] == "WarpwatchWindowTooShort")
    assert '"evidence", "long_kernels"' in rule["expr"] and '"evidence", "nvml_busier"' in rule["expr"]
    assert "{{ $labels.evidence }}" in rule["annotations"]["summary"]
    assert "window is too short" in (RUNBOOKS / "window-too-short.md").read_text()


def test_recording_rules_in_two_tiers_per_pod_from_raw_series_fleet_from_records() -> None:
    groups = {g["name"]: g["rules"] for g in load("warpwatch-rules.yaml")["groups"]}
    pod = {r["record"]: r["expr"] for r in groups["warpwatch-pod"]}
    fleet = {r["record"]: r["expr"] for r in groups["warpwatch-fleet"]}
    assert pod["pod_gpu:warpwatch_gpu_observed_seconds_total:rate5m"] == (
        "sum by (namespace, deployment, pod, gpu) (rate(warpwatch_gpu_observed_seconds_total[5m]))"
    )
    assert pod["pod_kernel:warpwatch_kernel_seconds_total:rate5m"] == (
        "sum by (namespace, deployment, pod, kernel) (rate(warpwatch_kernel_seconds_total[5m]))"
    )
    assert fleet["fleet:warpwatch_gpu_observed_seconds_total:rate5m"] == (
        "sum by (namespace, deployment) (pod_gpu:warpwatch_gpu_observed_seconds_total:rate5m)"
    )
    assert fleet["fleet_kernel:warpwatch_kernel_time_share:ratio_rate5m"] == (
        "fleet_kernel:warpwatch_kernel_seconds_total:rate5m\n  / on (namespace, deployment) group_left\n"
        "fleet:warpwatch_gpu_observed_seconds_total:rate5m"
    )
    for expr in fleet.values():  # the fleet tier reads records only: a global Prometheus can evaluate it
        assert not re.search(r"(?<![:\w])warpwatch_\w+", expr.replace(":warpwatch_", ":x_")), expr
    for expr in pod.values():  # the pod tier keeps pod: any shard scraping the pod can evaluate it
        assert "pod" in expr.split("(")[1]
    tests = load("warpwatch-rules.test.yaml")["tests"]
    checked = {c["expr"] for t in tests for c in t.get("promql_expr_test", [])}
    assert {f"round({r} * 1e6)" for r in fleet if ":ratio_" in r} <= checked


def test_every_rule_has_severity_summary_description_and_a_runbook() -> None:
    for rule in prometheus_rules():
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        ann = rule["annotations"]
        assert ann["summary"] and ann["description"]
        prefix = DEFAULT_SETTINGS.runbook_url_base
        assert ann["runbook_url"].startswith(prefix)
        runbook = RUNBOOKS / ann["runbook_url"].removeprefix(prefix)
        text = runbook.read_text()
        assert text.startswith(f"# {rule['alert']}\n")
        assert rule["expr"] in text
        duration_seconds(rule["for"])
    assert sorted(p.name for p in RUNBOOKS.iterdir()) == sorted(f"{a.slug}.md" for a in alerts())


def test_agent_health_alert_thresholds_follow_the_agent_config() -> None:
    """Staleness counts the agent's own exported period; the duty bound is the agent's own."""
    assert DEFAULT_SETTINGS.max_capture_duty == config.MAX_DUTY
    by_name = {r["alert"]: r["expr"] for r in prometheus_rules()}
    assert by_name["WarpwatchNoRecentWindow"] == (
        f"time() - warpwatch_last_window_timestamp_seconds\n  > {DEFAULT_SETTINGS.stale_periods:g} * "
        "warpwatch_capture_period_seconds"
    )
    assert 'outcome=~"failed|timed_out"' in by_name["WarpwatchWindowsFailing"]
    assert by_name["WarpwatchCaptureDutyHigh"] == f"warpwatch_capture_duty_ratio > {config.MAX_DUTY}"


def test_slows_serving_reads_each_agents_cost_over_its_own_budget_beyond_the_agents_tolerance() -> None:
    """The bound is the share by which the agent lets its cost rest above the budget before it takes a
    new period; the for-duration is the rounds at the agents' period; the record divides each pod's
    own cost by its own budget."""
    s = DEFAULT_SETTINGS
    assert s.overhead_tolerance == overhead.PERIOD_CHANGE
    rule = next(r for r in prometheus_rules() if r["alert"] == "WarpwatchSlowsServing")
    assert rule["expr"] == f"pod:warpwatch_overhead_budget_used:ratio > {1 + overhead.PERIOD_CHANGE:g}"
    assert duration_seconds(rule["for"]) == s.overhead_rounds * duration_seconds(s.capture_period) == 180
    pod = {
        r["record"]: r["expr"]
        for g in load("warpwatch-rules.yaml")["groups"]
        if g["name"] == "warpwatch-pod"
        for r in g["rules"]
    }
    assert pod["pod:warpwatch_overhead_budget_used:ratio"] == (
        "max by (namespace, deployment, pod) (warpwatch_overhead_ratio)\n"
        "  / max by (namespace, deployment, pod) (warpwatch_overhead_budget_ratio)"
    )
    runbook = (RUNBOOKS / "slows-serving.md").read_text()
    for remedy in (
        '"torch_profiler_with_stack": false',
        '"ignore_frontend": true',
        '"torch_profiler_activities": ["CUDA"]',
        "max_steps=",
        "--overhead-budget",
    ):
        assert remedy in runbook


@pytest.mark.slow
@needs_promtool
def test_changed_thresholds_and_selector_still_fire_and_hold(tmp_path: Path) -> None:
    """Thresholds live in Settings: the scenarios move with them, and promtool still agrees."""
    s = Settings(
        selector='job="warpwatch"',
        degraded_ratio=0.5,
        degraded_min_time_share=0.1,
        degraded_min_samples=120,
        nvml_max_difference=0.1,
        stale_periods=4,
        failing_ratio=0.3,
        short_max_kernel_ratio=0.4,
        fleet_labels="namespace,model",
        degraded_baseline_window="6h",
        max_capture_duty=0.05,
        artifact_window="1h",
        runbook_url_base="https://wiki.example/runbooks/",
        overhead_rounds=5,
        overhead_tolerance=0.2,
    )
    build(tmp_path, s)
    text = (tmp_path / "alerts" / "warpwatch-rules.yaml").read_text()
    assert 'warpwatch_capture_duty_ratio{job="warpwatch"} > 0.05' in text
    assert "https://wiki.example/runbooks/windows-failing.md" in text
    assert "pod:warpwatch_overhead_budget_used:ratio > 1.2\n    for: 5m" in text
    result = promtool("test", "rules", "warpwatch-rules.test.yaml", cwd=tmp_path / "alerts")
    assert result.returncode == 0, result.stdout + result.stderr


def test_selector_with_regex_cannot_generate_promtool_inputs() -> None:
    with pytest.raises(ConfigError, match=r"only be generated for equality matchers"):
        ruletests.promtool_tests(Settings(selector='job=~"warp.*"'), "r.yaml")
