"""Long runs of the real agent: do its memory, file descriptors, threads and trace folder stay flat?

Two soaks, each a `warpwatch run` subprocess sampled from /proc at start, middle and end:

- `replay`: 1,000+ windows as fast as the agent takes them (`--period 0.2s --window 10ms
  --allow-high-duty --jitter 0s`): a real trace replayed (`replay:`) plus a feeder dropping a
  small trace into a `dir:` folder every period, deleted once analysed (`--delete-processed`);
- `daemon`: real PyTorch (CPU) processes started with KINETO_USE_DAEMON=1, polling every second,
  traced through the Kineto daemon protocol (`kineto-daemon`) for `--minutes`; the agent deletes
  every trace it collects, so the trace folder must stay empty.

    python benchmarks/soak.py replay [--windows 1000]
    python benchmarks/soak.py daemon [--minutes 10] [--clients 2]
    python benchmarks/soak.py all

tests/service/test_soak.py runs a short replay soak in CI with the same helpers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("WARPWATCH_SHARED_TRACES", ROOT.parent / "shared" / "traces"))
REPLAYED = (
    SHARED / "facebookresearch__HolisticTraceAnalysis/tests/data/critical_path/alexnet/"
    "benchmark_result_2869224_1695835535_trace.json.gz"
)
FAST = ("--period", "0.2s", "--window", "10ms", "--allow-high-duty", "--jitter", "0s")

CLIENT = """
import sys, time
import torch
deadline = time.time() + float(sys.argv[1])
a = torch.randn(256, 256)
while time.time() < deadline:
    a = (a @ a).tanh()
    time.sleep(0.01)
"""

SMALL_TRACE = json.dumps(
    {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA H100",
                "computeMajor": 9,
                "computeMinor": 0,
                "maxThreadsPerBlock": 1024,
                "maxThreadsPerMultiprocessor": 2048,
                "regsPerBlock": 65536,
                "regsPerMultiprocessor": 65536,
                "warpSize": 32,
                "sharedMemPerBlock": 49152,
                "sharedMemPerMultiprocessor": 233472,
                "numSms": 132,
                "sharedMemPerBlockOptin": 232448,
            }
        ],
        "traceEvents": [
            {
                "ph": "X",
                "cat": "Trace",
                "name": "PyTorch Profiler (0)",
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "ts": 0,
                "dur": 1000,
            },
            *(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"k{i}",
                    "pid": 0,
                    "tid": 7,
                    "ts": 10 + 20 * i,
                    "dur": 10,
                    "args": {
                        "device": 0,
                        "stream": 7,
                        "grid": [132 * (i + 1), 1, 1],
                        "block": [256, 1, 1],
                        "registers per thread": 32,
                        "shared memory": 0,
                    },
                }
                for i in range(20)
            ),
        ],
    }
)


@dataclass(frozen=True)
class Footprint:
    """One look at the agent: from its /metrics (windows) and /proc, and at its trace folder."""

    seconds: float
    windows: float
    rss_mib: float
    fds: int
    threads: int
    folder_files: int
    folder_bytes: int


def proc_status(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def folder_size(folder: Path | None) -> tuple[int, int]:
    """(files, bytes) directly in `folder`; (0, 0) when there is none."""
    if folder is None or not folder.is_dir():
        return 0, 0
    files = [e for e in os.scandir(folder) if e.is_file(follow_symlinks=False)]
    return len(files), sum(e.stat(follow_symlinks=False).st_size for e in files)


class AgentProcess:
    """`warpwatch run` as a subprocess; its log lines are kept as they come."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        cmd = [sys.executable, "-m", "warpwatch", "run", "--address", "127.0.0.1", "--port", "0", *args]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_")}
        environ["PYTHONPATH"] = str(ROOT / "agent") + os.pathsep + environ.get("PYTHONPATH", "")
        environ.update(env or {})
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=environ)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.started = time.monotonic()
        deadline = self.started + 60
        port = None
        while port is None:
            for line in list(self.lines):
                m = re.search(r"event=listening .*port=(\d+)", line)
                if m:
                    port = int(m.group(1))
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the agent did not start:\n" + "\n".join(self.lines))
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port}/metrics"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def logged_windows(self, source: str) -> int:
        """Windows of one source so far, from the log (one `window` line each, at info level)."""
        needle = f"event=window source={source} "
        return sum(1 for line in list(self.lines) if line.startswith("ts=") and needle in line)

    def windows(self, outcome: str | None = None) -> float:
        """warpwatch_windows_total, of one outcome or of all."""
        with urllib.request.urlopen(self.url, timeout=30) as resp:
            text = resp.read().decode()
        total = 0.0
        for m in re.finditer(r'^warpwatch_windows_total\{outcome="(\w+)"\} (\S+)$', text, re.MULTILINE):
            if outcome is None or m.group(1) == outcome:
                total += float(m.group(2))
        return total

    def footprint(self, folder: Path | None, looks: int = 5) -> Footprint:
        """The smallest fds and threads over a few looks 50 ms apart (round and capture threads
        come and go), the last RSS, the folder now."""
        fds, threads = [], []
        status: dict[str, str] = {}
        for _ in range(looks):
            fds.append(len(os.listdir(f"/proc/{self.pid}/fd")))
            status = proc_status(self.pid)
            threads.append(int(status["Threads"]))
            time.sleep(0.05)
        files, size = folder_size(folder)
        return Footprint(
            time.monotonic() - self.started,
            self.windows(),
            int(status["VmRSS"].split()[0]) / 1024,
            min(fds),
            min(threads),
            files,
            size,
        )

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self._reader.join(5)


