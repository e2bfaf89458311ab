"""Faults at start and stop, and in rounds and clocks: each counted in `warpwatch_errors_total{stage,reason}`
and logged once (the traced process and files: test_faults.py)."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from support.agent import (
    ALEXNET,
    ERRORS,
    WINDOWS,
    Agent,
    StubSource,
    no_traceback,
    parse,
    sample,
    series,
    service_for,
    windows,
)
from support.patience import hang_guard, wait_for
from warpwatch.capture import CapturedWindow
from warpwatch.capture.replay import ReplaySource
from warpwatch.config.table import Config
from warpwatch.export import metricdefs as md
from warpwatch.logs import FIELDS_ATTR
from warpwatch.service import reading as reading_module
from warpwatch.service.agent import Service


def exposed(svc: Service, name: str, labels: dict[str, str] | None = None) -> float | None:
    """A sample of the service's /metrics, as a scrape reads it."""
    return sample(parse(svc.render("text/plain")[0].decode()), name, **(labels or {}))


# --------------------------------------------------------------------------------------------- start and stop


@pytest.mark.slow
def test_a_taken_daemon_socket_stops_the_start_with_a_message(tmp_path: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="ww", dir="/tmp"))
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    squatter.bind(str(root / "dynolog"))
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "warpwatch",
                "run",
                "--source",
                f"kineto-daemon:socket_dir={root}",
                "--trace-dir",
                str(tmp_path / "t"),
                "--port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=hang_guard(30),
            check=False,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_")},
                "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "agent"),
            },
        )
    finally:
        squatter.close()
        shutil.rmtree(root, ignore_errors=True)
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"warpwatch: error: kineto-daemon:socket_dir={root}: the Kineto daemon socket {root}/dynolog is already "
            "taken: a dynolog daemon or another warpwatch is answering it."
        )
    )
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_sigterm_during_a_capture_exits_0_within_the_window_plus_five_seconds(tmp_path: Path) -> None:
    """SIGTERM once the first capture has begun (its debug line, not a sleep): the shutdown waits for
    the round in progress, which ends with its capture (5 s: the collect timeout, for the unfinished
    file), well within window + 5 s, so nothing is abandoned; exit status 0. The window is 90 s: a
    stop that waited for it, not for the capture in progress, would take over a minute."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "pending.json").write_text('{"traceEvents": [')  # unfinished: every capture waits
    agent = Agent(
        "--source",
        f"dir:{folder}",
        "--period",
        "900s",
        "--window",
        "90s",
        "--jitter",
        "0",
        "--collect-timeout",
        "5s",
        "--log-level",
        "debug",
    )
    agent.wait_for_line(r"event=capture_started ", 10)  # the first round is in its capture
    rc, seconds = agent.stop()
    assert rc == 0
    assert seconds < 60  # a hang guard (`patience`), and well below the 90 s window
    assert not any("event=window_abandoned" in x for x in agent.lines)  # the round ended within window + 5 s
    [stopped] = [x for x in agent.lines if "event=stopped" in x]
    assert "rounds=1" in stopped  # the capture in progress was waited for, and finished
    no_traceback(agent)


@pytest.mark.slow
def test_sigterm_during_analysis_abandons_the_round_after_the_window_plus_grace_and_returns_0(
    big_trace: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM while a round analyses the 25 MB trace, which cannot be interrupted: the round is
    given window + shutdown grace (0.05 + 0.2 s here, injected), then abandoned with one line, and
    `run` returns 0 (the process's exit status). The analysis is held until the test releases it,
    so the signal always lands inside it, however fast or loaded the machine."""
    assert threading.current_thread() is threading.main_thread()  # else `run` installs no handler
    entered, release, stop, gave_up = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    analyze = reading_module.analyze

    def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(hang_guard())
        return analyze(*args, **kwargs)

    monkeypatch.setattr(reading_module, "analyze", held)
    cfg = Config(source=("replay:x",), address="127.0.0.1", port=0, period=60.0, window=0.05, jitter=0.0)
    svc = Service(cfg, sources=[ReplaySource(big_trace)], shutdown_grace_s=0.2)

    def terminate() -> None:
        if entered.wait(hang_guard()):  # the first round has read the trace and is analysing it
            os.kill(os.getpid(), signal.SIGTERM)
        else:  # a hang guard: the analysis never began (the assertions below say so)
            gave_up.set()
            stop.set()

    sender = threading.Thread(target=terminate, daemon=True)
    sender.start()
    try:
        with caplog.at_level(logging.INFO, logger="warpwatch.service"):
            rc = svc.run(stop)
    finally:
        release.set()
        sender.join(hang_guard())
    assert entered.is_set() and not gave_up.is_set()
    assert rc == 0
    events = [r.msg for r in caplog.records if r.msg in ("signal", "stopping", "window_abandoned", "stopped")]
    assert events == ["signal", "stopping", "window_abandoned", "stopped"]
    [abandoned] = [r for r in caplog.records if r.msg == "window_abandoned"]
    assert getattr(abandoned, FIELDS_ATTR)["reason"] == "still running 0.25s after the stop request"
    # the released analysis ends in its daemon thread; nothing outlives the test
    wait_for(lambda: not svc.round_running, 30, "the released analysis to end")


