"""`warpwatch run` end to end: the agent as a real subprocess, scraped over HTTP.

Real traces from ../shared/traces/ go through `replay:` and `dir:`; the exported values must
equal what `warpwatch analyze --format json` computes for the same file. Bad files dropped into
a watched folder each fail one window while the last good snapshot keeps being served. The
second half drives `Service` in-process, with stand-in sources, for what a subprocess cannot
show cheaply (a source that raises or hangs, readiness over time).

The helpers at the top (`Agent`, `run_cli`, `sample`) are shared with test_prometheus.py.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.agent import (
    ALEXNET,
    CONTROL,
    DEVICE_FIELDS,
    FAST,
    KERNEL_FIELDS,
    Agent,
    analyze_json,
    assert_matches_analysis,
    gunzip_if,
    ok_windows,
    parse,
    run_cli,
    sample,
    series,
)
from warpwatch import __version__
from warpwatch.export import metricdefs as md
from warpwatch.service.agent import Service


def value(svc: Service, m: md.MetricDef, **labels: str) -> float | None:
    """A sample of the service's /metrics, as a scrape reads it."""
    return sample(parse(svc.render("text/plain")[0].decode()), md.exposed_name(m), **labels)


# ============================================================================================= tests


@pytest.fixture(scope="module")
def replay_agent() -> Iterator[Agent]:
    agent = Agent("--source", f"replay:{ALEXNET}", *FAST)
    try:
        yield agent
    finally:
        agent.stop()


@pytest.mark.slow
def test_replayed_windows_export_the_numbers_of_warpwatch_analyze(replay_agent: Agent) -> None:
    """alexnet (A100, 108 SMs): 16 kernels, one process, rank 0."""
    doc = analyze_json(ALEXNET)
    samples = replay_agent.wait_for(lambda s: ok_windows(s) >= 2)
    assert_matches_analysis(samples, doc)
    assert sample(samples, "warpwatch_capture_duty_ratio") == 0.05
    assert sample(samples, "warpwatch_kernels_folded_total", gpu=0) == 0.0
    assert sample(samples, "warpwatch_build_info", version=__version__) == 1.0
    assert sample(samples, "warpwatch_window_processing_seconds_count") == ok_windows(samples)


@pytest.mark.slow
def test_counters_grow_across_replayed_windows(replay_agent: Agent) -> None:
    first = replay_agent.wait_for(lambda s: ok_windows(s) >= 1)
    n = ok_windows(first)
    later = replay_agent.wait_for(lambda s: ok_windows(s) >= n + 1)
    name = md.exposed_name(md.KERNEL_LAUNCHES_OBSERVED)
    for labels, before in series(first, name).items():
        assert dict(series(later, name))[labels] >= before


def test_without_a_driver_nvml_is_reported_down_in_one_log_line(replay_agent: Agent) -> None:
    samples = replay_agent.scrape()
    assert sample(samples, "warpwatch_nvml_up") == 0.0
    assert not series(samples, "warpwatch_nvml_gpu_utilization_ratio")
    assert len([line for line in replay_agent.lines if "event=nvml_unavailable" in line]) == 1


def test_health_readiness_and_content_negotiation(replay_agent: Agent) -> None:
    assert replay_agent.get("/healthz")[0::2] == (200, b"ok\n")
    status, _, body = replay_agent.get("/readyz")
    assert status == 200, body
    assert replay_agent.get("/nope")[0] == 404
    status, headers, body = replay_agent.get(
        "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"}
    )
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    text = gunzip_if(headers, body).decode()
    assert text.endswith("# EOF\n")
    assert 'warpwatch_windows_total{outcome="ok"}' in text
    status, headers, _ = replay_agent.get("/metrics")
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "Content-Encoding" not in headers


def test_one_log_line_per_window(replay_agent: Agent) -> None:
    replay_agent.wait_for(lambda s: ok_windows(s) >= 1)
    window_lines = [line for line in replay_agent.lines if " event=window " in line]
    assert window_lines
    line = window_lines[0]
    assert re.search(
        r"outcome=ok seconds=[0-9.]+ launches=79 kernels=16 gpus=0 window_ms=[0-9.]+ "
        r"bounds=trace_span rank=0$",
        line,
    ), line