class Feeder:
    """Drops a small finished trace into `folder` every `every_s` (written aside, then renamed in)."""

    def __init__(self, folder: Path, every_s: float) -> None:
        self.folder = folder
        self.every_s = every_s
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            tmp = self.folder / f".feed-{self.written}.tmp"
            tmp.write_text(SMALL_TRACE)
            tmp.rename(self.folder / f"feed-{self.written:06d}.json")
            self.written += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def soak(
    agent: AgentProcess,
    folder: Path | None,
    done: Callable[[Footprint], bool],
    *,
    warm_windows: float = 20,
    progress: Callable[[Footprint], None] | None = None,
    every_s: float = 5.0,
    looks: int = 5,
) -> list[Footprint]:
    """Footprints at the start (after `warm_windows`: imports done, caches filled), every
    `every_s`, and at the end (when `done`)."""
    while agent.windows() < warm_windows:
        if agent.proc.poll() is not None:
            raise RuntimeError("the agent exited:\n" + "\n".join(agent.lines[-30:]))
        time.sleep(0.2)
    samples = [agent.footprint(folder, looks)]
    while not done(samples[-1]):
        time.sleep(every_s)
        samples.append(agent.footprint(folder, looks))
        if progress is not None:
            progress(samples[-1])
    return samples


def table(title: str, samples: Sequence[Footprint]) -> str:
    picks = (("start", samples[0]), ("middle", samples[len(samples) // 2]), ("end", samples[-1]))
    lines = [
        f"### {title}",
        "",
        "| when | elapsed (s) | windows | RSS (MiB) | open fds | threads | trace folder (files, bytes) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for when, f in picks:
        lines.append(
            f"| {when} | {f.seconds:.0f} | {f.windows:.0f} | {f.rss_mib:.1f} | {f.fds} | {f.threads} "
            f"| {f.folder_files}, {f.folder_bytes} |"
        )
    return "\n".join(lines)


def replay_soak(windows: int) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="ww-soak-"))
    folder = tmp / "dropped"
    folder.mkdir()
    feeder = Feeder(folder, 0.2)
    agent = AgentProcess(
        "--source",
        f"replay:{REPLAYED}",
        "--source",
        f"dir:{folder}",
        "--delete-processed",
        "--collect-timeout",
        "1s",
        *FAST,
    )
    try:
        replay = f"replay:{REPLAYED}"
        samples = soak(
            agent,
            folder,
            lambda f: agent.logged_windows(replay) >= windows,
            progress=lambda f: print(f"  {f.windows:.0f} windows, {f.rss_mib:.1f} MiB", file=sys.stderr),
        )
        ok, failed = agent.windows("ok"), agent.windows("failed")
        replayed = agent.logged_windows(replay)
    finally:
        feeder.stop()
        rc = agent.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return (
        table(f"replay: + dir: (`{' '.join(FAST)}`), {feeder.written} files dropped", samples)
        + f"\n\nwindows ok {ok:.0f} ({replayed} replayed), failed {failed:.0f}; exit status {rc}\n"
    )


def daemon_soak(minutes: float, clients: int) -> str:
    root = Path(tempfile.mkdtemp(prefix="ww", dir="/tmp"))  # Unix socket paths are short
    (root / "s").mkdir()
    trace_dir = root / "t"
    config = root / "kineto.conf"
    config.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
    env = dict(os.environ, KINETO_USE_DAEMON="1", KINETO_CONFIG=str(config), KINETO_IPC_SOCKET_DIR=str(root / "s"))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(minutes * 60 + 120)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(clients)
    ]
    agent = AgentProcess(
        "--source",
        f"kineto-daemon:socket_dir={root / 's'}",
        "--trace-dir",
        str(trace_dir),
        "--period",
        "2s",
        "--window",
        "200ms",
        "--jitter",
        "0s",
        "--collect-timeout",
        "2s",
    )
    deadline = time.monotonic() + minutes * 60
    try:
        samples = soak(
            agent,
            trace_dir,
            lambda f: time.monotonic() >= deadline,
            warm_windows=clients,
            every_s=15.0,
            progress=lambda f: print(f"  {f.windows:.0f} windows, {f.rss_mib:.1f} MiB", file=sys.stderr),
        )
        outcomes = {o: agent.windows(o) for o in ("ok", "empty", "failed", "timed_out")}
    finally:
        rc = agent.stop()
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(root, ignore_errors=True)
    return (
        table(
            f"kineto-daemon, {clients} PyTorch CPU clients polling every 1 s, {minutes:g} min "
            "(`--period 2s --window 200ms`)",
            samples,
        )
        + "\n\nwindows "
        + ", ".join(f"{o} {n:.0f}" for o, n in outcomes.items())
        + f"; exit status {rc}\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("replay", "daemon", "all"))
    parser.add_argument("--windows", type=int, default=1000, help="replay: replayed windows to run (default 1000)")
    parser.add_argument("--minutes", type=float, default=10.0, help="daemon: minutes to run (default 10)")
    parser.add_argument("--clients", type=int, default=2, help="daemon: PyTorch processes (default 2)")
    args = parser.parse_args(argv)
    if args.mode in ("replay", "all"):
        print(replay_soak(args.windows), flush=True)
    if args.mode in ("daemon", "all"):
        print(daemon_soak(args.minutes, args.clients), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
