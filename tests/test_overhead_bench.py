"""Issue 32: benchmarks/overhead.py runs end to end at a tiny size (one round of short arms, no agent
and the agent at 1 s every 10 s on the real vLLM with the recommended server config and a
non-streaming client (issue 46), and the kineto-daemon section) and writes a
well-formed table and JSON. No figure is asserted: they are timings on a shared machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.vllmreal import vllm_python

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(900)
def test_overhead_benchmark_runs_and_writes_its_tables(tmp_path: Path) -> None:
    vllm_python()  # skips (fails under CI=true) without vLLM
    out = tmp_path / "overhead.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "overhead.py"),
            "--rounds",
            "1",
            "--arm-seconds",
            "20",
            "--daemon-seconds",
            "12",
            "--arms",
            "lean-none",
            "lean-nostream",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=880,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert [a["arm"] for a in doc["vllm_arms"]] == ["lean-none", "lean-nostream"]
    assert [a["arm"] for a in doc["daemon_arms"]] == ["none", "agent"]
    for arm in doc["vllm_arms"]:
        served = arm["served"]
        assert served["tokens"] > 0 and served["errors"] == 0, (arm["arm"], served["error_kinds"], done.stderr[-2000:])
    assert "timeline_arms" in doc and all("timeline" in r for r in doc["vllm_rounds"])
    duty10 = doc["vllm_arms"][1]
    assert duty10["served"]["windows"] >= 1 and duty10["agent"]["tracebacks"] == 0, duty10
    assert doc["daemon_arms"][0]["steps"]["steps"] > 0
    assert doc["machine"]["nproc"] >= 1
    headings = (
        "| arm | rounds | windows | tokens/s",
        "| arm | windows | between window starts",
        "| arm | agent: period",
        "| arm | rounds | windows | steps/s",
    )
    assert all(h in done.stdout for h in headings), done.stdout
