"""The per-launch loops of the window statistics: launches grouped with their sampling weights,
and the busy-time estimator. Pure math, like `window` (which uses them); each runs in C where
`_windowmath.c`, their compiled twin, is built (the same operations in the same order, so the same
floats: tests/analysis/test_windowmath.py), else in Python as written here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from operator import attrgetter, itemgetter

from ..model import KernelLaunch, TraceWindow
from ..runtime import native

_native = native.load("warpwatch.analysis._windowmath")
NATIVE = _native is not None
"""Run the per-launch loops of `group_launches` and `busy_time` in C (`_windowmath.c`, the same
arithmetic in the same order); False: in Python (`native`)."""

GROUP_KEY = attrgetter(
    "device",
    "name",
    "grid",
    "block",
    "registers_per_thread",
    "shared_memory",
    "reported_warps_per_sm",
    "reported_blocks_per_sm",
    "reported_occupancy_pct",
    "launch_api",
)
"""Launches equal on these fields have equal metrics and artefacts; only ts and dur differ."""


class Group:
    """Launches with one group key: count, weighted sums, and the captured intervals."""

    __slots__ = ("first", "intervals", "longest", "n", "sum_h", "sum_hd", "sum_lim")

    def __init__(self, first: KernelLaunch) -> None:
        self.first = first
        self.n = 0
        self.sum_h = self.sum_hd = self.sum_lim = 0.0
        self.intervals: list[tuple[float, float]] = []
        self.longest = 0.0
        """The longest of `intervals` (0 when there are none)."""


def group_launches(launches: Sequence[KernelLaunch], window: TraceWindow) -> list[Group]:
    """Group the launches by `GROUP_KEY` and weigh each (as `analysis.sampling_weight`), in one pass.

    This runs once per launch (hundreds of thousands in a large trace): keys and times are
    gathered by C-level `map`s, and the loop does only the arithmetic (in C where `_windowmath` is
    built: the same operations in the same order, so the same floats).
    """
    index = _Numbering()
    gids = list(map(index.__getitem__, map(GROUP_KEY, launches)))
    first = dict(zip(reversed(gids), reversed(launches), strict=True))  # group -> its first launch
    groups = [Group(first[gid]) for gid in range(len(index))]
    for gid, n in Counter(gids).items():
        groups[gid].n = n
    t0, t1, w = window.t0, window.t1, window.duration
    if w <= 0:
        return groups
    sums = _native.group_sums(gids, len(groups), launches, t0, t1, w) if NATIVE and _native else None
    if sums is not None:  # the loop below, in C
        for g, sum_h, sum_hd, sum_lim, longest, intervals in zip(groups, *sums, strict=True):
            g.sum_h, g.sum_hd, g.sum_lim, g.longest, g.intervals = sum_h, sum_hd, sum_lim, longest, intervals
        return groups
    for gid, ts, d in zip(gids, map(_TS, launches), map(_DUR, launches), strict=True):
        end = ts + d
        if ts < t0 or end > t1:
            continue  # outside the window (see `sampling_weight`)
        h = w / (w - d) if 0 < d < w else 1.0
        g = groups[gid]
        hd = h * d
        g.sum_h += h
        g.sum_hd += hd
        g.sum_lim += hd or h
        if d > 0:
            g.intervals.append((ts, end))
    for g in groups:
        g.longest = max((e - s for s, e in g.intervals), default=0.0)
    return groups


class _Numbering(dict[tuple[object, ...], int]):
    """Numbers keys 0, 1, 2... in the order they are first looked up (a C-level `map` over
    `__getitem__` numbers a whole list)."""

    def __missing__(self, key: tuple[object, ...]) -> int:
        self[key] = n = len(self)
        return n


_TS = attrgetter("ts")
_DUR = attrgetter("dur")

MAX_OVERLAP = 3
"""Most earlier launches still running that the busy estimator's inclusion-exclusion enumerates
with a new one (2^3 terms); beyond it the latest-ending ones are kept (the overlap with the others
is not taken out, so busy reads high) and the window is low-confidence. Bounds the cost of a trace
with many streams at once."""


def busy_time(intervals: Iterable[tuple[float, float]], w: float) -> tuple[float, bool]:
    """Estimated time with at least one kernel running in a window of length `w` (µs), from the
    captured launches' intervals, and whether more than `MAX_OVERLAP` launches overlapped.

    Inclusion-exclusion over every set S of captured launches that run at once:
    Σ_S (-1)^(|S|+1) · |∩S| · W / (W - span(S)), where span(S) is the time from the first start to
    the last end of S. Kineto keeps S whole only when the window holds all of it, which happens with
    probability (W - span)/W, so each term is a Horvitz-Thompson estimate of the same term of the
    union over the whole activity stream: the estimate is unbiased wherever every such group spans
    less than W (singletons give the Σ h·d of the time shares; overlaps of streams are taken out at
    their own weight). Not capped at W: one window may read above 1, windows pooled do not drift.
    """
    if not isinstance(intervals, list):
        intervals = list(intervals)
    got: tuple[float, bool] | None = _native.busy_time(intervals, w, MAX_OVERLAP) if NATIVE and _native else None
    if got is not None:  # the loop below, in C
        return got
    total = 0.0
    truncated = False
    active: list[tuple[float, float]] = []  # launches started earlier and still running
    for start, end in sorted(intervals):
        if active:
            active = [iv for iv in active if iv[1] > start]
        d = end - start
        if not active:  # alone: h·d (the common case, inlined)
            total += d * w / (w - d) if d < w else d
        elif len(active) == 1:  # itself, minus its overlap with the other at the pair's weight
            s1, e1 = active[0]
            span = (end if end > e1 else e1) - s1
            total += (d * w / (w - d) if d < w else d) - (
                ((end if end < e1 else e1) - start) * (w / (w - span) if span < w else 1.0)
            )
        elif len(active) == 2:  # two streams and a third: the four sets with this launch, inlined
            (s1, e1), (s2, e2) = active
            m1, m2, m12 = min(end, e1), min(end, e2), min(end, e1, e2)
            x1, x2, x12 = max(end, e1) - s1, max(end, e2) - s2, max(end, e1, e2) - min(s1, s2)
            total += (
                (d * w / (w - d) if d < w else d)
                - ((m1 - start) * (w / (w - x1) if x1 < w else 1.0))
                - ((m2 - start) * (w / (w - x2) if x2 < w else 1.0))
                + ((m12 - start) * (w / (w - x12) if x12 < w else 1.0))
            )
        else:
            if len(active) > MAX_OVERLAP:
                truncated = True
                active.sort(key=_END)
                del active[:-MAX_OVERLAP]
            total += _terms(start, end, start, end, active, 0, 1, w)
        active.append((start, end))
    return max(total, 0.0), truncated


_END = itemgetter(1)


def _terms(
    start: float,
    min_end: float,
    first: float,
    last: float,
    active: list[tuple[float, float]],
    i: int,
    sign: int,
    w: float,
) -> float:
    """The terms of `busy_time` for the sets made of the newest launch (it starts at `start`, the
    latest start of the set) and any subset of active[i:]: `min_end` is the set's common end,
    `first`..`last` its span, `sign` (-1)^(|S|+1)."""
    span = last - first
    out = sign * (min_end - start) * (w / (w - span) if span < w else 1.0)
    for j in range(i, len(active)):
        s_j, e_j = active[j]
        out += _terms(start, min(min_end, e_j), min(first, s_j), max(last, e_j), active, j + 1, -sign, w)
    return out
