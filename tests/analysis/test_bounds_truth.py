"""The bounded window estimates against a known truth (docs/metrics.md, "Physical bounds").

A known activity stream (tests/activity.py) is cut into windows by Kineto's rule (a launch is kept
only when wholly inside the window); each window is written as a real trace and analysed. The
truth of ONE window is computed from the whole stream, straddlers included, with arithmetic of
its own: the busy time is the union of every launch clipped to [t0, t1], a kernel's time the sum
of its launches' overlaps with [t0, t1].

Claims checked on every window (not on average):
- the truth lies within the interval the analysis says the trace proves (`busy_bounds`), and the
  bounded busy ratio within it too, <= 1;
- the bounded busy ratio is never further from the window's truth than the unbounded estimate;
- the device's vector of bounded kernel times is never further (Euclidean) from the vector of true
  kernel times than the unbounded one; on one stream the bounded time shares add up to <= 1;
- over all windows the unbounded sums (what the counters add) stay unbiased, and the bounded ones
  are closer to each window's truth on average (mean absolute error).

The one assumption of the bounds (windowbounds module doc): a dropped straddler ran on a stream
that shows a launch in the window. The scenarios keep it: one stream, and two streams each busy
in every burst; windows where a stream overlapping the window shows no launch are counted and
left out of the per-window claims (asserted rare).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence

import pytest

from support.activity import KernelType, Launch, Scenario, StreamSpec, generate, trace_doc
from warpwatch.analysis.window import analyze
from warpwatch.trace import parse_trace

GEMMS = Scenario(  # the A100 trace: 117 ms GEMMs back to back on one stream, 588 ms windows
    "one stream, 80-120 ms GEMMs and short kernels back to back",
    588_000.0,
    60e6,
    (
        StreamSpec(
            7, (KernelType("gemm", 132, (80_000, 120_000), 0.6), KernelType("small", 66, (200, 2_000), 0.4)), (0, 300)
        ),
    ),
    burst_us=5e6,
    idle_us=1e6,
)
TWO_STREAMS = Scenario(
    "two streams, 5 us to 30 ms, NCCL overlapping",
    50_000.0,
    8e6,
    (
        StreamSpec(
            7,
            (
                KernelType("tiny", 2, (5, 5), 0.45),
                KernelType("gemm", 132, (150, 250), 0.3),
                KernelType("attn", 66, (500, 4000), 0.24),
                KernelType("long", 132, (30_000, 30_000), 0.01),
            ),
            (2, 20),
        ),
        StreamSpec(20, (KernelType("nccl", 16, (2000, 8000), 1.0),), (0, 2000), every=10_000),
    ),
    burst_us=300_000,
    idle_us=150_000,
)


def clipped(x: Launch, t0: float, t1: float) -> float:
    return max(0.0, min(x.end, t1) - max(x.ts, t0))


def true_busy(launches: Sequence[Launch], t0: float, t1: float) -> float:
    pieces = sorted((max(x.ts, t0), min(x.end, t1)) for x in launches if clipped(x, t0, t1) > 0)
    total, end = 0.0, -math.inf
    for s, e in pieces:
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def cases(sc: Scenario, n: int, seed: int) -> list[tuple[float, float, list[Launch], list[Launch]]]:
    """(t0, t1, kept by Kineto's rule, every launch overlapping the window)."""
    rng = random.Random(seed)
    stream = generate(sc, rng)
    w = sc.window_us
    out = []
    for _ in range(n):
        t0 = rng.uniform(0, sc.horizon_us - w)
        t1 = t0 + w
        near = [x for x in stream if x.end > t0 and x.ts < t1]
        kept = [x for x in near if x.ts >= t0 and x.end <= t1]
        if kept:
            out.append((t0, t1, kept, near))
    return out


def run(sc: Scenario, n: int, seed: int) -> dict[str, float]:
    err_b = err_u = share_err_b = share_err_u = 0.0
    sum_counted = sum_truth = 0.0
    windows = skipped = bounded = 0
    for t0, t1, kept, near in cases(sc, n, seed):
        doc = trace_doc(t0, t1 - t0, kept)
        result = analyze(parse_trace(json.dumps(doc).encode(), "sim.json"))
        (dev,) = result.devices
        w = t1 - t0
        truth_busy = true_busy(near, t0, t1) / w
        truth_k: dict[str, float] = {}
        for x in near:
            truth_k[x.name] = truth_k.get(x.name, 0.0) + clipped(x, t0, t1)
        sum_counted += dev.busy_time or 0.0
        sum_truth += truth_busy * w
        shown = {x.stream for x in kept}
        if {x.stream for x in near} - shown:
            skipped += 1  # a stream with a straddler but no captured launch: outside the assumption
            continue
        windows += 1
        assert dev.busy_bounds is not None and dev.busy_ratio is not None
        lo, hi = dev.busy_bounds
        assert lo - 1e-9 <= truth_busy <= hi + 1e-9, (t0, truth_busy, dev.busy_bounds)
        assert lo - 1e-12 <= dev.busy_ratio <= min(hi, 1.0) + 1e-12
        unbounded = (dev.busy_time or 0.0) / w
        assert abs(dev.busy_ratio - truth_busy) <= abs(unbounded - truth_busy) + 1e-12, t0
        err_b += abs(dev.busy_ratio - truth_busy)
        err_u += abs(unbounded - truth_busy)
        names = truth_k.keys() | {k.name for k in result.kernels}
        est_b = {k.name: k.gpu_time for k in result.kernels}
        est_u = {k.name: k.counted_gpu_time for k in result.kernels}
        dist_b = math.dist([est_b.get(m, 0.0) for m in names], [truth_k.get(m, 0.0) for m in names])
        dist_u = math.dist([est_u.get(m, 0.0) for m in names], [truth_k.get(m, 0.0) for m in names])
        assert dist_b <= dist_u * (1 + 1e-12) + 1e-9, (t0, dist_b, dist_u)
        for k in result.kernels:  # never below what the trace shows
            assert k.observed_gpu_time is not None and k.gpu_time >= k.observed_gpu_time - 1e-9
        share_err_b += dist_b / w
        share_err_u += dist_u / w
        bounded += any(k.bounded for k in result.kernels) or dev.unbounded_busy_ratio is not None
        if len(sc.streams) == 1:
            assert sum(k.time_share or 0.0 for k in result.kernels) <= 1 + 1e-12
            assert dev.busy_ratio <= 1.0
    return {
        "windows": windows,
        "skipped": skipped,
        "bounded": bounded,
        "busy_mae_bounded": err_b / windows,
        "busy_mae_unbounded": err_u / windows,
        "share_l2_bounded": share_err_b / windows,
        "share_l2_unbounded": share_err_u / windows,
        "counted_over_truth": sum_counted / sum_truth,
    }


def test_bounded_estimates_are_never_further_from_one_windows_truth_one_stream_of_long_gemms() -> None:
    got = run(GEMMS, 400, seed=1)
    assert got["windows"] > 300 and got["skipped"] == 0  # one stream: every window keeps the assumption
    assert got["bounded"] > 0.3 * got["windows"]  # the bound matters here, often
    # measured at seed 1: busy MAE 0.037 bounded vs 0.069 unbounded; kernel times 0.037 vs 0.069 of W
    assert got["busy_mae_bounded"] < 0.7 * got["busy_mae_unbounded"]
    assert got["share_l2_bounded"] < 0.7 * got["share_l2_unbounded"]
    # the counters' sums stay unbiased: 0.994-1.006 over seeds 1-5 (400 windows of a 60 s stream)
    assert got["counted_over_truth"] == pytest.approx(1.0, abs=0.05)


def test_bounded_estimates_are_never_further_from_one_windows_truth_two_streams() -> None:
    got = run(TWO_STREAMS, 400, seed=2)
    assert got["windows"] > 200 and got["skipped"] < 0.1 * (got["windows"] + got["skipped"])
    assert got["bounded"] > 0
    # measured at seed 2: busy MAE 0.100 vs 0.189; kernel times 0.246 vs 0.356 of W
    assert got["busy_mae_bounded"] < 0.7 * got["busy_mae_unbounded"]
    assert got["share_l2_bounded"] < 0.85 * got["share_l2_unbounded"]
    assert got["counted_over_truth"] == pytest.approx(1.0, abs=0.05)  # 0.991-1.015 over seeds 2-5
