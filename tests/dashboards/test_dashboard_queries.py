"""Every dashboard and alert query is valid PromQL (checked by the real promtool) over metric names
metricdefs defines, selects by the board's variables, and reads a per-window gauge only as now or
as an extreme."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support.boardkit import boards, metric_names, panels
from warpwatch.dashboards.boards import all_queries
from warpwatch.dashboards.queries import recording_rules
from warpwatch.dashboards.settings import DASHBOARD_VARIABLE_DEFAULTS, DEFAULT_SETTINGS
from warpwatch.export import metricdefs as md

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian/Ubuntu package `prometheus`; CI installs it)"
)


def series_names(m: md.MetricDef) -> set[str]:
    """The series names a query may use for a metric (a histogram's _bucket, _sum, _count)."""
    if m.type == "histogram":
        return {m.name + suffix for suffix in ("_bucket", "_sum", "_count")}
    return {md.exposed_name(m)}


ALLOWED_SERIES = set().union(*(series_names(m) for m in (*md.ALL, *md.AGENT))) | {
    r.record for r in recording_rules(DEFAULT_SETTINGS)
}
LAST_WINDOW_GAUGES = {
    md.exposed_name(m)
    for m in md.ALL
    if m.type == "gauge"
    and m.labels
    and m.labels[0] == "gpu"
    and not m.name.startswith("warpwatch_nvml_")
    and m not in (md.GPU_INFO, md.KERNEL_INFO, md.KERNEL_LAUNCH_INFO)  # info: labels read over a range
}
"""Per-window estimates: read only as "now" (or as a min / max over time, which a missing window
cannot bias upwards / downwards... see test_gauges_are_read_only_as_now_or_as_extremes)."""
RECORD_LABELS = {"pod": set(), "pod_gpu": {"gpu"}, "pod_kernel": {"kernel"}, "fleet": set(), "fleet_kernel": {"kernel"}}


def test_metric_names_finds_selected_series_only() -> None:
    expr = (
        'sum by (gpu, le) (rate(a_bucket{x=~"y|z"}[5m] offset 1h)) / on (gpu) group_left (name) '
        "b_total > bool 1e3 and time() - c"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}


def test_panel_queries_select_by_the_dashboard_variables() -> None:
    """Every selector narrows by the board's variables: raw series and per-pod records by namespace
    and pod (and gpu, kernel where the series has them), fleet records by namespace and deployment."""
    labels = {md.exposed_name(m): set(m.labels) for m in (*md.ALL, *md.AGENT)}
    labels |= {md.exposed_name(m) + "_bucket": set(m.labels) for m in (*md.ALL, *md.AGENT) if m.type == "histogram"}
    labels |= {r.record: RECORD_LABELS[r.record.split(":")[0]] for r in recording_rules(DEFAULT_SETTINGS)}
    for uid, board in boards().items():
        has_kernel_var = any(v["name"] == "kernel" for v in board["templating"]["list"])
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                selectors = re.findall(r"((?:[a-z_]+:)?warpwatch_\w+(?::\w+)?)(\{[^}]*\})?", target["expr"])
                assert selectors, target["expr"]
                for name, matchers in selectors:
                    where = f"{uid}/{panel['title']}: {name}{matchers}"
                    assert 'namespace=~"$namespace"' in matchers, where
                    if name.startswith(("fleet:", "fleet_kernel:")):
                        assert 'deployment=~"$deployment"' in matchers, where
                        continue
                    assert 'pod=~"$pod"' in matchers, where
                    per_pod = "pod_kernel:" in target["expr"]  # a pod's kernels over all its GPUs
                    assert ('gpu=~"$gpu"' in matchers) == ("gpu" in labels[name] and not per_pod), where
                    wants_kernel = has_kernel_var and "kernel" in labels[name]
                    assert ('kernel=~"$kernel"' in matchers) == wants_kernel, where


def test_every_expression_uses_only_metrics_from_metricdefs() -> None:
    used = set()
    for where, expr in all_queries():
        names = metric_names(expr)
        assert names, f"{where}: selects no metric"
        assert names <= ALLOWED_SERIES, f"{where}: unknown metric(s) {names - ALLOWED_SERIES}"
        used |= names
    # Every exported metric appears on some dashboard or in some alert.
    unused = [m.name for m in md.ALL if not used & series_names(m) and m not in md.KERNEL_GAUGES_OPT_IN]
    assert unused == []


def test_all_queries_are_plain_promql_with_unique_places() -> None:
    queries = all_queries()
    assert len({w for w, _ in queries}) == len(queries)
    for where, expr in queries:
        assert "$" not in expr, f"{where}: Grafana variable left in {expr}"
    raw = dict(all_queries(substitute=False))
    assert any("$__rate_interval" in e for e in raw.values())
    assert set(DASHBOARD_VARIABLE_DEFAULTS) >= set(re.findall(r"\$\w+", " ".join(raw.values())))


@needs_promtool
def test_every_expression_parses_with_promtool(tmp_path: Path) -> None:
    """Each expression becomes a recording rule; `promtool check rules` parses all of them."""
    rules = [{"record": f"warpwatch:check_{i}", "expr": expr} for i, (_, expr) in enumerate(all_queries())]
    path = tmp_path / "exprs.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "exprs", "rules": rules}]}))
    result = subprocess.run([str(PROMTOOL), "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_gauges_are_read_only_as_now_or_as_extremes() -> None:
    """Trends divide rates of sums. A per-window gauge averaged over time skips the windows that
    missed a kernel; it appears only in "now" tables, or as a min (reported warps) or max (longest
    kernel) over time, which no skipped window changes."""
    extremes = {
        md.exposed_name(md.KERNEL_REPORTED_WARPS_MIN): "min_over_time",
        md.exposed_name(md.GPU_LONGEST_KERNEL_RATIO): "max_over_time",
    }
    for uid, p in panels():
        for t in p.get("targets", []):
            for name in metric_names(t["expr"]) & LAST_WINDOW_GAUGES:
                where = f"{uid}/{p['title']}: {t['expr']}"
                if "Now (last window)" in p["title"]:
                    assert t["instant"] and t["expr"].startswith(name), where
                else:
                    assert t["expr"].startswith(f"{extremes[name]}({name}"), where
    for where, expr in all_queries():
        assert "avg_over_time(warpwatch_kernel" not in expr and "avg_over_time(warpwatch_gpu" not in expr, where
