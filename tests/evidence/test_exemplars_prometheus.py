"""From Prometheus to the trace: the real agent keeps a degraded window, its id rides as an exemplar on
the per-GPU counters that window fed, the real Prometheus (exemplar storage on) stores it, and the file
the id names, analysed by `warpwatch analyze`, shows the drop that made it kept.

Occupancy by hand (H100: 132 SMs, 64 warps per SM, 4 register partitions of 16,384; 128-thread
blocks: 4 warps): with 32 registers per thread 16 blocks fit on an SM (limited by warps), with 48 a
warp takes 1,536 registers, 10 fit in a partition, 40 warps, 10 blocks: theoretical occupancy 1.0,
then 0.625, below 0.7 (the alerts' `degraded_ratio`) times its level 1.0. The keep rule judges what
the code decides (issue 45): the registers change, the grid (4 full waves) does not."""

from __future__ import annotations

import gzip
import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from support.agent import Agent, analyze_json, ok_windows
from support.patience import hang_guard
from support.prometheus import PROMETHEUS, prometheus
from support.tracebuild import kernel, span, trace_doc, write
from warpwatch.export import metricdefs as md


def exemplars(url: str, metric: str) -> list[dict[str, Any]]:
    now = time.time()
    args = urllib.parse.urlencode({"query": metric, "start": now - 600, "end": now + 60})
    with urllib.request.urlopen(f"{url}/api/v1/query_exemplars?{args}", timeout=5) as resp:
        doc = json.load(resp)
    assert doc["status"] == "success", doc
    return [dict(e, series=s["seriesLabels"]) for s in doc["data"] for e in s["exemplars"]]


def listed(agent: Agent) -> dict[str, dict[str, Any]]:
    """The agent's kept windows by id: an id rides as an exemplar from the moment its window is handed
    to the evidence worker, and is listed once its trace is written."""
    status, _, body = agent.get("/evidence")
    assert status == 200
    return {m["id"]: m for m in json.loads(body)}


@pytest.mark.slow  # a real Prometheus and agent over several scrapes
def test_an_exemplar_resolves_to_the_kept_trace_that_shows_the_drop(tmp_path: Path) -> None:
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed (apt-get install prometheus); CI installs it")
    traces = tmp_path / "traces"
    traces.mkdir()
    agent = Agent(
        "--source",
        f"dir:{traces}",
        "--evidence-dir",
        str(tmp_path / "ev"),
        "--period",
        "300ms",
        "--window",
        "20ms",
        "--jitter",
        "0",
        "--allow-high-duty",
    )
    scrape = (
        "  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: warpwatch\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{agent.port}']\n"
    )
    try:
        with prometheus(tmp_path / "data", scrape, flags=["--enable-feature=exemplar-storage"]) as (url, _):
            for i, regs in enumerate((32, 32, 32, 48)):
                gemm = kernel("gemm", ts=100, dur=100, grid=(132 * 16 * 4, 1, 1), regs=regs)
                write(traces / f"w{i}.pt.trace.json", trace_doc([span(0, 1000), gemm]))
                agent.wait_for(lambda s, n=i + 1: ok_windows(s) == n)
            metric = md.exposed_name(md.GPU_BUSY_SECONDS)
            deadline = time.monotonic() + hang_guard()
            while True:  # until Prometheus has scraped the degraded window's exemplar
                found = {e["labels"]["evidence_id"] for e in exemplars(url, metric)}
                kept = listed(agent)
                reasons = {kid: kept[kid]["reason"] for kid in found if kid in kept}
                if "degraded" in reasons.values() or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert set(reasons.values()) <= {"baseline", "degraded"} and "degraded" in reasons.values(), reasons
            (degraded,) = [kid for kid, reason in reasons.items() if reason == "degraded"]
            status, _, body = agent.get(f"/evidence/{degraded}")
            assert status == 200
            pulled = tmp_path / f"{degraded}.trace.json.gz"
            pulled.write_bytes(body)
            assert gzip.decompress(body) == (traces / "w3.pt.trace.json").read_bytes()
            (gemm,) = analyze_json(pulled)["kernels"]
            assert gemm["theoretical_occupancy"] == pytest.approx(40 / 64)
            assert gemm["launch_resources"]["registers_per_thread"] == 48
    finally:
        agent.stop()
