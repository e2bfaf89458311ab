"""Faults the agent survives: each is counted in `warpwatch_errors_total{stage,reason}` (or
`warpwatch_windows_total{outcome}`), logged once however often it repeats, and the agent keeps
serving its last good snapshot.

Real peers where they run here: a PyTorch process (CPU build) started with KINETO_USE_DAEMON=1
and killed while Kineto records it; a full tmpfs trace volume (or, where mounting is not
allowed, a writer under RLIMIT_FSIZE); no NVIDIA driver at all. A stand-in `pynvml` module
(put first on the agent's PYTHONPATH) stands in for two GPUs, so that NVML errors and a GPU
falling off the bus can be switched on and off mid-run. The wall clock is injected into an
in-process `Service` (`clock=`) and stepped back and forth.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import (
    ALEXNET,
    CONTROL,
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
from support.daemonpeer import Peer, needs_torch
from support.tracebuild import kernel, span, trace_doc
from warpwatch.capture import CapturedWindow
from warpwatch.capture.replay import ReplaySource
from warpwatch.config import Config
from warpwatch.export import metricdefs as md
from warpwatch.service import agent as service_module
from warpwatch.service import window as window_module
from warpwatch.service.agent import Service
from warpwatch.service.ticker import Ticker


def errors(samples: Any, stage: str, reason: str) -> float:
    return sample(samples, ERRORS, stage=stage, reason=reason) or 0.0


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ~25 MB trace (80,000 launches of 200 kernels): seconds of reading and analysis."""
    n = 80_000
    events = [span(0, n * 10 + 100)] + [
        kernel(f"void heavy_kernel_{i % 200}<float, {i % 7}>(float*, int)", ts=10 + i * 10, dur=5,
               grid=(i % 5000 + 1, 1, 1))
        for i in range(n)
    ]
    path = tmp_path_factory.mktemp("big") / "big.json"
    path.write_bytes(json.dumps(trace_doc(events)).encode())
    assert path.stat().st_size > 20_000_000
    return path


# --------------------------------------------------------------------------------------------- the traced process


@pytest.mark.slow
@needs_torch
def test_a_traced_process_killed_mid_window_times_out_and_leaves_nothing_behind() -> None:
    """A real PyTorch client gets its config, Kineto starts recording (`.tmp` appears), the
    process is killed: the window times out, is counted, and no file is left in the trace dir."""
    root = Path(tempfile.mkdtemp(prefix="ww", dir="/tmp"))  # Unix socket paths are short
    peer = Peer(root)
    proc = peer.spawn(seconds=60)
    agent = Agent("--source", f"kineto-daemon:socket_dir={peer.socket_dir}", "--trace-dir", str(peer.trace_dir),
                  "--period", "5s", "--window", "2s", "--allow-high-duty", "--jitter", "0", "--collect-timeout", "1s")
    try:
        agent.wait_for_line(rf"event=daemon_client .* pid={proc.pid}\b", 30)
        deadline = time.monotonic() + 30
        while not any(peer.trace_dir.glob("*.tmp")):  # Kineto is recording
            assert time.monotonic() < deadline, "\n".join(agent.lines)
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        samples = agent.wait_for(lambda s: windows(s, "timed_out") >= 1, timeout=30)
        assert errors(samples, "capture", "timed_out") == windows(samples, "timed_out")
        assert windows(samples, "ok") == windows(samples, "failed") == 0
        deadline = time.monotonic() + 10
        while os.listdir(peer.trace_dir):  # the abandoned window's .tmp is swept
            assert time.monotonic() < deadline, os.listdir(peer.trace_dir)
            time.sleep(0.2)
        assert agent.get("/healthz")[0] == 200
    finally:
        rc, _ = agent.stop()
        peer.stop()
        shutil.rmtree(root, ignore_errors=True)
    assert rc == 0
    [line] = [x for x in agent.lines if "event=window" in x]
    assert f"error=\"pid {proc.pid}: no trace file warpwatch_" in line and "outcome=timed_out" in line
    no_traceback(agent)


class FakeKinetoClient:
    """Polls like a Kineto client that can trace, but never writes a trace."""

    def __init__(self, socket_dir: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(socket_dir / f"client{os.getpid()}"))
        self.sock.settimeout(0.5)
        self.daemon = str(socket_dir / "dynolog")
        self.configs: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        import struct

        from warpwatch.capture.daemon import HEADER, encode_message

        while not self._stop.wait(0.2):
            with contextlib.suppress(OSError):
                self.sock.sendto(encode_message("req", struct.pack("<iiqi", 3, 1, 0, os.getpid())), self.daemon)
                reply = self.sock.recv(4096)
                if len(reply) > HEADER.size:
                    self.configs.append(reply[HEADER.size:].decode())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.mark.slow