@pytest.mark.slow
def test_bad_files_in_a_folder_each_fail_one_window_and_the_last_snapshot_stays(tmp_path: Path) -> None:
    """control.json.gz (trace_diff) first; then garbage, a truncated gzip and an empty file."""
    folder = tmp_path / "traces"
    folder.mkdir()
    doc = analyze_json(CONTROL)
    agent = Agent(
        "--source",
        f"dir:{folder}",
        "--period",
        "500ms",
        "--window",
        "50ms",
        "--jitter",
        "0",
        "--allow-high-duty",
        "--collect-timeout",
        "1s",
        "--log-format",
        "json",
    )
    try:
        shutil.copy(CONTROL, folder / "host_7.1700000000000000000.pt.trace.json.gz")
        good = agent.wait_for(lambda s: ok_windows(s) == 1)
        assert_matches_analysis(good, doc)

        (folder / "garbage.json").write_bytes(b"\x00\x01\x02 this is not a trace")
        (folder / "truncated.json.gz").write_bytes(CONTROL.read_bytes()[:4096])
        (folder / "empty.json").write_bytes(b"")
        after = agent.wait_for(lambda s: sample(s, "warpwatch_windows_total", outcome="failed") == 3)
        assert ok_windows(after) == 1
        gauges = [m.name for m in (*KERNEL_FIELDS, *DEVICE_FIELDS)]
        for name in gauges:
            assert series(after, name) == series(good, name), name

        time.sleep(1.0)  # a few more rounds: nothing is processed twice
        again = agent.scrape()
        assert sample(again, "warpwatch_windows_total", outcome="failed") == 3
        assert ok_windows(again) == 1
    finally:
        rc, _ = agent.stop()
    assert rc == 0
    records = [json.loads(line) for line in agent.lines]  # every line is one JSON object
    failed = {r["file"]: r["error"] for r in records if r["event"] == "window" and r["outcome"] == "failed"}
    assert failed.keys() == {"garbage.json", "truncated.json.gz", "empty.json"}
    assert failed["empty.json"] == "empty file"
    assert "truncated" in failed["truncated.json.gz"]
    assert not any("Traceback" in line for line in agent.lines)


@pytest.mark.slow
def test_sigterm_stops_the_agent_within_the_window_plus_five_seconds_with_status_0(tmp_path: Path) -> None:
    """Nothing to wait for (an empty folder: each capture returns at once): SIGTERM stops the agent
    with status 0 and nothing abandoned. The window is 90 s: a stop that waited for a window would
    take over a minute."""
    agent = Agent("--source", f"dir:{tmp_path}", "--period", "900s", "--window", "90s", "--jitter", "0")
    agent.wait_for_line("event=source_started", 10)
    rc, seconds = agent.stop()
    assert rc == 0
    assert seconds < 60  # a hang guard (`patience`), and well below the 90 s window
    events = [e for x in agent.lines for e in ("signal", "stopping", "stopped") if f"event={e} " in x + " "]
    assert events == ["signal", "stopping", "stopped"]
    assert not any("event=window_abandoned" in line for line in agent.lines)  # any round ended within window + 5 s


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--source", "dir:/x", "--window", "10s"),
            "warpwatch: error: --window 10s: 10s per 60s period is a capture duty of 17%, above 10%; shorten the "
            "window, lengthen the period, or pass --allow-high-duty",
        ),
        (("--source", "nfs:/x"), "warpwatch: error: --source nfs:/x: unknown kind of source"),
        ((), "warpwatch: error: source: no source given; add one, e.g. --source dir:/var/run/traces"),
    ],
)
@pytest.mark.slow
def test_bad_settings_exit_2_with_one_line(args: tuple[str, ...], message: str) -> None:
    result = run_cli("run", *args, timeout=30)
    assert result.returncode == 2  # a bad value (cli.EXIT_USAGE)
    assert result.stderr.splitlines()[-1].startswith(message)
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("run", "--source", f"dir:{tmp_path}", "--address", "127.0.0.1", "--port", str(port))
    assert result.returncode == 1
    assert (
        f"warpwatch: error: cannot listen on 127.0.0.1:{port}: Address already in use; choose another" in result.stderr
    )


@pytest.mark.slow
def test_web_config_basic_auth_protects_the_real_agent(tmp_path: Path) -> None:
    """The agent started with --web-config (exporter-toolkit format, bcrypt hash) refuses scrapes
    without the password and serves them with it; the password and the hash never reach the log."""
    import base64

    import bcrypt

    password = "s3cret-pass"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    agent = Agent(
        "--source",
        "replay:@samples",
        "--period",
        "1s",
        "--window",
        "10ms",
        "--jitter",
        "0s",
        "--allow-high-duty",
        "--web-config",
        str(cfg),
    )
    try:
        status, headers, _ = agent.get("/metrics")
        assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Basic")
        token = base64.b64encode(f"prometheus:{password}".encode()).decode()
        status, _, _ = agent.get("/metrics", {"Authorization": "Basic " + token})
        assert status == 200
        wrong = base64.b64encode(b"prometheus:nope").decode()
        assert agent.get("/metrics", {"Authorization": "Basic " + wrong})[0] == 401
    finally:
        agent.stop()
    log = "\n".join(agent.lines)
    assert password not in log and hashed not in log