@pytest.mark.slow
def test_a_hundred_concurrent_scrapes_during_a_heavy_window_all_get_the_last_good_snapshot(
    big_trace: Path, tmp_path: Path
) -> None:
    """Rounds of the 25 MB trace take longer than the 1 s period: the agent is busy reading and
    analysing nearly all the time, and a new round starts within a second of the last one."""
    agent = Agent(
        "--source",
        f"replay:{big_trace}",
        "--period",
        "1s",
        "--window",
        "50ms",
        "--jitter",
        "0",
        "--allow-high-duty",
        "--log-level",
        "debug",  # for the capture_started lines
    )
    try:
        agent.wait_for(lambda s: windows(s, "ok") >= 1, timeout=60)  # a good snapshot
        started = len(captures_started(agent))
        deadline = time.monotonic() + hang_guard(2)
        while len(captures_started(agent)) <= started:  # the next round is under way
            assert time.monotonic() < deadline, "\n".join(agent.lines[-30:])
            time.sleep(0.05)
        results: list[tuple[int, bytes] | BaseException] = []
        barrier = threading.Barrier(100)

        def scrape() -> None:
            try:
                barrier.wait(hang_guard(10))
                with urllib.request.urlopen(agent.url + "/metrics", timeout=60) as resp:
                    results.append((resp.status, resp.read()))
            except BaseException as exc:
                results.append(exc)

        threads = [threading.Thread(target=scrape) for _ in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(hang_guard(90))
        assert len(results) == 100
        failures = [r for r in results if not isinstance(r, tuple) or r[0] != 200]
        assert failures == []
        for r in results:
            assert isinstance(r, tuple)
            samples = parse(r[1].decode())
            assert series(samples, md.KERNEL_TIME_SHARE.name)
        assert sample(samples, "warpwatch_nvml_up") == 0  # no driver here: NVML is simply off
    finally:
        rc, _ = agent.stop(timeout=30)
    assert rc == 0
    assert len([x for x in agent.lines if "event=nvml_unavailable" in x]) == 1
    no_traceback(agent)


def captures_started(agent: Agent) -> list[str]:
    return [x for x in list(agent.lines) if "event=capture_started " in x]


# --------------------------------------------------------------------------------------------- rounds and clocks


class SteppedClock:
    """A wall clock that an operator (or NTP, or a resumed VM) steps back and forth."""

    def __init__(self) -> None:
        self.offset = 0.0
        self.seen: list[float] = []
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            now = time.time() + self.offset
            self.seen.append(now)
            return now


@pytest.mark.slow
def test_wall_clock_steps_neither_stop_rounds_nor_make_durations_negative() -> None:
    clock = SteppedClock()
    src = ReplaySource(ALEXNET)
    src.start()
    cfg = Config(
        source=("replay:x",),
        address="127.0.0.1",
        port=0,
        period=0.2,
        window=0.01,
        jitter=0.0,
        allow_high_duty=True,
        collect_timeout=5.0,  # the test is about clock steps: no window may time out on a loaded machine
    )
    svc = Service(cfg, sources=[src], clock=clock, monotonic=time.monotonic)
    svc.startup()
    try:

        def ok() -> float:
            return exposed(svc, WINDOWS, {"outcome": "ok"}) or 0.0

        wait_for(lambda: ok() >= 1, 10, "a first round")  # it has read the clock: steps from here on are steps
        for step in (+3600.0, -7200.0, +86400.0, -86400.0 - 3600.0):
            before = ok()
            clock.offset += step
            # rounds go on, every 0.2 s of real time
            wait_for(lambda n=before + 3: ok() >= n, 10, f"three more rounds after a {step:+g}s step")
            ready, reason = svc.readiness()
            assert ready, reason
            assert "-" not in reason
        assert clock.offset == -7200.0
        assert exposed(svc, ERRORS, {"stage": "clock", "reason": "jump"}) == 4
        text = svc.render("text/plain")[0].decode()
        samples = parse(text)
        hist = {labels: v for (name, labels), v in samples.items() if name.startswith("warpwatch_window_processing")}
        assert hist and all(v >= 0 for v in hist.values())
        # Real seconds, not clock steps: a duration across any of the steps would be 3600 s or more.
        assert sample(samples, "warpwatch_window_processing_seconds_sum") < 3600
        stamp = sample(samples, "warpwatch_last_window_timestamp_seconds")
        assert stamp is not None and abs(stamp - (time.time() - 7200)) < 60  # the stepped clock stamps windows
    finally:
        svc.shutdown()


def test_a_source_that_fails_every_round_is_counted_each_time_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    src = StubSource()
    src.raise_exc = RuntimeError("socket gone")
    svc = service_for(src)
    with caplog.at_level("DEBUG", logger="warpwatch.service"):
        for _ in range(5):
            svc.run_round()
    assert exposed(svc, ERRORS, {"stage": "capture", "reason": "raised"}) == 5
    lines = [r for r in caplog.records if r.msg == "window"]
    assert [r.levelname for r in lines] == ["WARNING"] + ["DEBUG"] * 4


def test_a_hanging_source_is_counted_as_timed_out_then_skipped_while_busy() -> None:
    src = StubSource()
    src.hanging = True
    svc = service_for(src, {"capture_grace_s": 0.1})
    svc.run_round()
    svc.run_round()
    src.hang.set()
    assert exposed(svc, ERRORS, {"stage": "capture", "reason": "timed_out"}) == 1
    assert exposed(svc, ERRORS, {"stage": "capture", "reason": "skipped_busy"}) == 1


def test_an_overrun_round_is_skipped_and_counted() -> None:
    src = StubSource()
    src.hanging = True
    svc = service_for(src)
    running = threading.Thread(target=svc.run_round)
    running.start()
    wait_for(lambda: svc.round_running, 10, "a round hanging in its capture")
    svc.tick()
    svc.tick()
    src.hang.set()
    running.join(hang_guard(10))
    assert not running.is_alive()
    src.hanging = False
    svc.run_round()
    assert exposed(svc, ERRORS, {"stage": "round", "reason": "overrun"}) == 2


def test_a_trace_over_the_size_limit_is_counted_as_too_large() -> None:
    src = StubSource()
    src.queue.append([CapturedWindow(source="stub:1", path=ALEXNET)])
    svc = service_for(src, max_trace_bytes=1000)
    svc.run_round()
    assert exposed(svc, ERRORS, {"stage": "read", "reason": "too_large"}) == 1


def test_a_repeated_fault_is_logged_again_after_the_interval_with_its_count() -> None:
    from warpwatch.logs import RepeatFilter

    now = [0.0]
    limiter = RepeatFilter(600.0, clock=lambda: now[0])
    assert limiter.check("k") == 0  # the first: logged
    assert [limiter.check("k") for _ in range(5)] == [None] * 5  # left out
    assert limiter.check("other") == 0
    now[0] = 600.0
    assert limiter.check("k") == 5  # logged again, saying how many were left out
    assert limiter.check("k") is None
