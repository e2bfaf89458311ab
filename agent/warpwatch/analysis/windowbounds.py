"""Physical bounds of one window's estimates, and what the trace itself shows (docs/metrics.md,
"Physical bounds, and what the trace itself shows"). Pure math, like `window`, which uses it.

The sampling-window weights h = W / (W - d) make window sums unbiased over many windows, but one
window's estimate can leave what is possible: five 117 ms kernels back to back on one stream in
a 588 ms window give Σh·d / W = 1.24. What the trace proves about one window:

- every captured launch ran: the observed union U of their intervals, and each kernel's observed
  Σd, are lower bounds;
- Kineto dropped only launches not wholly inside [t0, t1]: a dropped launch straddles an edge.
  On a stream that shows a launch in the window, a straddler of the left edge ends before the
  stream's first captured start, one of the right edge starts after its last captured end. So
  the time dropped launches ran inside the window lies in [t0, max_s first_s] ∪ [min_s last_s, t1]
  outside U (busy), and adds at most Σ_s room_s to the kernels' times, where room_s is stream s's
  idle-looking time at the two edges; at most one launch per stream and edge (launch counts).

(The one assumption: a dropped straddler ran on a stream that shows a launch in the window. A
stream with no captured launch at all is invisible to the trace, and so is what it ran.)

An estimate outside its interval is brought to the nearest point of it: for the busy time a
clamp; for the kernels of a device, whose excesses over their observed values share one room,
the Euclidean projection onto {excess >= 0, Σ excess <= room}. Both are projections onto a convex
set that holds the truth, so the bounded estimate is never further from the window's truth than
the unbounded one (busy: per window; kernels: the device's vector of kernel times per window) —
tests/analysis/test_bounds_truth.py checks it against a simulated stream. The `_total` counters keep the
unbounded sums, which stay unbiased over many windows.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from ..model import KernelLaunch

_DEVICE, _STREAM, _TS, _DUR = attrgetter("device"), attrgetter("stream"), attrgetter("ts"), attrgetter("dur")


@dataclass(frozen=True, slots=True)
class DeviceBounds:
    """What the captured launches of one device prove about its window (times in µs)."""

    observed: float
    """|U|: the union of the captured launches' intervals."""
    busy_high: float
    """|U ∪ [t0, A] ∪ [B, t1]|: the most time a kernel can have run in the window."""
    room: float
    """Σ over streams of their idle-looking edge time: the most dropped straddlers add to kernel time."""
    slots: int
    """Stream edges with idle-looking time: the most launches Kineto can have dropped."""
    streams: int


def stream_edges(launches: Sequence[KernelLaunch], t0: float, t1: float) -> dict[int, dict[object, list[float]]]:
    """Per device and stream, [first start, last end] of the captured launches of d > 0 (wholly
    inside [t0, t1], as `analysis.sampling_weight` keeps them)."""
    out: dict[int, dict[object, list[float]]] = {}
    for dev, stream, ts, d in zip(
        map(_DEVICE, launches), map(_STREAM, launches), map(_TS, launches), map(_DUR, launches), strict=True
    ):
        end = ts + d
        if d <= 0 or ts < t0 or end > t1:
            continue
        streams = out.get(dev)
        if streams is None:
            streams = out[dev] = {}
        edge = streams.get(stream)
        if edge is None:
            streams[stream] = [ts, end]
        else:
            if ts < edge[0]:
                edge[0] = ts
            if end > edge[1]:
                edge[1] = end
    return out


def union_length(intervals: list[tuple[float, float]]) -> tuple[float, list[tuple[float, float]]]:
    """The length of the union of `intervals` (sorted in place) and the union itself (disjoint, sorted)."""
    intervals.sort()
    merged: list[tuple[float, float]] = []
    if not intervals:
        return 0.0, merged
    cur_s, cur_e = intervals[0]
    for s, e in intervals:
        if s > cur_e:
            merged.append((cur_s, cur_e))
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    merged.append((cur_s, cur_e))
    return sum(e - s for s, e in merged), merged


def _covered(merged: Sequence[tuple[float, float]], a: float, b: float) -> float:
    """|U ∩ [a, b]| for a union given as disjoint sorted intervals."""
    out = 0.0
    for s, e in merged[max(bisect.bisect_left(merged, (a, a)) - 1, 0) :]:
        if s >= b:
            break
        lo, hi = max(s, a), min(e, b)
        if hi > lo:
            out += hi - lo
    return out


def device_bounds(
    intervals: list[tuple[float, float]], edges: dict[object, list[float]], t0: float, t1: float
) -> DeviceBounds:
    """The bounds of one device from its captured intervals (d > 0; sorted in place) and each
    stream's [first start, last end] (`stream_edges`)."""
    w = t1 - t0
    observed, merged = union_length(intervals)
    if not edges:
        return DeviceBounds(0.0, w, w, 2, 0)
    room = 0.0
    slots = 0
    first_max = t0
    last_min = t1
    for first, last in edges.values():
        left, right = max(first - t0, 0.0), max(t1 - last, 0.0)
        room += left + right
        slots += (left > 0) + (right > 0)
        first_max = max(first_max, first)
        last_min = min(last_min, last)
    if first_max >= last_min:
        high = w
    else:
        edge_time = (first_max - t0) + (t1 - last_min)
        high = observed + edge_time - _covered(merged, t0, first_max) - _covered(merged, last_min, t1)
    return DeviceBounds(observed, min(max(high, observed), w), room, slots, len(edges))


def clamp(value: float, low: float, high: float) -> float:
    return low if value < low else high if value > high else value


def project_excess(excess: Sequence[float], cap: float) -> list[float]:
    """The Euclidean projection of `excess` (each >= 0) onto {x >= 0, Σx <= cap}: unchanged when
    it already lies there, else x_k = max(excess_k - λ, 0) with λ such that Σx = cap."""
    if sum(excess) <= cap:
        return list(excess)
    if cap <= 0:
        return [0.0] * len(excess)
    ordered = sorted(excess, reverse=True)
    running = 0.0
    lam = 0.0
    for i, x in enumerate(ordered):
        running += x
        candidate = (running - cap) / (i + 1)
        if i + 1 == len(ordered) or ordered[i + 1] <= candidate:
            lam = candidate
            break
    return [x - lam if x > lam else 0.0 for x in excess]
