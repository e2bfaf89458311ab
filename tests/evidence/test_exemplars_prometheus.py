"""From Prometheus to the trace: the real agent keeps a degraded window, its id rides as an exemplar on
the per-GPU counters that window fed, the real Prometheus (exemplar storage on) stores it, and the file
the id names, analysed by `warpwatch analyze`, shows the drop that made it kept.

Occupancy by hand (H100: 132 SMs, 64 warps per SM; 128-thread blocks of 32 registers: 4 warps, 16
blocks fit on an SM): `gemm` on 132*b blocks runs at 4*b/64: 1.0 for b=16, 0.625 for b=10, below
0.7 (the alerts' `degraded_ratio`) times its level 1.0."""

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
            for i, blocks in enumerate((16, 16, 16, 10)):
                write(
                    traces / f"w{i}.pt.trace.json",
                    trace_doc([span(0, 1000), kernel("gemm", ts=100, dur=100, grid=(132 * blocks, 1, 1))]),
                )
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
            assert gemm["estimated_occupancy"] == pytest.approx(40 / 64)
            assert gemm["estimated_occupancy"] < 0.7 * 1.0
    finally:
        agent.stop()
