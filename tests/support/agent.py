"""The real agent as a subprocess or an in-process Service, and reading its /metrics."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from warpwatch.capture import CapturedWindow, Source
from warpwatch.config.table import Config
from warpwatch.export import metricdefs as md
from warpwatch.names.labels import KernelNamer
from warpwatch.service.agent import Service

from .paths import HTA
from .patience import hang_guard

ROOT = Path(__file__).resolve().parents[2]


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """`warpwatch ARGS`; `timeout` is how long it usually takes, its deadline a hang guard (`patience`)."""
    return subprocess.run(
        [sys.executable, "-m", "warpwatch", *args],
        capture_output=True,
        text=True,
        timeout=hang_guard(timeout),
        cwd=ROOT,
        env=agent_env(),
        check=False,
    )


def agent_env() -> dict[str, str]:
    # COLUMNS left out too: the tables' width is the piped default, whatever terminal (or pytest-xdist
    # worker) the suite runs from.
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_") and k != "COLUMNS"}
    env["PYTHONPATH"] = str(ROOT / "agent") + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


GAUGES_ENV = {"WARPWATCH_KERNEL_GAUGES": "1", "WARPWATCH_TOP_KERNELS": "50"}
"""What the agent tests written before issue 24 check: every per-kernel gauge, the top 50 (flags win
over these); `defaults=True` runs the agent at its real defaults (test_series_budget)."""


class Agent:
    """One agent process; its stderr lines are collected as they come."""

    def __init__(self, *args: str, startup_timeout: float = 20.0, defaults: bool = False) -> None:
        cmd = [sys.executable, "-m", "warpwatch", "run", "--address", "127.0.0.1", "--port", "0", *args]
        env = agent_env() if defaults else {**agent_env(), **GAUGES_ENV}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        line = self.wait_for_line(r"event=listening|\"event\": \"listening\"", startup_timeout)
        m = re.search(r"port[=\": ]+(\d+)", line)
        assert m, line
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for_line(self, pattern: str, timeout: float) -> str:
        timeout = hang_guard(timeout)  # how long it usually takes; the deadline guards a hang
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if rx.search(line):
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"agent exited with {self.proc.returncode}:\n" + "\n".join(self.lines))
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} within {timeout}s:\n" + "\n".join(self.lines))

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=hang_guard(10)) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def scrape(self) -> Samples:
        status, _, body = self.get("/metrics")
        assert status == 200, body
        return parse(body.decode())

    def wait_for(self, predicate: Callable[[Samples], bool], timeout: float = 20.0) -> Samples:
        """The first scrape `predicate` holds for; `timeout` is how long that usually takes, the
        deadline a hang guard of minutes (`patience`)."""
        deadline = time.monotonic() + hang_guard(timeout)
        while True:
            samples = self.scrape()
            if predicate(samples):
                return samples
            if time.monotonic() > deadline:
                raise AssertionError("condition not met; log:\n" + "\n".join(self.lines[-30:]))
            time.sleep(0.1)

    def stop(self, timeout: float = 15.0) -> tuple[int, float]:
        """SIGTERM; returns (exit status, seconds it took to exit)."""
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(hang_guard(timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        self._reader.join(5)
        return rc, time.monotonic() - t0


def parse(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(samples: Samples, name: str, /, **labels: Any) -> float | None:
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def series(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def gunzip_if(headers: dict[str, str], body: bytes) -> bytes:
    return gzip.decompress(body) if headers.get("Content-Encoding") == "gzip" else body


ALEXNET = HTA / "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


CONTROL = HTA / "trace_diff/control/control.json.gz"


FAST = ("--period", "1s", "--window", "50ms", "--jitter", "0", "--allow-high-duty")


KERNEL_FIELDS = {
    md.KERNEL_WARPS_PER_SM: "warps_per_sm",
    md.KERNEL_RESIDENT_WARPS_PER_SM: "resident_warps_per_sm",
    md.KERNEL_THEORETICAL_OCCUPANCY: "theoretical_occupancy",
    md.KERNEL_ESTIMATED_OCCUPANCY: "estimated_occupancy",
    md.KERNEL_WAVES_PER_SM: "waves_per_sm",
    md.KERNEL_TIME_SHARE: "time_share",
    md.KERNEL_LAUNCH_RATE: "launch_rate_per_s",
    md.KERNEL_REPORTED_WARPS_MIN: "reported_warps_per_sm_min",
}


DEVICE_FIELDS = {
    md.GPU_RESIDENT_WARPS_PER_SM: "resident_warps_per_sm",
    md.GPU_ESTIMATED_OCCUPANCY: "estimated_occupancy",
    md.GPU_BUSY: "busy_ratio",
}


def analyze_json(path: Path) -> dict[str, Any]:
    result = run_cli("analyze", "--format", "json", str(path))
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)["traces"][0]
    return doc


def ok_windows(samples: Samples) -> float:
    return sample(samples, "warpwatch_windows_total", outcome="ok") or 0.0


def assert_matches_analysis(samples: Samples, doc: dict[str, Any], top_kernels: int = 50) -> None:
    """Every exported gauge equals the analysis JSON's number (exactly: both are repr'd floats);
    kernels beyond the top `top_kernels` of their GPU are summed into kernel="other". Counters hold
    every window but the first, which only created them at 0 (export module doc)."""
    namer = KernelNamer()
    windows = ok_windows(samples) - 1
    assert doc["kernels"], "the trace has kernels"
    for gpu in sorted({k["device"] for k in doc["kernels"]}):
        kernels = [k for k in doc["kernels"] if k["device"] == gpu]  # by GPU time, as the exporter names them
        for k in kernels[:top_kernels]:
            labels = {"gpu": str(gpu), "kernel": namer(k["name"])}
            for m, field in KERNEL_FIELDS.items():
                assert sample(samples, m.name, **labels) == k[field], (m.name, labels)
            observed = sample(samples, md.exposed_name(md.KERNEL_LAUNCHES_OBSERVED), **labels)
            assert observed == k["launches_observed"] * windows
            seconds = sample(samples, md.exposed_name(md.KERNEL_SECONDS), **labels)
            if k["bounded"]:  # the counters add the unbiased sum, above the window's bounded figure
                assert seconds > k["gpu_time_us"] / 1e6 * windows
            else:
                assert seconds == pytest.approx(k["gpu_time_us"] / 1e6 * windows, rel=1e-9)
            for artifact, n in k["artifacts"].items():
                got = sample(samples, md.exposed_name(md.PROFILER_ARTIFACTS), **labels, artifact=artifact)
                assert (got or 0.0) == n * windows
        rest = kernels[top_kernels:]
        folded = sample(samples, md.exposed_name(md.KERNELS_FOLDED), gpu=gpu)
        assert folded == len(rest) * (windows + 1)  # a gauge-side count: every round
        if rest:
            other = {"gpu": str(gpu), "kernel": "other"}
            assert sample(samples, md.KERNEL_TIME_SHARE.name, **other) == pytest.approx(
                sum(k["time_share"] for k in rest), rel=1e-12
            )
            assert sample(samples, md.KERNEL_LAUNCH_RATE.name, **other) == pytest.approx(
                sum(k["launch_rate_per_s"] for k in rest), rel=1e-12
            )
            known = [k for k in rest if k["warps_per_sm"] is not None]
            assert sample(samples, md.KERNEL_WARPS_PER_SM.name, **other) == pytest.approx(
                sum(k["warps_per_sm"] * k["gpu_time_us"] for k in known) / sum(k["gpu_time_us"] for k in known),
                rel=1e-12,
            )
            assert (
                sample(samples, md.exposed_name(md.KERNEL_LAUNCHES_OBSERVED), **other)
                == sum(k["launches_observed"] for k in rest) * windows
            )
    for d in doc["devices"]:
        assert sample(samples, md.exposed_name(md.GPU_OBSERVED_SECONDS), gpu=d["device"]) == pytest.approx(
            doc["window"]["duration_us"] / 1e6 * windows, rel=1e-9
        )
        for m, field in DEVICE_FIELDS.items():
            assert sample(samples, m.name, gpu=d["device"]) == d[field], m.name
        if d["name"] is not None:
            assert (
                sample(
                    samples,
                    md.GPU_INFO.name,
                    gpu=d["device"],
                    name=d["name"],
                    compute_capability=d["compute_capability"],
                    sms=d["sms"],
                    vendor=d["vendor"],
                    uuid=d["uuid"] or "",
                )
                == 1.0
            )
    gpus = {k["device"] for k in doc["kernels"]}
    expected = sum(min(top_kernels + 1, sum(k["device"] == g for k in doc["kernels"])) for g in gpus)
    assert len(series(samples, md.KERNEL_TIME_SHARE.name)) == expected


class StubSource(Source):
    """A stand-in source: returns queued windows, or raises / hangs when told to."""

    def __init__(self, name: str = "stub:1") -> None:
        self.name = name
        self.queue: list[list[CapturedWindow]] = []
        self.raise_exc: Exception | None = None
        self.hang = threading.Event()
        self.hanging = False
        self.hung = threading.Event()
        """Set once a capture hangs."""
        self.closed = False

    def start(self) -> None:
        pass

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        if self.raise_exc is not None:
            raise self.raise_exc
        if self.hanging:
            self.hung.set()
            self.hang.wait(30)
        return self.queue.pop(0) if self.queue else []

    def close(self) -> None:
        self.closed = True
        self.hang.set()


def service_for(source: StubSource, service: dict[str, Any] | None = None, **config: Any) -> Service:
    """A `Service` over `source`, with `config` settings and `service` constructor arguments."""
    settings: dict[str, Any] = {
        "source": ("stub:1",),
        "address": "127.0.0.1",
        "port": 0,
        "period": 1.0,
        "window": 0.05,
        "jitter": 0.0,
        "allow_high_duty": True,
        "collect_timeout": 0.2,
    }
    settings.update(config)
    return Service(Config(**settings), sources=[source], **(service or {}))


ERRORS = md.exposed_name(md.ERRORS)


WINDOWS = md.exposed_name(md.WINDOWS)


def windows(samples: Any, outcome: str) -> float:
    return sample(samples, WINDOWS, outcome=outcome) or 0.0


def no_traceback(agent: Agent) -> None:
    assert not any("Traceback" in line or "Fatal Python" in line for line in agent.lines), "\n".join(agent.lines)
