"""Truth vs the old queries vs the new ones, over many seeds: the table of issue 12.

    python benchmarks/aggregation.py [--seeds 20] [--windows 240]

Each seed draws a known activity stream (tests/support/activity.py: two streams, kernels from 5 µs to
30 ms = 0.6 W, 2-8 ms NCCL kernels overlapping them, idle stretches; the d >= W scenarios add
100 ms = 2 W kernels), cuts `--windows` 50 ms windows at random positions by Kineto's rule, and
analyses each with `warpwatch.analysis.window.analyze` (the agent's own analysis, fed `Trace` objects
built from the kept launches instead of files, for speed: tests/dashboards/test_aggregation_truth.py proves
the file -> agent -> Prometheus -> query path gives these sums).

- truth: the stream's own time shares, duration-weighted mean warps per SM of `attn`, busy ratio
  (union of both streams) and occupancy;
- old query: what the 0.1 dashboards showed, avg_over_time of the per-window gauges — a kernel's
  gauge exists only in windows that captured it, the GPU's only in windows with launches — with
  0.1's busy formula (union of captured launches + Σ(h - 1)·d, capped at 1) and occupancy capped
  at the SM maximum;
- new query: the ratio of the counters' sums, as rate(...)/rate(...) reads them (every window,
  empty ones included, in the denominator).

Printed: mean over seeds, and the standard deviation of the new estimate (the noise left).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "agent"))
sys.path.insert(0, str(ROOT / "tests"))

from support.activity import (  # noqa: E402
    BLOCK,
    KernelType,
    Launch,
    M,
    Scenario,
    StreamSpec,
    generate,
    truth,
    windows,
)
from support.tracebuild import H100  # noqa: E402
from warpwatch.analysis.window import analyze  # noqa: E402
from warpwatch.model import DeviceProperties, KernelLaunch, Trace, TraceWindow  # noqa: E402
from warpwatch.service.windowplan import WindowPlanner  # noqa: E402

W = 50_000.0
COMPUTE = (
    KernelType("tiny", 2, (5, 5), 0.45),
    KernelType("gemm", 132, (150, 250), 0.3),
    KernelType("attn", 66, (500, 1500), 0.15),
    KernelType("attn", 264, (2000, 4000), 0.09),
    KernelType("long", 132, (30_000, 30_000), 0.01),
)
NCCL = StreamSpec(20, (KernelType("nccl", 16, (2000, 8000), 1.0),), (0, 2000), every=10_000)
MIXED = Scenario("mixed", W, 20e6, (StreamSpec(7, COMPUTE, (2, 20)), NCCL), burst_us=300_000, idle_us=150_000)
HUGE = replace(
    MIXED,
    name="huge",
    streams=(StreamSpec(7, (*COMPUTE, KernelType("huge", 264, (100_000, 100_000), 0.003)), (2, 20)), NCCL),
)
PROPS = DeviceProperties(
    id=0,
    name=H100["name"],
    compute_major=9,
    compute_minor=0,
    num_sms=H100["numSms"],
    warp_size=32,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
    regs_per_block=65536,
    regs_per_sm=65536,
    shared_mem_per_block=49152,
    shared_mem_per_sm=233472,
    shared_mem_per_block_optin=232448,
)


def as_trace(t0: float, w: float, kept: Sequence[Launch]) -> Trace:
    launches = tuple(
        KernelLaunch(x.name, 0, x.ts, x.dur, x.stream, (x.grid, 1, 1), BLOCK, 32, 0, None, None, None) for x in kept
    )
    return Trace("sim", {0: PROPS}, launches, TraceWindow(t0, t0 + w, "trace_span"), None)


@dataclass
class Estimates:
    share: dict[str, float]
    attn: float
    busy: float
    occupancy: float


def old_busy(kept: Sequence[Launch], w: float) -> float:
    """warpwatch 0.1's formula: union of captured intervals + Σ(h - 1)·d, capped at 1."""
    union = 0.0
    end = None
    start = 0.0
    for x in sorted(kept, key=lambda y: y.ts):
        if end is None or x.ts > end:
            if end is not None:
                union += end - start
            start, end = x.ts, x.end
        else:
            end = max(end, x.end)
    if end is not None:
        union += end - start
    missing = sum((w / (w - x.dur) - 1) * x.dur for x in kept)
    return min(1.0, (union + missing) / w)


