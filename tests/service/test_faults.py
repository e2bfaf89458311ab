"""Faults the agent survives: each is counted in `warpwatch_errors_total{stage,reason}` (or
`warpwatch_windows_total{outcome}`), logged once however often it repeats, and the agent keeps
serving its last good snapshot.

Real peers where they run here: a PyTorch process (CPU build) started with KINETO_USE_DAEMON=1
and killed while Kineto records it; no NVIDIA driver at all. A stand-in `pynvml` module (put
first on the agent's PYTHONPATH) stands in for two GPUs, so that NVML errors and a GPU falling
off the bus can be switched on and off mid-run. The trace files' faults: test_faults_files.py;
the wall clock stepped back and forth: test_faults_rounds.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.agent import (
    ALEXNET,
    ERRORS,
    WINDOWS,
    Agent,
    no_traceback,
    parse,
    sample,
    series,
    windows,
)
from support.daemonpeer import Peer, needs_torch
from support.patience import hang_guard
from warpwatch.config.table import Config
from warpwatch.export import metricdefs as md
from warpwatch.service.agent import Service


def exposed(svc: Service, name: str, labels: dict[str, str] | None = None) -> float | None:
    """A sample of the service's /metrics, as a scrape reads it."""
    return sample(parse(svc.render("text/plain")[0].decode()), name, **(labels or {}))


def errors(samples: Any, stage: str, reason: str) -> float:
    return sample(samples, ERRORS, stage=stage, reason=reason) or 0.0


# --------------------------------------------------------------------------------------------- the traced process


@pytest.mark.slow
@needs_torch
def test_a_traced_process_killed_mid_window_times_out_and_leaves_nothing_behind() -> None:
    """A real PyTorch client gets its config, Kineto starts recording (`.tmp` appears), the
    process is killed: the window times out, is counted, and no file is left in the trace dir."""
    root = Path(tempfile.mkdtemp(prefix="ww", dir="/tmp"))  # Unix socket paths are short
    peer = Peer(root)
    proc = peer.spawn(seconds=60)
    agent = Agent(
        "--source",
        f"kineto-daemon:socket_dir={peer.socket_dir}",
        "--trace-dir",
        str(peer.trace_dir),
        "--period",
        "5s",
        "--window",
        "2s",
        "--allow-high-duty",
        "--jitter",
        "0",
        "--collect-timeout",
        "1s",
    )
    try:
        agent.wait_for_line(rf"event=daemon_client .* pid={proc.pid}\b", 30)
        deadline = time.monotonic() + hang_guard(30)
        while not any(peer.trace_dir.glob("*.tmp")):  # Kineto is recording
            assert time.monotonic() < deadline, "\n".join(agent.lines)
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(hang_guard(10))
        samples = agent.wait_for(lambda s: windows(s, "timed_out") >= 1, timeout=30)
        assert errors(samples, "capture", "timed_out") == windows(samples, "timed_out")
        assert windows(samples, "ok") == windows(samples, "failed") == 0
        deadline = time.monotonic() + hang_guard(10)
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
    assert f'error="pid {proc.pid}: no trace file warpwatch_' in line and "outcome=timed_out" in line
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
                    self.configs.append(reply[HEADER.size :].decode())

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
    svc = Service(
        Config(
            source=("kineto-daemon",), port=0, address="127.0.0.1", period=60, window=0.1, jitter=0, collect_timeout=0.2
        ),
        sources=[src],
    )
    try:
        deadline = time.monotonic() + hang_guard(5)
        while not src.clients():
            assert time.monotonic() < deadline, "the client never polled"
            time.sleep(0.05)
        with caplog.at_level("DEBUG", logger="warpwatch.service"):
            for _ in range(3):
                svc.run_round()
        assert src.configs_sent == 3
        deadline = time.monotonic() + hang_guard(5)
        while len(client.configs) < 3:  # the client's own thread takes each reply in
            assert time.monotonic() < deadline, client.configs
            time.sleep(0.05)
        assert len(client.configs) == 3  # a config each window, never a trace
        assert exposed(svc, WINDOWS, {"outcome": "timed_out"}) == 3
        assert exposed(svc, ERRORS, {"stage": "capture", "reason": "timed_out"}) == 3
        lines = [r for r in caplog.records if r.msg == "window"]
        assert [r.levelname for r in lines] == ["WARNING", "DEBUG", "DEBUG"]  # logged once, repeats at debug
        assert "no trace file" in lines[0].warpwatch_fields["error"]  # type: ignore[attr-defined]
        assert os.listdir(root / "t") == []
    finally:
        client.close()
        src.close()
        shutil.rmtree(root, ignore_errors=True)


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


@pytest.mark.slow
def test_nvml_errors_and_a_lost_gpu_are_counted_logged_once_and_recovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    state = tmp_path / "state"
    state.write_text("ok")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("FAKE_NVML_STATE", str(state))
    agent = Agent(
        "--source", f"replay:{ALEXNET}", "--period", "200ms", "--window", "10ms", "--jitter", "0", "--allow-high-duty"
    )

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
        "gpm sample 1",
        "utilization 1",
        "gpm sample 0",
        "utilization 0",
    ]
    no_traceback(agent)
