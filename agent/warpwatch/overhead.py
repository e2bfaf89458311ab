"""What watching costs the traced server, and the period that keeps it within the budget.

The measures come from the sources each round:

- the **stop stall**: seconds from asking a source to end a window until it answered (a vLLM
  worker writes its trace, and builds its `key_averages()` table, before it serves again);
- the **served measures** (vllm/sglang sources): the engine's own latency per output token (its
  inter-token and first-token histograms, sum and count) and its counter of generated tokens,
  read before each window starts and after it ended, with the wall time of each span, split into
  what fell inside windows and what fell between them (`LatencySplit`, cumulative; a source
  measures a span before its first window too);
- a **cost the source measured itself** (kineto-daemon: what finishing each window's trace took
  the traced process, `Source.take_cost_seconds`), charged in place of its stop.

From the last `ROUNDS` rounds the ledger estimates, per source, the mean server time lost per round:

    lost = max(T · s / (1 + s), T − G_in / r_out, stall)        cost(P) = lost / P

T being the mean wall time inside a window (its start to its stop's answer and the collection of
its files), s the slowdown (mean latency per token inside ÷ outside − 1: each stream served
T / (1 + s) worth of tokens in T), G_in the tokens generated inside a window and r_out the rate
between windows (`throughput_loss`: what the engine did not make, whether or not a client waited
on a token for it), and stall the mean of the rounds' largest stops (or of the costs the source
measured itself). The larger counts: each misses what the other sees (the histograms miss a
stall with no request in flight; the counter misses a slower token that still came). The stall
is already inside T, so it is not added again; it bounds `lost` from below, and alone where a
source gives no served measure. Where a source measures served latency but no span between
windows is known yet, the whole of T is charged, as if the server served nothing inside the
window: never at nothing. The largest over the sources counts (they run side by side). The period
that keeps the cost within the budget is `lost / budget`, never less than the configured one nor
more than `max_period`; the window is never shortened (the sampling-window correction needs it).
Pure: no clock, no I/O; the service feeds it and reads `view()`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

ROUNDS = 5
"""Rounds a source's measures are pooled over."""
STOP_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Upper bounds of `warpwatch_capture_stop_seconds` (seconds): an instant answer up to a 5-min flush."""
PERIOD_CHANGE = 0.1
"""A new period is taken only when it differs from the current one by more than this share (no
flapping on noise)."""


@dataclass(frozen=True, slots=True)
class LatencySplit:
    """Cumulative measures a server reports, split into inside capture windows (a window's start to
    its stop's answer and the files' collection) and outside them: the latency per output token
    (seconds and tokens of its histograms), the wall time, and the tokens the engine generated
    (its counter, `vllm:generation_tokens_total`)."""

    inside_s: float = 0.0
    inside_tokens: float = 0.0
    outside_s: float = 0.0
    outside_tokens: float = 0.0
    inside_wall_s: float = 0.0
    windows: int = 0
    inside_generated: float = 0.0
    outside_generated: float = 0.0
    outside_wall_s: float = 0.0

    def minus(self, earlier: LatencySplit) -> LatencySplit:
        return LatencySplit(*(getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)))


def slowdown(split: LatencySplit) -> float | None:
    """Mean latency inside ÷ outside − 1; None without tokens on both sides."""
    if split.inside_tokens <= 0 or split.outside_tokens <= 0 or split.outside_s <= 0:
        return None
    ratio = (split.inside_s / split.inside_tokens) / (split.outside_s / split.outside_tokens)
    return ratio - 1.0 if math.isfinite(ratio) else None


def throughput_loss(split: LatencySplit) -> float | None:
    """Seconds of generation lost inside the windows: their wall time less the time the engine's
    rate between windows would have taken for what it generated inside them; None without
    generated tokens and wall time between windows."""
    if split.outside_generated <= 0 or split.outside_wall_s <= 0:
        return None
    rate = split.outside_generated / split.outside_wall_s
    lost = split.inside_wall_s - max(0.0, split.inside_generated) / rate
    return max(0.0, lost) if math.isfinite(lost) else None


@dataclass
class StopHistogram:
    """Cumulative counts of stop stalls per `STOP_BUCKETS` bound (the last slot is +Inf)."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(STOP_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        i = next((i for i, bound in enumerate(STOP_BUCKETS) if seconds <= bound), len(STOP_BUCKETS))
        self.counts[i] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, "+Inf" last, as a histogram is exposed."""
        out, running = [], 0
        for bound, n in zip((*map(str, STOP_BUCKETS), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass(frozen=True, slots=True)
class OverheadView:
    """What the agent exports about its cost (`export.overhead`)."""

    budget: float
    period: float
    slowdown: dict[str, float]
    """Per source with a served measure on both sides of its windows."""
    cost: float | None
    """At `period`; None until a round measured something."""
    stops: dict[str, StopHistogram]


class _SourceLedger:
    def __init__(self) -> None:
        self.stalls: deque[float] = deque(maxlen=ROUNDS)
        """The largest stop of each of the last rounds that had one (the stops of one round run side
        by side: the largest is the round's); pooled as their mean, as the served measures are (the
        budget is a share of time: a slow stop among quick ones costs its share of the rounds, and
        the largest of five would charge every round a stall only one had)."""
        self.costs: deque[float] = deque(maxlen=ROUNDS)
        """The largest cost the source measured itself of each of the last rounds that had one
        (`Source.take_cost_seconds`), pooled the same way: where there is one, it is charged in
        place of the stall."""
        self.splits: deque[LatencySplit] = deque(maxlen=ROUNDS + 1)
        self.histogram = StopHistogram()

    def recent(self) -> LatencySplit | None:
        return self.splits[-1].minus(self.splits[0]) if len(self.splits) >= 2 else None

    def slowdown(self) -> float | None:
        recent = self.recent()
        return None if recent is None else slowdown(recent)

    def lost(self) -> float | None:
        """Server seconds lost per round, or None when nothing was measured."""
        stall = _mean(self.costs) if self.costs else _mean(self.stalls) if self.stalls else None
        recent = self.recent()
        served = None
        if recent is not None and recent.windows > 0:
            served = _served_loss(recent) / recent.windows
        known = [v for v in (stall, served) if v is not None]
        return max(known) if known else None


def _mean(values: deque[float]) -> float:
    return sum(values) / len(values)


def _served_loss(split: LatencySplit) -> float:
    """Seconds lost inside the windows of `split`: the larger of what the latency per token and
    the generated tokens say; until a span between windows is measured neither is known, and the
    whole of the windows is charged, as if the server served nothing in them (the most a window
    can cost)."""
    s = slowdown(split)
    by_latency = None if s is None else max(0.0, s) / (1.0 + max(0.0, s)) * split.inside_wall_s
    known = [v for v in (by_latency, throughput_loss(split)) if v is not None]
    return max(known) if known else split.inside_wall_s


class OverheadLedger:
    """The last rounds' measures per source, the cost they imply, and the period within `budget`."""

    def __init__(self, budget: float, period: float, max_period: float) -> None:
        if not 0 < budget <= 1:
            raise ValueError(f"budget must be a share in (0, 1], got {budget!r}")
        self.budget = budget
        self.max_period = max(period, max_period)
        self.configured_period = period
        self.period = period
        """The period in force: the configured one, or longer while the cost is above the budget."""
        self._sources: dict[str, _SourceLedger] = {}

    def observe(
        self, source: str, stops: list[float], served: LatencySplit | None, costs: Sequence[float] = ()
    ) -> None:
        """One round of one source: the stops it answered, its cumulative served latency, and the
        costs it measured itself."""
        led = self._sources.setdefault(source, _SourceLedger())
        good = [s for s in stops if math.isfinite(s) and s >= 0]
        for s in good:
            led.histogram.observe(s)
        if good:
            led.stalls.append(max(good))
        if measured := [c for c in costs if math.isfinite(c) and c >= 0]:
            led.costs.append(max(measured))
        if served is not None:
            if not led.splits:
                led.splits.append(LatencySplit())  # a source's split is cumulative from zero
            if served != led.splits[-1]:
                led.splits.append(served)

    def lost(self) -> float | None:
        """Server seconds lost per round, the largest over the sources; None when unmeasured."""
        per_source = [v for led in self._sources.values() if (v := led.lost()) is not None]
        return max(per_source) if per_source else None

    def cost(self) -> float | None:
        lost = self.lost()
        return None if lost is None else lost / self.period

    def replan(self) -> float | None:
        """Recompute the period; the new one when it changed (beyond `PERIOD_CHANGE`), else None."""
        lost = self.lost()
        wanted = self.configured_period if lost is None else max(self.configured_period, lost / self.budget)
        wanted = min(wanted, self.max_period)
        if abs(wanted - self.period) <= PERIOD_CHANGE * self.period:
            return None
        self.period = wanted
        return wanted

    def view(self) -> OverheadView:
        slow = {name: s for name, led in self._sources.items() if (s := led.slowdown()) is not None}
        return OverheadView(
            self.budget,
            self.period,
            slow,
            self.cost(),
            {name: led.histogram for name, led in self._sources.items() if sum(led.histogram.counts)},
        )
