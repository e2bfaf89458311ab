"""Every PromQL expression of every dashboard panel, template variable and alert, evaluated by a real
Prometheus scraping a real agent that replays real traces plus a trace with every artefact kind.

Each expression must evaluate without error; every panel and variable must return data, except the
NVML panels (no NVIDIA driver on these machines: their series do not exist; listed below). Alerts
must evaluate; the artefact alert must fire on the artefact trace. Sources: the alexnet trace from
HolisticTraceAnalysis (MIT), see ../shared/traces/SOURCES.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.agent import ALEXNET, Agent
from support.prometheus import PROMETHEUS, query, wait_query
from support.prometheus import prometheus as running_prometheus
from support.tracebuild import H100, kernel, span, trace_doc, write
from warpwatch.dashboards import Settings, all_queries, rules
from warpwatch.dashboards.queries import OVERHEAD_BUDGET_USED
from warpwatch.model import ARTIFACT_KINDS

pytestmark = pytest.mark.slow  # a real agent and Prometheus for the whole module

NO_DRIVER_EMPTY = ("warpwatch_nvml_sm_occupancy_ratio", "warpwatch_nvml_gpu_utilization_ratio")
"""Series that only exist where NVML answers: without a driver their panels are legitimately empty."""
NO_COST_EMPTY = ("warpwatch_capture_stop_seconds", "warpwatch_served_slowdown_ratio", "warpwatch_overhead_ratio")
"""Series that only exist where a source measures what a window costs its server (vllm:, sglang:): the
replay source measures nothing, so their panels and the record over them are legitimately empty."""


def artifact_traces(folder: Path) -> None:
    """One trace per artefact rule of kineto-facts.md, built with Kineto's own arithmetic."""
    sm_minus_one = kernel("pt18_kernel", ts=20, dur=5, grid=(50, 1, 1), block=(256, 1, 1), sms=None)
    sm_minus_one["args"]["warps per SM"] = -(50 * 256 / 32)
    write(
        folder / "a_artifacts.json",
        trace_doc(
            [
                span(0, 1000),
                kernel("huge_grid", ts=10, dur=5, grid=(65536, 32768, 1), block=(128, 1, 1)),
                sm_minus_one,
                kernel("sentinel", ts=30, dur=5, grid=(264, 1, 1), block=(256, 1, 1), occupancy=-100),
                kernel("big_smem", ts=40, dur=5, grid=(132, 1, 1), block=(128, 1, 1), regs=128, smem=99 * 1024),
                kernel("odd_block", ts=50, dur=5, grid=(132, 1, 1), block=(48, 1, 1)),
                kernel("graph_replay", ts=60, dur=5, grid=None, block=None),
            ]
        ),
    )
    inf = kernel("no_props", ts=10, dur=5, grid=(10, 1, 1), block=(128, 1, 1), sms=None)
    inf["args"].update({"blocks per SM": "inf", "warps per SM": "inf", "est. achieved occupancy %": 0})
    write(folder / "b_inf.json", trace_doc([span(0, 1000), inf], devices=[]))
    # AMD, no runtime event naming the HIP call, grid a multiple of the block: grid_units_unknown.
    amd = {**H100, "id": 1, "name": "AMD Instinct MI300X", "warpSize": 64, "numSms": 304}
    write(
        folder / "b_amd.json",
        trace_doc(
            [
                span(0, 1000),
                kernel("Cijk_gemm", ts=10, dur=5, grid=(4096, 1, 1), block=(256, 1, 1), device=1, sms=None),
            ],
            devices=[amd],
        ),
    )
    (folder / "c_broken.json").write_bytes(b'{"traceEvents": [')  # a failed window, so faults exist


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus); CI installs it")
    folder = tmp_path_factory.mktemp("replay")
    artifact_traces(folder)
    (folder / "d_alexnet.json.gz").write_bytes(ALEXNET.read_bytes())
    assert H100["numSms"] == 132
    agent = Agent(
        "--source",
        f"replay:{folder}",
        "--period",
        "0.5s",
        "--window",
        "10ms",
        "--jitter",
        "0",
        "--allow-high-duty",
        "--top-kernels",
        "3",
    )
    tmp = tmp_path_factory.mktemp("prometheus")
    # The generated alert and recording rules, evaluated every second (the recording expressions
    # read the series the recording rules write).
    (tmp / "rules.yaml").write_text(rules.dump_yaml(rules.rules_file(Settings(rule_interval="1s"))))
    scrape = (
        "  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: warpwatch\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{agent.port}']\n"
    )
    try:
        with running_prometheus(tmp / "data", scrape, [tmp / "rules.yaml"], evaluation_interval="1s") as (url, _):
            assert wait_query(url, 'up{job="warpwatch"} == 1', timeout=30), "the agent was never scraped"
            # every replayed file (4, one per round) seen in several scrapes, so rates have two points
            assert wait_query(url, 'warpwatch_windows_total{outcome="failed"} > 1', timeout=40)
            assert wait_query(url, 'warpwatch_windows_total{outcome="ok"} > 6', timeout=40)
            time.sleep(3)
            yield url
    finally:
        agent.stop()


QUERIES = all_queries()


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[w for w, _ in QUERIES])
def test_every_dashboard_and_alert_expression_evaluates_on_a_live_agent(live: str, where: str, expr: str) -> None:
    result = query(live, expr)  # raises unless Prometheus answers status=success
    if where.startswith("alert:"):
        return  # evaluated without error; which alerts fire is checked below and in promtool tests
    if any(name in expr for name in NO_DRIVER_EMPTY):  # each NVML query names only NVML series
        assert result == []
        return
    if any(name in expr for name in NO_COST_EMPTY) or OVERHEAD_BUDGET_USED in expr:
        assert result == []
        return
    if not result:
        result = wait_query(live, expr, timeout=10)
    assert result, f"{where} returned no data: {expr}"


def test_every_artifact_kind_reaches_prometheus(live: str) -> None:
    kinds = {r["metric"]["artifact"] for r in wait_query(live, "warpwatch_profiler_artifacts_total > 0")}
    assert kinds == set(ARTIFACT_KINDS)


def test_the_artifact_alert_fires_for_the_kinds_it_watches(live: str) -> None:
    alert_expr = dict(QUERIES)["alert:WarpwatchProfilerArtifacts"]
    fired = {r["metric"]["artifact"] for r in wait_query(live, alert_expr)}
    assert fired == {"negative_warps_per_sm", "non_finite", "occupancy_sentinel", "grid_overflow", "sm_count_invalid"}
