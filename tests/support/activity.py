"""A known GPU activity stream, cut into capture windows by Kineto's rule and written as traces.

The stream lives on a circle of length `horizon_us` (it wraps around), so a window placed
uniformly at random anywhere holds each kernel with exactly the probability (W - d)/W of
kineto-facts.md whatever its position, and the truth is a plain property of the stream:

- a kernel's time share is its total duration / horizon;
- a kernel's duration-weighted mean of x is Σ d·x / Σ d over its launches;
- the busy ratio is the length of the union of all launches (both streams) / horizon;
- the device's resident warps per SM are Σ d·resident / horizon, its occupancy that / M.

Every number here is computed from the stream with arithmetic of its own (grids are single waves
on an H100 with 128-thread blocks, so resident warps per SM = launched warps per SM =
B·ceil(T/32)/132 — no occupancy calculator involved); nothing calls warpwatch.

`windows()` applies Kineto's rule (keep an activity only when it lies wholly inside the window) and
`write_windows()` writes each window as a real Kineto trace file with its `Trace` span event.
Used by tests/dashboards/test_aggregation_truth.py (small, in CI) and benchmarks/aggregation.py (large).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.tracebuild import H100, kernel, span

SMS = H100["numSms"]
M = H100["maxThreadsPerMultiprocessor"] // H100["warpSize"]
BLOCK = (128, 1, 1)
WARPS_PER_BLOCK = 4  # ceil(128 / 32)


@dataclass(frozen=True, slots=True)
class KernelType:
    """A kernel name with one launch configuration and a duration range (µs)."""

    name: str
    grid: int
    dur: tuple[float, float]
    weight: float
    """Relative frequency among the launches of its stream."""

    @property
    def warps_per_sm(self) -> float:
        return self.grid * WARPS_PER_BLOCK / SMS


@dataclass(frozen=True, slots=True)
class StreamSpec:
    stream: int
    kernels: tuple[KernelType, ...]
    gap: tuple[float, float]
    """Idle time between two launches of the stream within a burst (µs, uniform)."""
    every: float = 0.0
    """0: back-to-back with `gap`; else one launch starting every `every` µs (plus jitter)."""


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    window_us: float
    horizon_us: float
    streams: tuple[StreamSpec, ...]
    burst_us: float
    """Mean length of a busy stretch (exponential)."""
    idle_us: float
    """Mean length of an idle stretch between bursts (exponential): long ones leave empty windows."""


@dataclass(slots=True)
class Launch:
    name: str
    grid: int
    stream: int
    ts: float
    dur: float

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(slots=True)
class Truth:
    """What the stream really did, per unit of time."""

    share: dict[str, float] = field(default_factory=dict)
    mean_warps: dict[str, float] = field(default_factory=dict)
    busy: float = 0.0
    resident: float = 0.0
    occupancy: float = 0.0


def generate(sc: Scenario, rng: random.Random) -> list[Launch]:
    """The stream: bursts and idle stretches; within a burst each stream launches its kernels."""
    bursts: list[tuple[float, float]] = []
    t = 0.0
    while t < sc.horizon_us:
        length = rng.expovariate(1 / sc.burst_us)
        bursts.append((t, min(t + length, sc.horizon_us)))
        t += length + rng.expovariate(1 / sc.idle_us)
    out: list[Launch] = []
    for spec in sc.streams:
        names = [k for k in spec.kernels]
        weights = [k.weight for k in spec.kernels]
        for b0, b1 in bursts:
            t = b0
            while True:
                k = rng.choices(names, weights)[0]
                d = rng.uniform(*k.dur)
                if t + d > b1:
                    break
                out.append(Launch(k.name, k.grid, spec.stream, t, d))
                t = t + spec.every + rng.uniform(*spec.gap) if spec.every else t + d + rng.uniform(*spec.gap)
                t = max(t, out[-1].end)  # a stream runs one kernel at a time
    out.sort(key=lambda x: x.ts)
    return out


def truth(sc: Scenario, launches: Sequence[Launch]) -> Truth:
    horizon = sc.horizon_us
    out = Truth()
    time: dict[str, float] = {}
    warps: dict[str, float] = {}
    for x in launches:
        time[x.name] = time.get(x.name, 0.0) + x.dur
        warps[x.name] = warps.get(x.name, 0.0) + x.dur * x.grid * WARPS_PER_BLOCK / SMS
    out.share = {k: v / horizon for k, v in time.items()}
    out.mean_warps = {k: warps[k] / time[k] for k in time}
    out.resident = sum(warps.values()) / horizon
    out.occupancy = out.resident / M
    union = 0.0
    cur_start = cur_end = None
    for x in sorted(launches, key=lambda y: y.ts):
        if cur_end is None or x.ts > cur_end:
            if cur_end is not None and cur_start is not None:
                union += cur_end - cur_start
            cur_start, cur_end = x.ts, x.end
        else:
            cur_end = max(cur_end, x.end)
    if cur_end is not None and cur_start is not None:
        union += cur_end - cur_start
    # the circle: launches never run past the horizon (bursts end inside it), so no wrap overlap
    out.busy = union / horizon
    return out


def windows(
    sc: Scenario, launches: Sequence[Launch], n: int, rng: random.Random, window_us: float | None = None
) -> list[tuple[float, list[Launch]]]:
    """`n` windows of length W, each with the launches Kineto keeps: those wholly inside (a window
    running past the horizon wraps around). Positions are stratified: window i starts uniformly at
    random within the i-th n-th of the circle, so each position is equally likely (the estimates
    stay unbiased) and the stream is covered evenly, as periodic captures cover a workload."""
    w = window_us or sc.window_us
    horizon = sc.horizon_us
    starts = [(i + rng.random()) * horizon / n for i in range(n)]
    out = []
    for t0 in starts:
        t1 = t0 + w
        kept = [x for x in launches if x.ts >= t0 and x.end <= t1]
        if t1 > horizon:  # wrapped part: the start of the stream, shifted by one horizon
            kept += [
                Launch(x.name, x.grid, x.stream, x.ts + horizon, x.dur)
                for x in launches
                if x.ts + horizon >= t0 and x.end + horizon <= t1
            ]
        out.append((t0, kept))
    return out


def trace_doc(t0: float, w: float, kept: Sequence[Launch]) -> dict[str, Any]:
    events = [span(t0, w)]
    for x in kept:
        ev = kernel(x.name, ts=x.ts, dur=x.dur, grid=(x.grid, 1, 1), block=BLOCK)
        ev["tid"] = x.stream
        ev["args"]["stream"] = x.stream
        events.append(ev)
    return {"schemaVersion": 1, "deviceProperties": [H100], "traceEvents": events}


def write_windows(
    folder: Path,
    sc: Scenario,
    cut: Sequence[tuple[float, list[Launch]]],
    worker: str = "sim",
    window_us: float | None = None,
) -> list[Path]:
    """One trace file per window, named like `tensorboard_trace_handler`'s output (one worker, so
    the agent treats them as one process), in capture order."""
    w = window_us or sc.window_us
    paths = []
    for i, (t0, kept) in enumerate(cut):
        path = folder / f"{worker}.{1_700_000_000_000_000_000 + i:019d}.pt.trace.json"
        path.write_text(json.dumps(trace_doc(t0, w, kept)))
        paths.append(path)
    return paths
