"""Where a window's cost lands, from the client's side: work done (tokens received, steps made)
around each window against the rate far from any window.

For each window `[start, end]` (its start request to its stop's answer, or for kineto-daemon its
trace's first event to the file's last write) the span `[start - BEFORE_S, end + AFTER_S]` is
cut into three parts: *before* the start, *inside* the window, *after* its end. The work expected
in a part is the arm's *far* rate (work per second over the arm's time at least `BEFORE_S` before
and `AFTER_S` after every window) times the part's length; what is lost is the shortfall, in
seconds of that rate. Each window gives one figure, so the mean comes with its spread: a 95 %
interval over windows (Student's t). `profile` averages the rate in bins of `BIN_S` aligned on
the windows' starts and on their ends (a picture of the loss: a dip, its depth and its tail).

Pure: no clock, no I/O. Work is a list of (time, amount) events on the windows' clock.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Span = tuple[float, float]
Event = tuple[float, float]

BEFORE_S = 2.0
AFTER_S = 5.0
"""The neighbourhood of a window: small enough that windows 10 s apart leave spans far from both
(the reference rate), long enough for a stall's tail (the profiles show where it ends)."""
BIN_S = 0.1

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 15: 2.13, 20: 2.09}
"""Student's t, two-sided 95 %, by degrees of freedom (between the rows: the row below, the wider)."""


def t95(df: int) -> float:
    if df <= 0:
        return math.inf
    return T95[max(k for k in T95 if k <= df)] if df <= 30 else 1.96 + 2.5 / df


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    def text(self, scale: float = 1.0, digits: int = 2) -> str:
        if self.n == 0:
            return "-"
        if self.n == 1:
            return f"{self.mean * scale:.{digits}f} (1)"
        return f"{self.mean * scale:.{digits}f} [{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"


def mean_known(values: Sequence[float | None]) -> float | None:
    """The mean of the values known (not None); None when none is."""
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def interval(values: Sequence[float]) -> Interval:
    """Mean of `values` with its 95 % interval."""
    n = len(values)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = statistics.fmean(values)
    if n == 1:
        return Interval(mean, math.nan, math.nan, 1)
    half = t95(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


class Work:
    """Events sorted by time, with cumulative amounts for sums over spans."""

    def __init__(self, events: Sequence[Event]) -> None:
        ordered = sorted(events)
        self.times = [t for t, _ in ordered]
        self.cumulative = [0.0]
        for _, amount in ordered:
            self.cumulative.append(self.cumulative[-1] + amount)

    def between(self, a: float, b: float) -> float:
        """Work of the events in [a, b)."""
        return self.cumulative[bisect.bisect_left(self.times, b)] - self.cumulative[bisect.bisect_left(self.times, a)]


def far_spans(windows: Sequence[Span], t0: float, t1: float) -> list[Span]:
    """The parts of [t0, t1] at least BEFORE_S before and AFTER_S after every window."""
    out, cursor = [], t0
    for start, end in sorted(windows):
        if start - BEFORE_S > cursor:
            out.append((cursor, start - BEFORE_S))
        cursor = max(cursor, end + AFTER_S)
    if t1 > cursor:
        out.append((cursor, t1))
    return out


def far_rate(work: Work, windows: Sequence[Span], t0: float, t1: float) -> float | None:
    spans = far_spans(windows, t0, t1)
    seconds = sum(b - a for a, b in spans)
    return sum(work.between(a, b) for a, b in spans) / seconds if seconds > 0 else None


@dataclass(frozen=True)
class WindowLoss:
    """Seconds of the far rate lost before, inside and after one window."""

    before: float
    inside: float
    after: float
    length: float

    @property
    def total(self) -> float:
        return self.before + self.inside + self.after


def window_losses(work: Work, windows: Sequence[Span], rate: float, t0: float, t1: float) -> list[WindowLoss]:
    """One `WindowLoss` per window whose whole neighbourhood lies in [t0, t1]."""
    out = []
    for start, end in sorted(windows):
        if start - BEFORE_S < t0 or end + AFTER_S > t1:
            continue
        parts = ((start - BEFORE_S, start), (start, end), (end, end + AFTER_S))
        lost = [(b - a) - work.between(a, b) / rate for a, b in parts]
        out.append(WindowLoss(*lost, end - start))
    return out


def profile(work: Work, windows: Sequence[Span], rate: float, anchor: str, lo: float, hi: float) -> list[float]:
    """Mean rate over the windows ÷ `rate`, in bins of BIN_S from `lo` to `hi` seconds around each
    window's `anchor` ("start" or "end")."""
    bins = round((hi - lo) / BIN_S)
    sums = [0.0] * bins
    for start, end in windows:
        at = start if anchor == "start" else end
        for i in range(bins):
            a = at + lo + i * BIN_S
            sums[i] += work.between(a, a + BIN_S) / BIN_S
    return [s / len(windows) / rate for s in sums] if windows and rate > 0 else []


def sparkline(values: Sequence[float], step: int = 5) -> str:
    """The profile drawn with one character per `step` bins: 8 levels from 0 to 1 of the far rate."""
    marks = " ▁▂▃▄▅▆▇█"
    out = []
    for i in range(0, len(values), step):
        v = statistics.fmean(values[i : i + step])
        out.append(marks[max(0, min(8, round(v * 8)))])
    return "".join(out)


def arm_timeline(
    requests: Sequence[Any], windows: Sequence[Span], t0: float, t1: float, writes: Sequence[float]
) -> dict[str, Any]:
    """One arm's figures: the far rate, each window's loss (before, inside, after), the mean
    profile around the starts and the ends, and when the workers' trace files were last written
    (seconds after the start of the window they follow)."""
    return _figures(Work([chunk for r in requests for chunk in r.chunks]), windows, t0, t1, writes)


def step_timeline(steps: Sequence[Span], windows: Sequence[Span], t0: float, t1: float) -> dict[str, Any]:
    """The same for a loop's steps, (start, seconds) each: one unit of work at each step's end."""
    return _figures(Work([(start + seconds, 1.0) for start, seconds in steps]), windows, t0, t1, [])


def _figures(work: Work, windows: Sequence[Span], t0: float, t1: float, writes: Sequence[float]) -> dict[str, Any]:
    rate = far_rate(work, windows, t0, t1)
    if not rate:
        return {}
    starts = sorted(a for a, _ in windows)
    after_start = [w - max(s for s in starts if s <= w) for w in writes if any(s <= w for s in starts)]
    return {
        "far_rate": rate,
        "losses": [vars(x) for x in window_losses(work, windows, rate, t0, t1)],
        "profile_start": profile(work, windows, rate, "start", -2.0, 8.0),
        "profile_end": profile(work, windows, rate, "end", -2.0, 8.0),
        "writes_after_start_s": after_start,
        "lengths_s": [b - a for a, b in windows],
    }
