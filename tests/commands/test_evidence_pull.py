"""`warpwatch evidence pull` against the real agent (basic auth on), and `warpwatch analyze` on what it
pulled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.agent import Agent, analyze_json, run_cli
from support.pki import HASH, PASSWORD, USER
from support.tracebuild import kernel, span, trace_doc, write
from warpwatch.commands.evidence import select
from warpwatch.evidence.store import META_SUFFIX, TRACE_SUFFIX


def test_pull_selects_the_windows_kept_since_and_passes_over_what_is_no_kept_window() -> None:
    listed = [
        {"id": "20251205T080000Z-000002", "time": 200.0},
        {"id": "20251205T070000Z-000001", "time": 100.0},
        {"id": "../../etc/passwd", "time": 300.0},
        {"id": "20251205T090000Z-000003"},
        "x",
    ]
    assert [m["id"] for m in select(listed, 100.0)] == ["20251205T070000Z-000001", "20251205T080000Z-000002"]
    assert [m["id"] for m in select(listed, 150.0)] == ["20251205T080000Z-000002"]


@pytest.mark.slow  # the agent and four command-line runs
def test_pull_copies_the_kept_traces_and_analyze_reads_them_as_they_are(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  {USER}: {HASH}\n")
    original = write(
        tmp_path / "traces" / "w.pt.trace.json",
        trace_doc([span(0, 1000), kernel("gemm", ts=100, dur=100, grid=(132 * 10, 1, 1))]),
    )
    agent = Agent(
        "--source",
        f"dir:{tmp_path / 'traces'}",
        "--evidence-dir",
        str(tmp_path / "ev"),
        "--web-config",
        str(tmp_path / "web.yml"),
        "--period",
        "300ms",
        "--window",
        "20ms",
        "--jitter",
        "0",
        "--allow-high-duty",
    )
    try:
        agent.wait_for_line("evidence_kept", 20)
        url = f"http://{USER}:{PASSWORD}@127.0.0.1:{agent.port}"
        none = run_cli("evidence", "pull", url, "--since", "0s", "-o", str(tmp_path / "none"))
        assert none.returncode == 0, none.stderr
        assert list((tmp_path / "none").iterdir()) == []
        pulled = run_cli("evidence", "pull", url, "--since", "1h", "-o", str(tmp_path / "pulled"))
        assert pulled.returncode == 0, pulled.stderr
        day = run_cli("evidence", "pull", url, "--since", "1d", "-o", str(tmp_path / "day"))  # as evidence diff takes
        assert day.returncode == 0, day.stderr
        assert sorted(p.name for p in (tmp_path / "day").iterdir()) == sorted(
            p.name for p in (tmp_path / "pulled").iterdir()
        )
        denied = run_cli("evidence", "pull", f"http://{USER}:wrong@127.0.0.1:{agent.port}", "-o", str(tmp_path / "x"))
        assert denied.returncode == 1 and "HTTP 401" in denied.stderr
    finally:
        agent.stop()
    (trace,) = (tmp_path / "pulled").glob("*" + TRACE_SUFFIX)
    meta = json.loads(trace.with_name(trace.name.replace(TRACE_SUFFIX, META_SUFFIX)).read_text())
    assert meta["reason"] == "baseline" and meta["file"] == original.name
    assert str(trace) in pulled.stdout
    assert analyze_json(trace)["kernels"] == analyze_json(original)["kernels"]
    assert analyze_json(trace)["kernels"][0]["estimated_occupancy"] == pytest.approx(40 / 64)