def test_a_trace_that_never_arrives_times_out_each_window_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    from warpwatch.capture.daemon import KinetoDaemonSource

    root = Path(tempfile.mkdtemp(prefix="ww", dir="/tmp"))
    src = KinetoDaemonSource(root / "t", socket_dir=str(root / "s"), start_lead_s=0.1, poll_interval_hint_s=0.2)
    src.start()
    client = FakeKinetoClient(root / "s")
    svc = Service(Config(source=("kineto-daemon",), port=0, address="127.0.0.1", period=60, window=0.1,
                         jitter=0, collect_timeout=0.2), sources=[src])
    try:
        while not src.clients():
            time.sleep(0.05)
        with caplog.at_level("DEBUG", logger="warpwatch.service"):
            for _ in range(3):
                svc.run_round()
        assert len(client.configs) == 3  # a config each window, never a trace
        assert svc.registry.get_sample_value(WINDOWS, {"outcome": "timed_out"}) == 3
        assert svc.registry.get_sample_value(ERRORS, {"stage": "capture", "reason": "timed_out"}) == 3
        lines = [r for r in caplog.records if r.msg == "window"]
        assert [r.levelname for r in lines] == ["WARNING", "DEBUG", "DEBUG"]  # logged once, repeats at debug
        assert "no trace file" in lines[0].warpwatch_fields["error"]  # type: ignore[attr-defined]
        assert os.listdir(root / "t") == []
    finally:
        client.close()
        src.close()
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------------------------- files


