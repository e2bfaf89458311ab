"""Start, signals and stop of the real agent process under the floods of benchmarks/attacks/floods.py (scaled down)."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import bcrypt
import pytest

from support.agent import ROOT, Agent, run_cli
from support.agent import agent_env as _env
from support.patience import hang_guard
from warpwatch.capture import CapturedWindow, Source
from warpwatch.config.table import Config
from warpwatch.service import signals as signals_module
from warpwatch.service.agent import Service
from warpwatch.service.ticker import Ticker


def no_traceback(agent: Agent) -> None:
    assert not any("Traceback" in line for line in agent.lines), "\n".join(agent.lines)


@pytest.mark.slow
def test_sighup_stops_the_agent_cleanly_with_a_log_line_and_removes_the_socket_file() -> None:
    """Issue: SIGHUP killed the agent with no log line and left the daemon's socket file."""
    root = Path(tempfile.mkdtemp(prefix="ww", dir="/tmp"))  # Unix socket paths are short
    sock_dir = root / "s"
    agent = Agent(
        "--source",
        f"kineto-daemon:socket_dir={sock_dir}",
        "--trace-dir",
        str(root / "t"),
        "--period",
        "10s",
        "--window",
        "1s",
        "--jitter",
        "0",
    )
    assert (sock_dir / "dynolog").exists()
    agent.proc.send_signal(signal.SIGHUP)
    rc = agent.proc.wait(hang_guard(15))
    agent._reader.join(5)
    assert rc == 0
    assert any("event=signal name=SIGHUP" in line for line in agent.lines)
    assert any("event=stopped" in line for line in agent.lines)
    assert not (sock_dir / "dynolog").exists()
    no_traceback(agent)


@pytest.mark.slow
def test_sigint_right_after_start_exits_without_a_traceback(tmp_path: Path) -> None:
    """Issue: SIGINT while the agent was still importing printed a KeyboardInterrupt traceback.
    (Before the interpreter has imported runpy, CPython's own startup may still print one: no code
    of the project has run then. Only tracebacks through warpwatch's code count here.)"""
    for delay in (0.3, 0.6, 1.0, 1.5):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "warpwatch",
                "run",
                "--source",
                f"dir:{tmp_path}",
                "--address",
                "127.0.0.1",
                "--port",
                "0",
            ],
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=_env(),
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=hang_guard(30))
        # -SIGINT: before Python installs its own handler the signal's default action ends it silently
        assert proc.returncode in (0, 130, -signal.SIGINT), err
        assert "warpwatch" not in err.partition("Traceback")[2], err


@pytest.mark.slow
def test_sigterm_while_bad_passwords_are_checked_never_aborts(tmp_path: Path) -> None:
    """Issue: SIGTERM during bcrypt checks aborted the process (SIGABRT, "FATAL: exception not
    rethrown") in 8 of 10 runs with 32 attackers: bcrypt threads killed at interpreter exit."""
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prom: '{bcrypt.hashpw(b'right', bcrypt.gensalt(10)).decode()}'\n")
    for _ in range(3):
        agent = Agent(
            "--source",
            f"dir:{tmp_path}",
            "--period",
            "10s",
            "--window",
            "1s",
            "--jitter",
            "0",
            "--web-config",
            str(cfg),
        )
        stop = threading.Event()

        def attack(agent: Agent = agent, stop: threading.Event = stop) -> None:
            auth = "Basic " + base64.b64encode(b"prom:wrong").decode()
            while not stop.is_set():
                try:
                    with socket.create_connection(("127.0.0.1", agent.port), timeout=5) as s:
                        s.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\r\n".encode())
                        s.recv(100)
                except OSError:
                    time.sleep(0.01)

        threads = [threading.Thread(target=attack, daemon=True) for _ in range(16)]
        for t in threads:
            t.start()
        time.sleep(1.0)  # checks are running
        try:
            rc, _ = agent.stop(timeout=20)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        assert rc == 0, "\n".join(agent.lines[-20:])
        no_traceback(agent)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--period", "1e12"), "warpwatch: error: --period 1e12: must be at most 86400s (one window a day)"),
        (
            ("--window", "11m", "--period", "2h"),
            "warpwatch: error: --window 11m: must be at most 600s (Kineto's on-demand traces are capped at 10 minutes)",
        ),
        (
            ("--collect-timeout", "1e9"),
            "warpwatch: error: --collect-timeout 1e9: must be at most 3600s (an hour)",
        ),
        (("--max-trace-bytes", "9" * 400), "warpwatch: error: --max-trace-bytes 9999"),
    ],
)
@pytest.mark.slow
def test_out_of_bounds_settings_are_one_clean_error(args: tuple[str, ...], message: str) -> None:
    result = run_cli("run", "--source", "dir:/x", *args, timeout=30)
    assert result.returncode == 2  # a bad value (cli.EXIT_USAGE)
    assert result.stderr.splitlines()[-1].startswith(message), result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_yaml_period_of_1e300_and_a_non_utf8_config_file_are_one_clean_error(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yml"
    huge.write_text("source: dir:/x\nperiod: 1e300\n")
    latin = tmp_path / "latin.yml"
    latin.write_bytes(b"source: dir:/caf\xe9\n")
    latin_at = len(b"source: dir:/caf")
    for path, message in (
        (huge, f"period: 1e300 (in {huge}): must be at most 86400s"),
        (latin, f"not UTF-8 text (byte {latin_at})"),
    ):
        result = run_cli("run", "--config", str(path), timeout=30)
        assert result.returncode == 2, result.stderr  # a bad value (cli.EXIT_USAGE)
        assert message in result.stderr.splitlines()[-1], result.stderr
        assert "Traceback" not in result.stderr


def test_a_scheduler_that_cannot_start_leaves_nothing_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue: the scheduler started outside the cleanup block, so its failure left sources open."""
    closed: list[str] = []

    class Src(Source):
        name = "stub"

        def start(self) -> None:
            pass

        def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
            return []

        def close(self) -> None:
            closed.append(self.name)

    def broken(self: Ticker) -> None:
        raise OverflowError("date value out of range")

    monkeypatch.setattr(Ticker, "start", broken)
    svc = Service(Config(source=("stub",), address="127.0.0.1", port=0), sources=[Src()])
    with pytest.raises(OverflowError):
        svc.startup()
    assert closed == ["stub"]
    with pytest.raises(OSError):  # the HTTP port is released
        socket.create_connection(("127.0.0.1", svc.port), timeout=2).close()
    assert signals_module.STOP_SIGNALS == (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    assert os.getpid()  # the test process itself is untouched


def test_distinct_failing_files_are_distinct_log_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue: the repeat key rewrote digits in file names, so trace_1.json and trace_2.json shared
    one rate-limited line and the second failure was never shown."""
    import logging

    from support.agent import StubSource, service_for
    from warpwatch.capture import CapturedWindow

    caplog.set_level(logging.INFO, logger="warpwatch.service")
    src = StubSource()
    for i in (1, 2, 1):
        bad = tmp_path / f"trace_{i}.json"
        bad.write_bytes(b"not json")
        src.queue.append([CapturedWindow(source=src.name, path=bad)])
    svc = service_for(src)
    for _ in range(3):
        svc.run_round()
    shown = [
        r.warpwatch_fields["file"]
        for r in caplog.records  # type: ignore[attr-defined]
        if r.msg == "window" and r.levelno >= logging.WARNING
    ]
    assert shown == ["trace_1.json", "trace_2.json"]  # the third is trace_1's repeat: rate-limited
