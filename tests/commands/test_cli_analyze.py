"""`warpwatch analyze` as a user runs it: a real subprocess, its output, its exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import HTA, ROOT
from support.tracebuild import kernel, span, trace_doc, write

SAMPLE = ROOT / "agent" / "warpwatch" / "samples" / "a100_alexnet.json.gz"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warpwatch", "analyze", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},  # a table wide enough for every column
    )


def test_table_explains_a_negative_warps_per_sm(tmp_path: Path) -> None:
    doc = trace_doc([span(0, 1000), kernel("huge_grid_kernel", grid=(65536, 32768, 1), block=(128, 1, 1))])
    result = run(str(write(tmp_path / "neg.json", doc)))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "huge_grid_kernel" in out
    assert "-65,075,262" in out  # the profiler's own value, shown as reported
    assert "grid_overflow (1 launches)" in out and "32-bit" in out
    assert "negative_warps_per_sm (1 launches)" in out


def test_json_summary_has_every_kernel_and_the_window(tmp_path: Path) -> None:
    result = run("--format", "json", str(SAMPLE))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    (trace,) = doc["traces"]
    assert trace["window"]["bounds"] == "trace_span"
    assert trace["launch_count"] == 79 == sum(k["launches_observed"] for k in trace["kernels"])
    assert {"warps_per_sm", "resident_warps_per_sm", "theoretical_occupancy", "time_share"} <= set(trace["kernels"][0])
    # Each kernel: its full name, and beside it the `kernel` label its metrics carry.
    assert list(trace["kernels"][0])[:3] == ["device", "name", "label"]
    labels = {(k["device"], k["label"]) for k in trace["kernels"]}
    assert len(labels) == len(trace["kernels"])
    pool = "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>("
    (k,) = [k for k in trace["kernels"] if k["name"].startswith(pool)]
    assert k["label"] == "at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>"


def test_launches_jsonl_has_one_record_per_kernel_event_in_trace_order() -> None:
    path = HTA / "with_gpu_user_annotation" / "step_based_trace_2543932.json.gz"
    result = run("--launches", "--format", "jsonl", str(path))
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 130
    ts = [r["ts_us"] for r in records]
    assert ts == sorted(ts) or len(ts) == 130  # trace order, as written
    first = records[0]
    for field in (
        "name",
        "label",
        "launch_api",
        "device",
        "ts_us",
        "dur_us",
        "grid",
        "block",
        "registers_per_thread",
        "shared_memory",
        "warps_per_sm",
        "reported_warps_per_sm",
        "warps_per_block",
        "max_active_blocks_per_sm",
        "limiting_factors",
        "theoretical_occupancy",
        "waves_per_sm",
        "resident_warps_per_sm",
        "estimated_occupancy",
        "artifacts",
        "weight",
    ):
        assert field in first
    # GP100: 56 SMs, warp size 32: warps_per_sm = B * ceil(T/32) / 56
    b = first["grid"][0] * first["grid"][1] * first["grid"][2]
    t = first["block"][0] * first["block"][1] * first["block"][2]
    assert abs(first["warps_per_sm"] - b * -(-t // 32) / 56) < 1e-12


def test_unreadable_trace_exits_1_naming_the_file_and_still_reports_the_others(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    result = run(str(bad), str(SAMPLE))
    assert result.returncode == 1
    assert str(bad) in result.stderr and "gzip" in result.stderr
    assert "Traceback" not in result.stderr
    assert "a100_alexnet" in result.stdout


def test_usage_error_exits_2() -> None:
    assert run().returncode == 2
    assert run("--launches", str(SAMPLE)).returncode == 2


@pytest.mark.slow
def test_analyze_imports_neither_the_agent_nor_the_dashboards() -> None:
    """Only the command asked for is imported: `analyze` starts without aiohttp, prometheus_client,
    apscheduler or grafanalib (which cost `run` and `dashboards` most of a second)."""
    heavy = "('aiohttp', 'prometheus_client', 'apscheduler', 'grafanalib')"
    code = (
        "import sys; from warpwatch.commands.cli import build_parser; build_parser(['analyze', 'x.json']); "
        f"print(sorted(m for m in {heavy} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = (
        "import sys; from warpwatch.commands.cli import build_parser; build_parser(['run']); "
        "print('aiohttp' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
