"""A real Prometheus scrapes the agent; PromQL over its HTTP API returns the expected series.

Prometheus (Debian package `prometheus`, /usr/bin/prometheus) runs on loopback with a temporary
config and storage. It negotiates OpenMetrics with the agent, so this also checks that the
OpenMetrics exposition is accepted by Prometheus's own parser.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.agent import ALEXNET, Agent, analyze_json
from support.prometheus import PROMETHEUS, query, wait_query
from support.prometheus import prometheus as running_prometheus
from warpwatch.names.labels import KernelNamer


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Agent]]:
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus); CI installs it")
    agent = Agent(
        "--source", f"replay:{ALEXNET}", "--period", "1s", "--window", "50ms", "--jitter", "0", "--allow-high-duty"
    )
    tmp = tmp_path_factory.mktemp("prometheus")
    scrape = (
        "  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: warpwatch\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{agent.port}']\n"
    )
    try:
        with running_prometheus(tmp / "data", scrape) as (url, _):
            yield url, agent
    finally:
        agent.stop()


@pytest.mark.slow
def test_prometheus_scrapes_the_agent_and_promql_returns_the_kernel_series(prometheus: tuple[str, Agent]) -> None:
    url, _ = prometheus
    assert wait_query(url, 'up{job="warpwatch"} == 1'), "the target never came up"
    doc = analyze_json(ALEXNET)
    top = doc["kernels"][0]
    label = KernelNamer()(top["name"])
    result = wait_query(url, f'warpwatch_kernel_time_share_ratio{{gpu="0",kernel="{label}"}}')
    assert len(result) == 1
    assert float(result[0]["value"][1]) == pytest.approx(top["time_share"], rel=1e-12)
    assert result[0]["metric"]["job"] == "warpwatch"

    count = wait_query(url, "count(warpwatch_kernel_warps_per_sm)")
    assert int(float(count[0]["value"][1])) == len(doc["kernels"])
    ok = wait_query(url, 'warpwatch_windows_total{outcome="ok"} > 0')
    assert ok
    info = query(url, "warpwatch_gpu_info")
    assert [(r["metric"]["name"], r["metric"]["sms"]) for r in info] == [("NVIDIA A100-PG509-200", "108")]
    assert wait_query(url, "rate(warpwatch_kernel_launches_observed_total[5s]) > 0", timeout=10)
    nvml = query(url, "warpwatch_nvml_up")
    assert [float(r["value"][1]) for r in nvml] == [0.0]
    hist = query(url, "warpwatch_window_processing_seconds_count")
    assert float(hist[0]["value"][1]) >= 1