def test_a_growing_file_is_waited_for_and_a_truncated_one_fails_once(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    data = CONTROL.read_bytes()
    (folder / "cut.json.gz").write_bytes(data[: len(data) // 3])  # never completes
    growing = folder / "growing.json.gz"
    agent = Agent("--source", f"dir:{folder}", "--period", "300ms", "--window", "20ms", "--jitter", "0",
                  "--allow-high-duty", "--collect-timeout", "2s")
    try:
        with growing.open("wb") as f:  # written slowly, in pieces, for over a second
            for i in range(0, len(data), len(data) // 8 + 1):
                f.write(data[i : i + len(data) // 8 + 1])
                f.flush()
                time.sleep(0.15)
                assert windows(agent.scrape(), "ok") == 0  # never handed over half-written
        samples = agent.wait_for(lambda s: windows(s, "ok") == 1 and windows(s, "failed") == 1, timeout=20)
        assert errors(samples, "read", "invalid_trace") == 1
        time.sleep(1)
        assert windows(agent.scrape(), "failed") == 1  # handed over once
    finally:
        rc, _ = agent.stop()
    assert rc == 0
    failed = [x for x in agent.lines if "outcome=failed" in x]
    assert len(failed) == 1 and "file=cut.json.gz" in failed[0] and "truncated" in failed[0]


@contextlib.contextmanager
def small_volume(path: Path) -> Iterator[str]:
    """A 64 KiB tmpfs at `path` ("tmpfs"), or a plain folder whose writers get RLIMIT_FSIZE ("rlimit")."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)],
                             capture_output=True, check=False).returncode == 0
    try:
        yield "tmpfs" if mounted else "rlimit"
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)


WRITER = """
import signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
data = open(sys.argv[1], "rb").read()
try:
    with open(sys.argv[2], "wb") as f:
        f.write(data)
except OSError as exc:
    print(exc.errno)
"""


def write_on_volume(kind: str, source: Path, target: Path) -> int:
    """Write `source` to `target` as a traced process would; the errno it got (0 if none)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    proc = subprocess.run([sys.executable, "-c", WRITER, str(source), str(target)], capture_output=True, text=True,
                          preexec_fn=limit if kind == "rlimit" else None, timeout=30, check=False)
    return int(proc.stdout.strip() or 0)


def test_a_full_trace_volume_fails_the_window_and_the_agent_goes_on(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    big = tmp_path / "big.json"
    big.write_text(json.dumps(trace_doc([span(0, 10**6)] + [kernel(f"k{i}", ts=10 + i, dur=1) for i in range(400)])))
    assert big.stat().st_size > 128 * 1024
    with small_volume(volume) as kind:
        agent = Agent("--source", f"dir:{volume}", "--period", "300ms", "--window", "20ms", "--jitter", "0",
                      "--allow-high-duty", "--collect-timeout", "1s", "--delete-processed")
        try:
            assert write_on_volume(kind, big, volume / "big.json") in (errno.ENOSPC, errno.EFBIG)
            samples = agent.wait_for(lambda s: errors(s, "read", "invalid_trace") == 1, timeout=20)
            assert windows(samples, "failed") == 1
            # The partial file was deleted once analysed: the volume has room again.
            deadline = time.monotonic() + 5
            while os.listdir(volume):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            small = tmp_path / "small.json"
            small.write_text(json.dumps(trace_doc([span(0, 1000), kernel("k", ts=10, dur=5)])))
            assert write_on_volume(kind, small, volume / "good.json") == 0
            samples = agent.wait_for(lambda s: windows(s, "ok") == 1, timeout=20)
            assert series(samples, md.KERNEL_TIME_SHARE.name)
        finally:
            rc, _ = agent.stop()
    assert rc == 0
    no_traceback(agent)


def test_a_read_error_is_counted_and_the_last_snapshot_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    src = StubSource()
    src.queue.append([CapturedWindow(source="stub:1", path=ALEXNET)])
    svc = service_for(src)
    svc.run_round()
    good = svc.render("text/plain")[0]

    def eio(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(window_module, "read_trace", eio)
    src.queue.append([CapturedWindow(source="stub:1", path=ALEXNET)])
    svc.run_round()
    assert svc.registry.get_sample_value(ERRORS, {"stage": "read", "reason": "io_error"}) == 1
    after = parse(svc.render("text/plain")[0].decode())
    before = parse(good.decode())
    assert series(after, md.KERNEL_TIME_SHARE.name) == series(before, md.KERNEL_TIME_SHARE.name)


# --------------------------------------------------------------------------------------------- NVML

FAKE_PYNVML = '''
"""Stands in for the NVIDIA driver behind pynvml: two H200 GPUs with GPM. The file named by
$FAKE_NVML_STATE says how they are: "ok", "lost:N" (GPU N fell off the bus) or "error:N"."""
import os

NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_METRIC_SM_OCCUPANCY = 3


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return {15: "GPU is lost", 999: "Unknown Error"}.get(self.value, "NVML error %d" % self.value)


def _check(handle):
    state = open(os.environ["FAKE_NVML_STATE"]).read().strip()
    if state == "lost:%d" % handle:
        raise NVMLError(15)
    if state == "error:%d" % handle:
        raise NVMLError(999)


class _Metric:
    metricId = 0
    nvmlReturn = 0
    value = 0.0


class c_nvmlGpmMetricsGet_t:
    def __init__(self):
        self.metrics = [_Metric()]


class _Support:
    isSupportedDevice = 1


class _Util:
    gpu = 80


def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 2
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetName(h): return b"NVIDIA H200"
def nvmlDeviceGetCudaComputeCapability(h): return (9, 0)
def nvmlDeviceGetNumGpuCores(h): return 16896
def nvmlGpmQueryDeviceSupport(h): return _Support()
def nvmlGpmSampleAlloc(): return object()
def nvmlGpmSampleFree(s): pass


def nvmlGpmSampleGet(h, s):
    _check(h)
    return s


def nvmlGpmMetricsGet(get):
    get.metrics[0].value = 37.5
    return get


def nvmlDeviceGetUtilizationRates(h):
    _check(h)
    return _Util()
'''


def test_nvml_errors_and_a_lost_gpu_are_counted_logged_once_and_recovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    state = tmp_path / "state"
    state.write_text("ok")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    agent = Agent("--source", f"replay:{ALEXNET}", "--period", "200ms", "--window", "10ms", "--jitter", "0",
                  "--allow-high-duty")

    def util(s: Any, gpu: int) -> float | None:
        return sample(s, "warpwatch_nvml_gpu_utilization_ratio", gpu=gpu)

    try:
        agent.wait_for(lambda s: sample(s, "warpwatch_nvml_up") == 1 and util(s, 1) == 0.8)
        state.write_text("lost:1")  # GPU 1 falls off the bus; GPU 0 goes on
        lost = agent.wait_for(lambda s: errors(s, "nvml", "gpu_lost") >= 8)
        assert sample(lost, "warpwatch_nvml_up") == 0
        assert util(lost, 0) == 0.8 and util(lost, 1) is None
        assert sample(lost, "warpwatch_nvml_sm_occupancy_ratio", gpu=0) == 0.375
        assert windows(lost, "ok") >= 1 and series(lost, md.KERNEL_TIME_SHARE.name)  # still analysing
        state.write_text("error:0")
        agent.wait_for(lambda s: errors(s, "nvml", "error") >= 4)
        state.write_text("ok")
        agent.wait_for(lambda s: sample(s, "warpwatch_nvml_up") == 1 and util(s, 1) == 0.8)
    finally:
        rc, _ = agent.stop()
    assert rc == 0
    logged = [x for x in agent.lines if "event=nvml_error" in x]
    # Each distinct error once, however many rounds it lasted: GPM sample and utilisation, per GPU.
    assert [re.search(r"where=\"([^\"]+)\"", x).group(1) for x in logged] == [  # type: ignore[union-attr]
        "gpm sample 1", "utilization 1", "gpm sample 0", "utilization 0"]
    no_traceback(agent)


# --------------------------------------------------------------------------------------------- start and stop


def test_a_taken_daemon_socket_stops_the_start_with_a_message(tmp_path: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="ww", dir="/tmp"))
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    squatter.bind(str(root / "dynolog"))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "warpwatch", "run", "--source", f"kineto-daemon:socket_dir={root}",
             "--trace-dir", str(tmp_path / "t"), "--port", "0"],
            capture_output=True, text=True, timeout=30, check=False,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_")},
                 "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "agent")})
    finally:
        squatter.close()
        shutil.rmtree(root, ignore_errors=True)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"warpwatch: error: kineto-daemon:socket_dir={root}: the Kineto daemon socket {root}/dynolog is already "
        "taken: a dynolog daemon or another warpwatch is answering it.")
    assert "Traceback" not in result.stderr


def test_sigterm_during_a_capture_exits_0_within_the_window_plus_five_seconds(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "pending.json").write_text('{"traceEvents": [')  # unfinished: every capture waits its window
    agent = Agent("--source", f"dir:{folder}", "--period", "60s", "--window", "3s", "--jitter", "0",
                  "--collect-timeout", "3s")
    time.sleep(1.0)  # inside the first window
    rc, seconds = agent.stop()
    assert rc == 0
    assert seconds < 3 + 5
    assert any("event=stopped" in x for x in agent.lines)
    no_traceback(agent)


def test_sigterm_during_analysis_exits_0_within_the_window_plus_five_seconds(big_trace: Path) -> None:
    agent = Agent("--source", f"replay:{big_trace}", "--period", "60s", "--window", "1s", "--jitter", "0")
    time.sleep(0.5)  # the first round started at once: reading and analysing 25 MB
    assert not any("event=window" in x for x in agent.lines), "analysis already over: make the trace larger"
    rc, seconds = agent.stop()
    assert rc == 0
    assert seconds < 1 + 5 + 1
    assert any("event=stopped" in x for x in agent.lines)
    no_traceback(agent)


@pytest.mark.slow
def test_a_hundred_concurrent_scrapes_during_a_heavy_window_all_get_the_last_good_snapshot(
    big_trace: Path, tmp_path: Path
) -> None:
    """Rounds of the 25 MB trace take longer than the 1 s period: the agent is busy reading and
    analysing nearly all the time, and a new round starts within a second of the last one."""
    agent = Agent("--source", f"replay:{big_trace}", "--period", "1s", "--window", "50ms", "--jitter", "0",
                  "--allow-high-duty")
    try:
        agent.wait_for(lambda s: windows(s, "ok") >= 1, timeout=60)  # a good snapshot
        time.sleep(1.1)  # the next round is under way
        results: list[tuple[int, bytes] | BaseException] = []
        barrier = threading.Barrier(100)

        def scrape() -> None:
            try:
                barrier.wait(10)
                with urllib.request.urlopen(agent.url + "/metrics", timeout=60) as resp:
                    results.append((resp.status, resp.read()))
            except BaseException as exc:
                results.append(exc)

        threads = [threading.Thread(target=scrape) for _ in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
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


def test_wall_clock_steps_neither_stop_rounds_nor_make_durations_negative() -> None:
    clock = SteppedClock()
    src = ReplaySource(ALEXNET)
    src.start()
    cfg = Config(source=("replay:x",), address="127.0.0.1", port=0, period=0.2, window=0.01, jitter=0.0,
                 allow_high_duty=True, collect_timeout=0.5)
    svc = Service(cfg, sources=[src], clock=clock, monotonic=time.monotonic)
    svc.startup()
    try:
        def ok() -> float:
            return svc.registry.get_sample_value(WINDOWS, {"outcome": "ok"}) or 0.0

        while ok() < 1:  # a first round has read the clock: steps from here on are steps
            time.sleep(0.05)
        for step in (+3600.0, -7200.0, +86400.0, -86400.0 - 3600.0):
            before = ok()
            clock.offset += step
            deadline = time.monotonic() + 10
            while ok() < before + 3:  # rounds go on, every 0.2 s of real time
                assert time.monotonic() < deadline, f"rounds stopped after a {step:+g}s step"
                time.sleep(0.05)
            ready, reason = svc.readiness()
            assert ready, reason
            assert "-" not in reason
        assert clock.offset == -7200.0
        assert svc.registry.get_sample_value(ERRORS, {"stage": "clock", "reason": "jump"}) == 4
        text = svc.render("text/plain")[0].decode()
        samples = parse(text)
        hist = {labels: v for (name, labels), v in samples.items() if name.startswith("warpwatch_window_processing")}
        assert hist and all(v >= 0 for v in hist.values())
        assert sample(samples, "warpwatch_window_processing_seconds_sum") < 60  # real seconds, not clock steps
        stamp = sample(samples, "warpwatch_last_window_timestamp_seconds")
        assert stamp is not None and abs(stamp - (time.time() - 7200)) < 60  # the stepped clock stamps windows
    finally:
        svc.shutdown()


def test_the_ticker_ticks_every_period_and_never_bursts_after_missed_ones() -> None:
    """The real APScheduler 3 underneath: periodic ticks, and a stalled tick coalesces the missed ones."""
    ticks: list[float] = []
    ticker = Ticker(lambda: ticks.append(time.monotonic()), period=0.2)
    ticker.start()
    time.sleep(1.1)
    ticker.stop()
    assert 4 <= len(ticks) <= 7
    assert all(g > 0.1 for g in (b - a for a, b in itertools.pairwise(ticks))), ticks
    slow: list[float] = []

    def stall() -> None:
        slow.append(time.monotonic())
        if len(slow) == 1:
            time.sleep(0.7)  # three periods missed

    ticker = Ticker(stall, period=0.2)
    ticker.start()
    time.sleep(1.6)
    ticker.stop()
    # max_instances=1 and coalescing: no catch-up burst of the missed ticks.
    assert len(slow) >= 3
    assert all(b - a >= 0.1 for a, b in itertools.pairwise(slow)), slow


def test_a_wall_clock_step_makes_the_next_tick_due_at_once() -> None:
    """APScheduler 3 schedules on the wall clock: without the watchdog, a backward step of an hour
    would stop rounds for an hour. The wall clock seen by the watchdog is stepped back by one."""
    offset = [0.0]
    ticks: list[float] = []
    ticker = Ticker(lambda: ticks.append(time.monotonic()), period=3600.0,
                    wall=lambda: time.time() + offset[0], watch_s=0.05)
    ticker.start()
    try:
        deadline = time.monotonic() + 5
        while not ticks and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(ticks) == 1  # the first tick comes at once; the next is an hour away
        time.sleep(0.3)
        assert len(ticks) == 1
        offset[0] = -3600.0
        deadline = time.monotonic() + 5
        while len(ticks) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(ticks) == 2
    finally:
        ticker.stop()


def test_a_source_that_fails_every_round_is_counted_each_time_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    src = StubSource()
    src.raise_exc = RuntimeError("socket gone")
    svc = service_for(src)
    with caplog.at_level("DEBUG", logger="warpwatch.service"):
        for _ in range(5):
            svc.run_round()
    assert svc.registry.get_sample_value(ERRORS, {"stage": "capture", "reason": "raised"}) == 5
    lines = [r for r in caplog.records if r.msg == "window"]
    assert [r.levelname for r in lines] == ["WARNING"] + ["DEBUG"] * 4


def test_a_hanging_source_is_counted_as_timed_out_then_skipped_while_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_module, "CAPTURE_GRACE_S", 0.1)
    src = StubSource()
    src.hanging = True
    svc = service_for(src)
    svc.run_round()
    svc.run_round()
    src.hang.set()
    assert svc.registry.get_sample_value(ERRORS, {"stage": "capture", "reason": "timed_out"}) == 1
    assert svc.registry.get_sample_value(ERRORS, {"stage": "capture", "reason": "skipped_busy"}) == 1


def test_an_overrun_round_is_skipped_and_counted() -> None:
    svc = service_for(StubSource())
    with svc._round_lock:  # a round still running
        svc._tick()
        svc._tick()
    svc.run_round()
    assert svc.registry.get_sample_value(ERRORS, {"stage": "round", "reason": "overrun"}) == 2


def test_a_trace_over_the_size_limit_is_counted_as_too_large() -> None:
    src = StubSource()
    src.queue.append([CapturedWindow(source="stub:1", path=ALEXNET)])
    svc = service_for(src, max_trace_bytes=1000)
    svc.run_round()
    assert svc.registry.get_sample_value(ERRORS, {"stage": "read", "reason": "too_large"}) == 1


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
