"""The in-process API, run inside real torch processes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from warpwatch.errors import ConfigError
from warpwatch.inprocess import attach

pytestmark = pytest.mark.slow
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

SCRIPT = """
import json, sys, threading, time
import torch
import warpwatch.inprocess

mode, trace_dir = sys.argv[1], sys.argv[2]
seen = []

def on_trace(path):
    # The file exists, complete, while the callback runs.
    seen.append({"path": str(path), "spans": [e for e in json.load(open(path))["traceEvents"]
                                              if e.get("cat") == "Trace"]})

stop = threading.Event()
def work():
    a = torch.randn(64, 64)
    while not stop.is_set():
        a = (a @ a).tanh()
worker = threading.Thread(target=work)
worker.start()
handle = warpwatch.inprocess.attach(
    period_s=30, window_s=0.3, trace_dir=None if trace_dir == "-" else trace_dir,
    on_trace=on_trace, record_cpu=(mode == "cuda+cpu"))
deadline = time.monotonic() + 60
while handle.windows < 1 and handle.errors == 0 and time.monotonic() < deadline:
    time.sleep(0.05)
with handle:
    pass
stop.set()
worker.join()
print(json.dumps({"windows": handle.windows, "errors": handle.errors, "last_error": handle.last_error,
                  "running": handle.running, "seen": seen, "own_dir": str(handle.trace_dir),
                  "threads": [t.name for t in threading.enumerate() if t.name.startswith("warpwatch")]}))
"""


def run(mode: str, trace_dir: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode, trace_dir], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@needs_torch
@pytest.mark.parametrize("mode", ["cuda", "cuda+cpu"])
def test_one_window_is_written_atomically_into_the_trace_dir(tmp_path: Path, mode: str) -> None:
    result = run(mode, str(tmp_path))

    assert (result["windows"], result["errors"], result["running"]) == (1, 0, False), result
    assert result["threads"] == []
    [seen] = result["seen"]
    path = Path(seen["path"])
    assert path.parent == tmp_path
    assert path.name.endswith(".pt.trace.json")
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no .tmp left behind
    trace = json.loads(path.read_text())
    [span] = [e for e in trace["traceEvents"] if e.get("cat") == "Trace"]
    assert span["dur"] == pytest.approx(300_000, rel=0.2)
    assert seen["spans"] == [span]


@needs_torch
def test_without_a_trace_dir_files_live_only_during_the_callback() -> None:
    result = run("cuda", "-")

    assert (result["windows"], result["errors"]) == (1, 0), result
    [seen] = result["seen"]
    assert len(seen["spans"]) == 1
    assert not Path(seen["path"]).exists()
    assert not Path(str(result["own_dir"])).exists()


EXIT_MID_WINDOW = """
import sys, time, torch, warpwatch.inprocess
handle = warpwatch.inprocess.attach(period_s=1, window_s=0.8, trace_dir=sys.argv[1], record_cpu=True)
deadline = time.monotonic() + 4
while time.monotonic() < deadline:  # the process works, and returns while its 4th window records
    torch.randn(200, 200) @ torch.randn(200, 200)
print("leaving after", handle.windows, "windows", flush=True)
"""


@needs_torch
def test_a_process_that_exits_while_a_window_records_exits_cleanly(tmp_path: Path) -> None:
    """Before the fix the served process died at exit of SIGSEGV (rc -11) in 5 runs of 5."""
    for attempt in range(5):
        folder = tmp_path / str(attempt)
        done = subprocess.run(
            [sys.executable, "-c", EXIT_MID_WINDOW, str(folder)], capture_output=True, text=True, timeout=120
        )

        assert done.returncode == 0, (attempt, done.returncode, done.stderr[-3000:])
        assert done.stdout.startswith("leaving after"), done.stdout
        assert [p for p in os.listdir(folder) if p.endswith(".tmp")] == []


PENDING = """
import json, os, sys, time, torch, warpwatch.inprocess
handle = warpwatch.inprocess.attach(period_s=0.3, window_s=0.05, trace_dir=sys.argv[1], max_pending=2)
deadline = time.monotonic() + 60
while handle.skipped < 3 and time.monotonic() < deadline:
    time.sleep(0.05)
handle.stop()
print(json.dumps({"windows": handle.windows, "skipped": handle.skipped, "files": sorted(os.listdir(sys.argv[1]))}))
"""


@needs_torch
def test_no_window_is_recorded_while_max_pending_traces_wait_unread(tmp_path: Path) -> None:
    """Nobody reads the folder: the process writes two traces, then skips windows (disk bounded)."""
    (tmp_path / "other_1.1.pt.trace.json").write_text("{}")  # another process's file does not count
    done = subprocess.run([sys.executable, "-c", PENDING, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    assert result["windows"] == 2
    assert result["skipped"] >= 3
    assert len(result["files"]) == 3, result["files"]


def test_max_pending_must_be_a_positive_whole_number() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="max_pending"):
            attach(period_s=10, window_s=1, trace_dir="/tmp/x", max_pending=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"period_s": 1, "window_s": 2, "trace_dir": "/tmp/x"}, r"window_s: 2 s is longer than period_s 1 s"),
        ({"period_s": 0, "window_s": 0, "trace_dir": "/tmp/x"}, r"period_s: 0 must be a positive"),
        ({"period_s": 10, "window_s": float("nan"), "trace_dir": "/tmp/x"}, r"window_s: nan must be"),
        ({"period_s": 10, "window_s": 1}, r"give trace_dir, on_trace or both"),
        ({"period_s": 10, "window_s": 1, "trace_dir": "/tmp/x", "serve_port": 9400}, r"serve_port: 9400"),
    ],
)
def test_invalid_settings_are_refused_before_torch_is_touched(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        attach(**kwargs)  # type: ignore[arg-type]


def test_importing_warpwatch_never_imports_torch() -> None:
    code = (
        "import sys, warpwatch, warpwatch.inprocess, warpwatch.capture.daemon\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
