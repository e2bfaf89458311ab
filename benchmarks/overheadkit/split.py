"""The figures of one arm, from what the client received and when the windows ran.

An interval (a gap between two chunks, a request's wait for its first token, a training step) is
*inside* when it overlaps a capture window at all: a token held up by a stop counts where the stop
was, even when it arrives just after the stop's answer. Samples of several rounds of an arm pool by
`merge` before `summary` reduces them to figures.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .load import Request

Span = tuple[float, float]


def pct(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear between the closest ranks; None for no values."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


AROUND = (1.0, 5.0)
"""Seconds before a window's start and after its stop's answer that count as its neighbourhood:
a stall that outlasts the stop's answer (a worker still writing its table) falls in it."""


def merged(spans: Iterable[Span], t0: float, t1: float) -> list[Span]:
    """`spans` clipped to [t0, t1], overlapping ones joined, in order."""
    out: list[Span] = []
    for a, b in sorted((max(a, t0), min(b, t1)) for a, b in spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def overlaps(a: float, b: float, windows: Sequence[Span]) -> bool:
    return any(a < we and b > ws for ws, we in windows)


def within(t: float, windows: Sequence[Span]) -> bool:
    return any(ws <= t < we for ws, we in windows)


def clipped_seconds(windows: Iterable[Span], t0: float, t1: float) -> float:
    return sum(max(0.0, min(we, t1) - max(ws, t0)) for ws, we in windows)


@dataclass
class ServedSamples:
    """One arm's client-side samples (seconds in milliseconds where the name says `_ms`)."""

    seconds: float = 0.0
    window_seconds: float = 0.0
    windows: int = 0
    tokens: int = 0
    tokens_inside: int = 0
    ttft_ms: list[tuple[float, bool]] = field(default_factory=list)
    gaps_ms: list[tuple[float, int, bool]] = field(default_factory=list)
    """(gap before a chunk, tokens in that chunk, inside a window)."""
    longest_stall_s: float = 0.0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    """Each failed request's error (its first 120 characters), counted."""
    agent_in: tuple[float, int] = (0.0, 0)
    """Inter-token gaps (ms) and tokens that arrived inside the agent's own spans (`proxy.agent_spans`)."""
    agent_out: tuple[float, int] = (0.0, 0)
    around: tuple[float, int] = (0.0, 0)
    """Seconds and tokens around the windows (`AROUND`, overlaps merged), clipped to the arm."""

    def merge(self, other: ServedSamples) -> ServedSamples:
        return ServedSamples(
            self.seconds + other.seconds,
            self.window_seconds + other.window_seconds,
            self.windows + other.windows,
            self.tokens + other.tokens,
            self.tokens_inside + other.tokens_inside,
            self.ttft_ms + other.ttft_ms,
            self.gaps_ms + other.gaps_ms,
            max(self.longest_stall_s, other.longest_stall_s),
            self.errors + other.errors,
            _count(self.error_kinds, other.error_kinds),
            _add(self.agent_in, other.agent_in),
            _add(self.agent_out, other.agent_out),
            _add(self.around, other.around),
        )


def _count(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


def _add(a: tuple[float, int], b: tuple[float, int]) -> tuple[float, int]:
    return a[0] + b[0], a[1] + b[1]


def served_samples(
    requests: Sequence[Request], windows: Sequence[Span], t0: float, t1: float, agent_spans: Sequence[Span] = ()
) -> ServedSamples:
    """`windows` as the proxy saw them; `agent_spans` as the agent counts them (a token belongs
    to the span it arrived in, as in the server's histogram)."""
    out = ServedSamples(seconds=t1 - t0, window_seconds=clipped_seconds(windows, t0, t1), windows=len(windows))
    near = merged(((a - AROUND[0], b + AROUND[1]) for a, b in windows), t0, t1)
    out.around = (sum(b - a for a, b in near), 0)
    last: dict[int, float] = {}
    for r in requests:
        if r.error is not None and t0 <= r.sent < t1:
            out.errors += 1
            kind = r.error[:120]
            out.error_kinds[kind] = out.error_kinds.get(kind, 0) + 1
        prev = r.sent
        for i, (t, n) in enumerate(r.chunks):
            if t0 <= t < t1:
                out.tokens += n
                out.tokens_inside += n if within(t, windows) else 0
                out.around = (out.around[0], out.around[1] + (n if within(t, near) else 0))
                if i == 0:
                    out.ttft_ms.append(((t - r.sent) * 1e3, overlaps(r.sent, t, windows)))
                else:
                    out.gaps_ms.append(((t - prev) * 1e3, n, overlaps(prev, t, windows)))
                    _by_span(out, (t - prev) * 1e3, n, within(t, agent_spans))
                if r.stream in last:
                    out.longest_stall_s = max(out.longest_stall_s, t - last[r.stream])
            last[r.stream] = t
            prev = t
    return out


def window_stalls(requests: Sequence[Request], windows: Sequence[Span]) -> list[dict[str, float]]:
    """Per window, the longest gap between two chunks of one request near it (`AROUND`): its
    length, and where it began after the window's start and ended after the stop's answer
    (negative: before). A stall that begins before the stop was asked and ends after its answer
    is one the stop's time does not show."""
    out = []
    for ws, we in windows:
        best = (0.0, ws, ws)
        for r in requests:
            for (a, _), (b, _) in zip(r.chunks, r.chunks[1:], strict=False):
                if a < we + AROUND[1] and b > ws - AROUND[0] and b - a > best[0]:
                    best = (b - a, a, b)
        out.append(
            {
                "gap_s": round(best[0], 3),
                "began_after_start_s": round(best[1] - ws, 3),
                "ended_after_stop_s": round(best[2] - we, 3),
            }
        )
    return out


def _by_span(out: ServedSamples, gap_ms: float, n: int, inside: bool) -> None:
    if inside:
        out.agent_in = _add(out.agent_in, (gap_ms, n))
    else:
        out.agent_out = _add(out.agent_out, (gap_ms, n))


def _ratio(inside: tuple[float, int], outside: tuple[float, int]) -> float | None:
    if not inside[1] or not outside[1] or not outside[0]:
        return None
    return round((inside[0] / inside[1]) / (outside[0] / outside[1]) - 1.0, 4)


def _mean_itl(gaps: Iterable[tuple[float, int, bool]]) -> float | None:
    gaps = list(gaps)
    tokens = sum(n for _, n, _ in gaps)
    return sum(g for g, _, _ in gaps) / tokens if tokens else None


def _ms(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": _round(pct(values, 50)), "p99": _round(pct(values, 99)), "n": len(values)}


def _round(v: float | None, digits: int = 2) -> float | None:
    return None if v is None else round(v, digits)


def lost_near_windows(s: ServedSamples) -> float | None:
    """Serving seconds lost per window, within the arm: the tokens missing around the windows
    against the rate of the rest of the arm, in seconds of that rate."""
    seconds, tokens = s.around
    rest_s = s.seconds - seconds
    if not s.windows or rest_s <= 0 or s.tokens - tokens <= 0:
        return None
    rate = (s.tokens - tokens) / rest_s
    return (seconds * rate - tokens) / rate / s.windows


def served_summary(s: ServedSamples) -> dict[str, object]:
    """Tokens/s, TTFT and inter-token gaps (all, inside, outside windows), the client's slowdown
    (mean inter-token latency inside ÷ outside − 1: the agent's `served_slowdown_ratio`, measured
    at the client), the longest stall."""
    inside = [g for g in s.gaps_ms if g[2]]
    outside = [g for g in s.gaps_ms if not g[2]]
    mean_in, mean_out = _mean_itl(inside), _mean_itl(outside)
    outside_s = s.seconds - s.window_seconds
    return {
        "seconds": round(s.seconds, 2),
        "windows": s.windows,
        "window_seconds": round(s.window_seconds, 2),
        "tokens": s.tokens,
        "tokens_per_s": _round(s.tokens / s.seconds if s.seconds else None),
        "tokens_per_s_inside": _round(s.tokens_inside / s.window_seconds if s.window_seconds else None),
        "tokens_per_s_outside": _round((s.tokens - s.tokens_inside) / outside_s if outside_s > 0 else None),
        "ttft_ms": _ms([v for v, _ in s.ttft_ms]),
        "ttft_inside_ms": _ms([v for v, i in s.ttft_ms if i]),
        "ttft_outside_ms": _ms([v for v, i in s.ttft_ms if not i]),
        "itl_ms": _ms([g for g, _, _ in s.gaps_ms]),
        "itl_inside_ms": _ms([g for g, _, _ in inside]),
        "itl_outside_ms": _ms([g for g, _, _ in outside]),
        "itl_mean_inside_ms": _round(mean_in, 3),
        "itl_mean_outside_ms": _round(mean_out, 3),
        "client_slowdown": _round(mean_in / mean_out - 1.0, 4) if mean_in and mean_out else None,
        "client_slowdown_agent_spans": _ratio(s.agent_in, s.agent_out),
        "longest_stall_s": round(s.longest_stall_s, 3),
        "errors": s.errors,
        "error_kinds": dict(sorted(s.error_kinds.items())),
        "lost_s_per_window_near": _round(lost_near_windows(s), 3),
    }


@dataclass
class StepSamples:
    """One arm of the torch loop: each step's time and whether it overlapped a window."""

    seconds: float = 0.0
    windows: int = 0
    steps_ms: list[tuple[float, bool]] = field(default_factory=list)

    def merge(self, other: StepSamples) -> StepSamples:
        return StepSamples(self.seconds + other.seconds, self.windows + other.windows, self.steps_ms + other.steps_ms)


def step_samples(steps: Sequence[Span], windows: Sequence[Span], t0: float, t1: float) -> StepSamples:
    """`steps` are (start, seconds) on the clock of `windows`, `t0` and `t1`."""
    out = StepSamples(seconds=t1 - t0, windows=len(windows))
    for start, dur in steps:
        if t0 <= start and start + dur < t1:
            out.steps_ms.append((dur * 1e3, overlaps(start, start + dur, windows)))
    return out


def step_summary(s: StepSamples) -> dict[str, object]:
    every = [v for v, _ in s.steps_ms]
    return {
        "seconds": round(s.seconds, 2),
        "windows": s.windows,
        "steps": len(every),
        "steps_per_s": _round(len(every) / s.seconds if s.seconds else None),
        "step_ms": _ms(every),
        "step_inside_ms": _ms([v for v, i in s.steps_ms if i]),
        "step_outside_ms": _ms([v for v, i in s.steps_ms if not i]),
        "longest_step_ms": _round(max(every, default=0.0)),
    }
