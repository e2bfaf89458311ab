"""Issue 47 on a real Prometheus: with `cluster_label` set (and kept by the recording rules through
`fleet_labels`), picking the agent's cluster leaves every dashboard, variable and annotation query
its answer, and picking another cluster empties every one of them: the `cluster` matcher narrows
every query. A real agent replays the alexnet trace from HolisticTraceAnalysis (MIT; see
../shared/traces/SOURCES.md); the scrape attaches `cluster="east"` to it.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import ALEXNET, Agent
from support.prometheus import PROMETHEUS, wait_query
from support.prometheus import prometheus as running_prometheus
from warpwatch.dashboards import Settings, all_queries, rules
from warpwatch.dashboards.settings import DASHBOARD_VARIABLE_DEFAULTS

pytestmark = pytest.mark.slow  # a real agent and Prometheus for the whole module

EMPTY_HERE = (
    "warpwatch_nvml_",  # no NVIDIA driver on these machines
    "warpwatch_capture_stop_seconds",  # the replay source measures no cost to a server
    "warpwatch_served_slowdown_ratio",
    "warpwatch_overhead_ratio",
    "pod:warpwatch_overhead_budget_used:ratio",
    "warpwatch_errors_total",  # the alexnet trace replays without a fault
)
"""Series these queries read that do not exist here: their answers are empty in every cluster."""
SETTINGS = Settings(cluster_label="cluster", fleet_labels="cluster,namespace,deployment", rule_interval="1s")
BOARD_QUERIES = [
    (w, e) for w, e in all_queries(SETTINGS, substitute=False) if not w.startswith(("alert:", "recording:"))
]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus); CI installs it")
    folder = tmp_path_factory.mktemp("replay")
    (folder / "alexnet.json.gz").write_bytes(ALEXNET.read_bytes())
    agent = Agent(
        "--source", f"replay:{folder}", "--period", "0.5s", "--window", "10ms", "--jitter", "0", "--allow-high-duty"
    )
    tmp = tmp_path_factory.mktemp("prometheus")
    (tmp / "rules.yaml").write_text(rules.dump_yaml(rules.rules_file(SETTINGS)))
    scrape = (
        "  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: warpwatch\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{agent.port}']\n"
        "        labels: {cluster: east}\n"
    )
    try:
        with running_prometheus(tmp / "data", scrape, [tmp / "rules.yaml"], evaluation_interval="1s") as (url, _):
            assert wait_query(url, 'warpwatch_windows_total{cluster="east", outcome="ok"} > 6', timeout=40)
            # the fleet tier reads the pod tier: both have been evaluated a few times
            assert wait_query(url, 'fleet:warpwatch_gpu_busy:ratio_rate5m{cluster="east"}', timeout=60)
            time.sleep(3)
            yield url
    finally:
        agent.stop()


def answer(url: str, expr: str, at: float) -> list[dict[str, Any]]:
    """The instant query `expr` at Unix time `at` (one instant for the queries compared)."""
    params = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=5) as resp:
        doc = json.load(resp)
    assert doc["status"] == "success", doc
    result: list[dict[str, Any]] = doc["data"]["result"]
    return sorted(result, key=lambda r: json.dumps(r["metric"], sort_keys=True))


def substituted(expr: str, cluster: str) -> str:
    for name in sorted(DASHBOARD_VARIABLE_DEFAULTS, key=len, reverse=True):
        expr = expr.replace(name, cluster if name == "$cluster" else DASHBOARD_VARIABLE_DEFAULTS[name])
    return expr


@pytest.mark.parametrize(("where", "expr"), BOARD_QUERIES, ids=[w for w, _ in BOARD_QUERIES])
def test_the_cluster_variable_narrows_every_board_query(live: str, where: str, expr: str) -> None:
    assert "$cluster" in expr or where.endswith("/cluster"), f"{where} ignores the cluster variable: {expr}"
    at = time.time() - 1
    everything = answer(live, substituted(expr, ".*"), at)
    assert everything or any(name in expr for name in EMPTY_HERE), f"{where} returned no data"
    assert answer(live, substituted(expr, "east"), at) == everything, where
    assert answer(live, substituted(expr, "west"), at) == [] or where.endswith("/cluster"), where