def estimate(cut: Sequence[tuple[float, float, list[Launch]]]) -> tuple[Estimates, Estimates]:
    """(old, new) from windows (t0, W, kept)."""
    sums: dict[str, float] = {}
    attn_x = observed = busy = resident = 0.0
    per_window: dict[str, list[float]] = {}
    attn_means: list[float] = []
    busy_old: list[float] = []
    occ_old: list[float] = []
    for t0, w, kept in cut:
        a = analyze(as_trace(t0, w, kept))
        observed += w
        for k in a.kernels:
            sums[k.name] = sums.get(k.name, 0.0) + k.counted_gpu_time  # what the counters add
            per_window.setdefault(k.name, []).append(k.counted_gpu_time / w)  # 0.1: unbounded gauges
            if k.name == "attn":
                attn_x += k.weighted_sums["warps_per_sm"]
                assert k.warps_per_sm is not None
                attn_means.append(k.warps_per_sm)
        for d in a.devices:
            busy += d.busy_time or 0.0
            resident += d.resident_time or 0.0
            busy_old.append(old_busy(kept, w))
            occ_old.append(min(float(M), (d.resident_time or 0.0) / w) / M)
    new = Estimates(
        {k: v / observed for k, v in sums.items()},
        attn_x / sums.get("attn", 1.0),
        busy / observed,
        resident / observed / M,
    )
    old = Estimates(
        {k: statistics.mean(v) for k, v in per_window.items()},
        statistics.mean(attn_means) if attn_means else 0.0,
        statistics.mean(busy_old) if busy_old else 0.0,
        statistics.mean(occ_old) if occ_old else 0.0,
    )
    return old, new


def fixed(sc: Scenario, stream: list[Launch], n: int, rng: random.Random) -> list[tuple[float, float, list[Launch]]]:
    return [(t0, sc.window_us, kept) for t0, kept in windows(sc, stream, n, rng)]


def adaptive(sc: Scenario, stream: list[Launch], n: int, rng: random.Random) -> list[tuple[float, float, list[Launch]]]:
    """Windows chosen by the agent's planner (duty cap 10 % of a 2 s period: W up to 200 ms)."""
    plan = WindowPlanner(base=sc.window_us / 1e6, period=2.0, max_duty=0.1)
    out = []
    for _ in range(n):
        w_s, _probe = plan.next()
        w = w_s * 1e6
        ((t0, kept),) = windows(sc, stream, 1, rng, window_us=w)
        out.append((t0, w, kept))
        plan.observe(max((x.dur for x in kept), default=0.0) / 1e6)
    return out


CASES: tuple[tuple[str, Scenario, Callable[..., list[tuple[float, float, list[Launch]]]]], ...] = (
    ("W/2 < d < W and overlapping streams (W = 50 ms)", MIXED, fixed),
    ("d >= W (100 ms kernels), fixed W = 50 ms", HUGE, fixed),
    ("d >= W (100 ms kernels), --adaptive-window", HUGE, adaptive),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--windows", type=int, default=240)
    args = parser.parse_args()
    started = time.monotonic()
    for title, sc, cutter in CASES:
        rows: dict[str, list[tuple[float, float, float]]] = {}
        for seed in range(args.seeds):
            rng = random.Random(seed)
            stream = generate(sc, rng)
            t = truth(sc, stream)
            old, new = estimate(cutter(sc, stream, args.windows, rng))
            names = ["tiny", "gemm", "attn", "long", "nccl", *(["huge"] if "huge" in t.share else [])]
            for name in names:
                rows.setdefault(f"time share {name}", []).append(
                    (t.share[name], old.share.get(name, 0.0), new.share.get(name, 0.0))
                )
            rows.setdefault("attn mean warps/SM", []).append((t.mean_warps["attn"], old.attn, new.attn))
            rows.setdefault("busy ratio", []).append((t.busy, old.busy, new.busy))
            rows.setdefault("occupancy", []).append((t.occupancy, old.occupancy, new.occupancy))
        print(f"\n### {title}: {args.seeds} seeds x {args.windows} windows\n")
        print("| quantity | truth | old query | new query | sd of new |")
        print("|---|---|---|---|---|")
        for name, values in rows.items():
            tr, old_v, new_v = (statistics.mean(v[i] for v in values) for i in range(3))
            sd = statistics.stdev(v[2] - v[0] for v in values) if len(values) > 1 else 0.0
            print(
                f"| {name} | {tr:.4f} | {old_v:.4f} ({old_v - tr:+.4f}) | {new_v:.4f} ({new_v - tr:+.4f}) | {sd:.4f} |"
            )
    print(f"\n{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
