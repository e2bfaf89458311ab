"""The kineto-daemon path on a real torch loop: one client process (KINETO_USE_DAEMON=1, its own
socket folder and a 1-s poll, tests/support/daemonpeer.Peer) runs CPU matmuls for the whole
section and records each step's start (wall clock) and length; arms without and with the agent
(`warpwatch run --source kineto-daemon:socket_dir=...`) take turns beside it.

A window runs from the first event of its trace (Kineto's `baseTimeNanoseconds` plus the earliest
`ts`) to the moment its file was last written (mtime): the recording and the client's own export
of the trace. The agent deletes each trace once read; `watch.TraceKeeper` keeps a link to it.
The agent asks Kineto for GPU activities only (kernels, memcpy, memset; no CPU op): on this
CPU-only machine a trace holds Kineto's own markers and nothing else, so what is measured here is
the on-demand machinery (the 1-s poll, the start, the trace write) and the agent beside the loop,
not CUPTI's cost on a GPU.
`torch.autograd` cannot say when an on-demand trace runs (`_profiler_enabled()` stays False in
torch 2.13 while Kineto traces on demand), hence the trace files.
"""

from __future__ import annotations

import array
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from support.agent import Agent
from support.daemonpeer import Peer

from .split import Span, StepSamples, step_samples
from .timeline import step_timeline
from .vllmarms import _finish_agent
from .watch import TraceFile, TraceKeeper, TreeSampler

CLIENT = """
import array, os, sys, time
import torch
stop, out, deadline = sys.argv[1], sys.argv[2], time.time() + float(sys.argv[3])
torch.manual_seed(0)
torch.set_num_threads(1)
a, b = torch.randn(256, 256), torch.randn(256, 256)
steps = array.array("d")
n = 0
while n % 64 or not (os.path.exists(stop) or time.time() > deadline):
    t0 = time.time()
    for _ in range(4):
        a = (a @ b).tanh()
    steps.append(t0)
    steps.append(time.time() - t0)
    n += 1
with open(out, "wb") as f:
    steps.tofile(f)
"""
"""Each step: four 256x256 matmuls and tanh on one thread (torch.set_num_threads(1): the agent and
the loop do not wait on each other's OpenMP barriers on 2 cores)."""

SPAN_LIMIT_S = 60.0
AGENT_ARGS = ("--period", "10s", "--window", "1s")
ARM_KEYS = ("none", "agent")


@dataclass
class DaemonArm:
    arm: str
    round: int
    t0: float
    t1: float
    windows: list[Span]
    trace_bytes: int
    agent: dict[str, Any] = field(default_factory=dict)
    samples: StepSamples | None = None
    timeline: dict[str, Any] = field(default_factory=dict)
    """Where each window's cost landed in the loop's steps (`timeline.step_timeline`)."""

    @property
    def starts(self) -> list[float]:
        return sorted(a for a, _ in self.windows)


class TorchLoop:
    """The client process, for the whole section (it ends by itself after `lifetime_s` at the latest)."""

    def __init__(self, peer: Peer, lifetime_s: float) -> None:
        self.stop_file = peer.root / "stop"
        self.out = peer.root / "steps.bin"
        self.log = open(peer.root / "client.log", "wb")  # noqa: SIM115 (closed in finish)
        args = [sys.executable, "-c", CLIENT, str(self.stop_file), str(self.out), str(lifetime_s)]
        self.proc = subprocess.Popen(args, env=peer.env(), stdout=self.log, stderr=self.log)

    def finish(self, timeout_s: float = 120.0) -> list[Span]:
        """Asks the loop to end; its steps as (start, seconds)."""
        self.stop_file.touch()
        rc = self.proc.wait(timeout_s)
        self.log.close()
        if rc != 0:
            raise RuntimeError(f"the torch loop exited with {rc}; see {self.log.name}")
        values = array.array("d")
        with open(self.out, "rb") as f:
            values.frombytes(f.read())
        return list(zip(values[0::2], values[1::2], strict=True))


def trace_span(f: TraceFile) -> Span | None:
    """A Kineto trace's first event to its file's last write, on the wall clock (seconds)."""
    try:
        doc = json.loads(f.path.read_text())
    except (OSError, ValueError):
        return None
    base_s = float(doc.get("baseTimeNanoseconds", 0)) / 1e9
    starts = [base_s + float(e["ts"]) / 1e6 for e in doc.get("traceEvents", []) if isinstance(e, dict) and "ts" in e]
    starts = [t for t in starts if f.mtime - SPAN_LIMIT_S < t <= f.mtime]  # metadata events may carry ts 0
    return (min(starts), f.mtime) if starts else None


def run_daemon_arm(key: str, peer: Peer, keeper: TraceKeeper, arm_s: float, round_: int) -> DaemonArm:
    agent, sampler = None, None
    if key == "agent":
        agent = Agent(
            "--source",
            f"kineto-daemon:socket_dir={peer.socket_dir}",
            "--trace-dir",
            str(peer.trace_dir),
            *AGENT_ARGS,
            startup_timeout=180.0,
            defaults=True,
        )
        sampler = TreeSampler(agent.proc.pid)
        sampler.sample()
    t0 = time.time()
    cpu0 = sampler.cpu_seconds() if sampler else 0.0
    time.sleep(arm_s)
    report = _finish_agent(agent, sampler, cpu0, arm_s) if agent and sampler else {}
    time.sleep(2.0)  # a trace the client still writes lands in this arm
    t1 = time.time()
    files = keeper.collect()
    windows = [s for f in files if (s := trace_span(f)) is not None]
    keeper.forget(files, remove_originals=True)
    return DaemonArm(key, round_, t0, t1, windows, sum(f.size for f in files), report)


def run_daemon_section(peer: Peer, rounds: int, arm_s: float, log: Any) -> list[DaemonArm]:
    """`rounds` x (no agent, agent), interleaved, beside one torch loop."""
    keeper = TraceKeeper(peer.trace_dir, peer.root / "keep")
    loop = TorchLoop(peer, lifetime_s=rounds * len(ARM_KEYS) * (arm_s + 60.0) + 120.0)
    arms: list[DaemonArm] = []
    try:
        time.sleep(3.0)  # torch imported, the loop running
        for r in range(rounds):
            for key in ARM_KEYS:
                arm = run_daemon_arm(key, peer, keeper, arm_s, r)
                log(f"kineto-daemon round {r + 1}/{rounds} {key}: {len(arm.windows)} windows")
                arms.append(arm)
        steps = loop.finish()
    finally:
        if loop.proc.poll() is None:
            loop.proc.kill()
        keeper.close()
    for arm in arms:
        arm.samples = step_samples(steps, arm.windows, arm.t0, arm.t1)
        arm.timeline = step_timeline(steps, arm.windows, arm.t0, arm.t1) if arm.windows else {}
    return arms
