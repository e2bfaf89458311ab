"""Issue 47: every board marks where an agent started (a rollout, a new version, a restart after a
gap), from `warpwatch_build_info`; the marks are checked on input series by the real promtool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support.boardkit import boards
from warpwatch.dashboards.boards import dashboards
from warpwatch.dashboards.panels import AGENT_STARTS, agent_starts, substitute_variables
from warpwatch.dashboards.settings import DEFAULT_SETTINGS, Settings
from warpwatch.export import metricdefs as md

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian/Ubuntu package `prometheus`; CI installs it)"
)
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def test_every_board_marks_agent_starts_for_its_variables() -> None:
    for uid, board in boards().items():
        by_name = {a["name"]: a for a in board["annotations"]["list"]}
        starts = by_name[AGENT_STARTS]
        assert starts["enable"] and not starts["hide"], uid
        assert starts["datasource"] == DATASOURCE, uid
        expr = starts["expr"]
        assert f"{md.exposed_name(md.BUILD_INFO)}{{" in expr and "offset $__interval" in expr, uid
        assert 'namespace=~"$namespace"' in expr, uid
        pod_board = any(v["name"] == "pod" for v in board["templating"]["list"])
        assert ('pod=~"$pod"' in expr) == pod_board, uid
        assert ('deployment=~"$deployment"' in expr) == (not pod_board), uid
        assert "{{version}}" in starts["textFormat"] and starts["titleFormat"].startswith("warpwatch started: "), uid


def test_agent_starts_count_per_cluster_where_there_are_several() -> None:
    s = Settings(cluster_label="cluster")
    for dash in dashboards(s):
        assert agent_starts(s, dash).expr.startswith("count by (cluster, "), dash.uid


def series(pod: str, values: str, deployment: str = "llm", version: str = "1.0") -> dict[str, str]:
    labels = f'namespace="ml", deployment="{deployment}", pod="{pod}", version="{version}", job="warpwatch"'
    return {"series": f"{md.exposed_name(md.BUILD_INFO)}{{{labels}}}", "values": values}


def expect(at: str, expr: str, samples: dict[str, int]) -> dict[str, object]:
    return {
        "expr": expr,
        "eval_time": at,
        "exp_samples": [{"labels": labels, "value": value} for labels, value in samples.items()],
    }


@needs_promtool
def test_a_start_is_marked_once_and_a_running_agent_never(tmp_path: Path) -> None:
    """Scrapes each minute; `$__interval` is 2m once substituted. Pod `a` runs throughout; `b` and
    `b2` (a rollout of version 2.0) appear at 10m; `c` is gone (stale) from 5m to 8m and back at 9m.
    Grafana draws a mark where the value is above 0: each start once, at its first step."""
    boards_by_uid = {d.uid: d for d in dashboards()}
    per_pod = substitute_variables(agent_starts(DEFAULT_SETTINGS, boards_by_uid["warpwatch-overview"]).expr)
    fleet = substitute_variables(agent_starts(DEFAULT_SETTINGS, boards_by_uid["warpwatch-fleet"]).expr)
    pod = '{{namespace="ml", pod="{}", version="{}"}}'.format
    deployment = '{{namespace="ml", deployment="{}", version="{}"}}'.format
    test = {
        "interval": "1m",
        "input_series": [
            series("a", "1x20"),
            series("b", "_x10 1x9", "llm-v2", "2.0"),
            series("b2", "_x10 1x9", "llm-v2", "2.0"),
            series("c", "1x4 stale _x3 1x10"),
        ],
        "promql_expr_test": [
            expect("4m", per_pod, {pod("a", "1.0"): 0, pod("c", "1.0"): 0}),
            expect("9m", per_pod, {pod("a", "1.0"): 0, pod("c", "1.0"): 1}),
            expect("10m", per_pod, {pod("a", "1.0"): 0, pod("b", "2.0"): 1, pod("b2", "2.0"): 1, pod("c", "1.0"): 1}),
            expect("12m", per_pod, {pod("a", "1.0"): 0, pod("b", "2.0"): 0, pod("b2", "2.0"): 0, pod("c", "1.0"): 0}),
            expect("10m", fleet, {deployment("llm", "1.0"): 1, deployment("llm-v2", "2.0"): 2}),
            expect("12m", fleet, {deployment("llm", "1.0"): 0, deployment("llm-v2", "2.0"): 0}),
        ],
    }
    path = tmp_path / "starts.test.yaml"
    path.write_text(yaml.safe_dump({"evaluation_interval": "1m", "tests": [test]}))
    result = subprocess.run([str(PROMTOOL), "test", "rules", path.name], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
