"""Physical bounds of one window's estimates, and what the trace itself shows (docs/metrics.md,
"Physical bounds, and what the trace itself shows"). Pure math, like `analysis`, which uses it.

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
tests/test_bounds_truth.py checks it against a simulated stream. The `_total` counters keep the
unbounded sums, which stay unbiased over many windows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


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


def union_length(intervals: Iterable[tuple[float, float]]) -> tuple[float, list[tuple[float, float]]]:
    """The length of the union of `intervals` and the union itself (disjoint, sorted)."""
    merged: list[tuple[float, float]] = []
    total = 0.0
    cur_s = cur_e = 0.0
    started = False
    for s, e in sorted(intervals):
        if not started:
            cur_s, cur_e, started = s, e, True
        elif s > cur_e:
            merged.append((cur_s, cur_e))
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if started:
        merged.append((cur_s, cur_e))
        total += cur_e - cur_s
    return total, merged


def _covered(merged: Sequence[tuple[float, float]], a: float, b: float) -> float:
    """|U ∩ [a, b]| for a union given as disjoint sorted intervals."""
    out = 0.0
    for s, e in merged:
        lo, hi = max(s, a), min(e, b)
        if hi > lo:
            out += hi - lo
    return out


def device_bounds(by_stream: dict[object, list[tuple[float, float]]], t0: float, t1: float) -> DeviceBounds:
    """The bounds of one device from its captured intervals (d > 0), grouped by stream."""
    w = t1 - t0
    observed, merged = union_length(iv for ivs in by_stream.values() for iv in ivs)
    room = 0.0
    slots = 0
    first_max = t0
    last_min = t1
    streams = 0
    for ivs in by_stream.values():
        if not ivs:
            continue
        streams += 1
        first = min(s for s, _ in ivs)
        last = max(e for _, e in ivs)
        left, right = max(first - t0, 0.0), max(t1 - last, 0.0)
        room += left + right
        slots += (left > 0) + (right > 0)
        first_max = max(first_max, first)
        last_min = min(last_min, last)
    if streams == 0:
        return DeviceBounds(0.0, w, w, 2, 0)
    if first_max >= last_min:
        high = w
    else:
        edges = (first_max - t0) + (t1 - last_min)
        high = observed + edges - _covered(merged, t0, first_max) - _covered(merged, last_min, t1)
    return DeviceBounds(observed, min(max(high, observed), w), room, slots, streams)


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
