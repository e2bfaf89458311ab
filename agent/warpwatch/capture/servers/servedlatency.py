"""The server's own latency per output token, read on its `/metrics` around each window.

vLLM (v1 engine, 0.7+) exports `vllm:inter_token_latency_seconds` (before 0.11 the same histogram
was `vllm:time_per_output_token_seconds`) and `vllm:time_to_first_token_seconds`; SGLang (with
`--enable-metrics`) `sglang:inter_token_latency_seconds` (earlier
`sglang:time_per_output_token_seconds`) and `sglang:time_to_first_token_seconds`. Each inter-token
observation is one token's gap from the token before it in its stream; each first-token one is a
request's wait for its first token. Added, their sum over their count is the mean wait per output
token: what a streaming client sees. The first tokens count because a stop's stall often falls on
them (measured on the real vLLM: a 21-s stop found every stream between two requests, so the
inter-token histogram did not move while each new request waited 21 s for its first token). Sums
and counts, added over every label set (engines, models), are read just before a window starts and
just after it ended; the difference is the window's share, and the difference from the previous
window's end the share of the time between windows (`overhead.LatencySplit`). Where the engine has
no first-token histogram, the inter-token one alone is used. The engine's counter of generated
tokens (`vllm:generation_tokens_total`, `sglang:generation_tokens_total`) is read with them, with
the wall time of each span: what the engine generated inside windows against its rate between
them (`overhead.throughput_loss`). Before its first window a source measures a span of serving
(`BASELINE_S`), so that even the first window is compared with something. Each engine's names are
its dialect's (`Dialect.inter_token_histograms`, `first_token_histograms`, `generated_counters`).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from ...overhead import LatencySplit

log = logging.getLogger("warpwatch.capture.servers")


class Sums(NamedTuple):
    seconds: float
    tokens: float


class Reading(NamedTuple):
    """One look at the server's counters: its latency per output token and the tokens it generated
    (0 where the engine has no such counter)."""

    latency: Sums
    generated: float


BASELINE_S = 5.0
"""Before its first window a source measures this span of serving (`ServedLatency.begin_baseline`):
the first window's cost is then known from its end on, not charged whole until a second window."""


def histogram_sums(text: str, names: tuple[str, ...]) -> Sums | None:
    """The first of `names` present in an exposition: its `_sum` and `_count` added over label
    sets; None when none is there (or its values are not finite numbers)."""
    return _sums(_scan(text, names), names)


def _sums(found: dict[str, list[float] | None], names: tuple[str, ...]) -> Sums | None:
    for name in names:
        sums, counts = found.get(name + "_sum"), found.get(name + "_count")
        if not sums or not counts:
            continue
        total = Sums(sum(sums), sum(counts))
        return total if all(math.isfinite(v) and v >= 0 for v in total) else None
    return None


def _scan(text: str, names: tuple[str, ...], counters: tuple[str, ...] = ()) -> dict[str, list[float] | None]:
    """One pass over the exposition: each `_sum` and `_count` sample of the histograms `names` and
    each sample of `counters`, its values over label sets; None for a sample with a value that is
    not a number."""
    found: dict[str, list[float] | None] = {}
    if not names:
        return found
    samples = [name + suffix for name in names for suffix in ("_sum", "_count")] + list(counters)
    wanted = "|".join(re.escape(sample) for sample in samples)
    for m in re.finditer(rf"^({wanted})(?:\{{.*\}})?(?:[ \t]+(\S*)|$)", text, re.M):
        values = found.setdefault(m[1], [])
        if values is None:
            continue
        try:
            values.append(float(m[2] or ""))
        except ValueError:
            found[m[1]] = None
    return found


class ServedLatency:
    """Splits a server's latency per output token into inside and outside windows, cumulatively.

    `read` returns the exposition's text, or None when it could not be had. A window is
    `started()` and then `ended()`; a failed read leaves that window (and the span before the
    next) out. After the first read that finds no histogram (an empty text for a server without
    `/metrics`), it stops asking (logged once). No `names`: never asks."""

    def __init__(
        self,
        names: tuple[str, ...],
        read: Callable[[], str | None],
        *,
        name: str,
        first_token: tuple[str, ...] = (),
        generated: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._names = names
        self._first_token = first_token
        self._generated = generated
        self._read = read
        self._name = name
        self._clock = clock
        self._split = LatencySplit()
        self._enabled = bool(names)
        self._start: tuple[Reading, float] | None = None
        self._last_end: tuple[Reading, float] | None = None

    def split(self) -> LatencySplit | None:
        """The cumulative split (from zero), once a window was measured; else None. Until a span
        between windows is measured too, it has no tokens outside (its slowdown is unknown)."""
        return self._split if self._split.windows else None

    def begin_baseline(self) -> bool:
        """Before the first window: reads the counters, so that the span until that window's start
        is measured as one between windows. True when the caller should now let `BASELINE_S` pass."""
        if not self._enabled or self._split.windows or self._last_end is not None:
            return False
        sample = self._sample()
        self._last_end = None if sample is None else (sample, self._clock())
        return sample is not None

    def started(self) -> None:
        sample, now = self._sample(), self._clock()
        self._start = None if sample is None else (sample, now)
        last = self._last_end
        if sample is not None and last is not None and _grew(last[0], sample):
            s = self._split
            self._split = replace(
                s,
                outside_s=s.outside_s + sample.latency.seconds - last[0].latency.seconds,
                outside_tokens=s.outside_tokens + sample.latency.tokens - last[0].latency.tokens,
                outside_generated=s.outside_generated + sample.generated - last[0].generated,
                outside_wall_s=s.outside_wall_s + now - last[1],
            )
        self._last_end = None

    def ended(self) -> None:
        start, self._start = self._start, None
        sample = self._sample() if start is not None else None
        if start is None or sample is None or not _grew(start[0], sample):
            return  # a restarted server resets its counters: that window is left out
        now = self._clock()
        s = self._split
        self._split = replace(
            s,
            inside_s=s.inside_s + sample.latency.seconds - start[0].latency.seconds,
            inside_tokens=s.inside_tokens + sample.latency.tokens - start[0].latency.tokens,
            inside_generated=s.inside_generated + sample.generated - start[0].generated,
            inside_wall_s=s.inside_wall_s + now - start[1],
            windows=s.windows + 1,
        )
        self._last_end = (sample, now)

    def _sample(self) -> Reading | None:
        if not self._enabled:
            return None
        text = self._read()
        if text is None:
            return None
        found = _scan(text, self._names + self._first_token, self._generated)
        totals = _sums(found, self._names)
        first = _sums(found, self._first_token) if totals is not None and self._first_token else None
        if totals is not None and first is not None:
            totals = Sums(totals.seconds + first.seconds, totals.tokens + first.tokens)
        if totals is None:
            self._enabled = False
            log.info(
                "%s: the server's /metrics has no %s histogram: the served slowdown is not measured",
                self._name,
                " or ".join(self._names),
            )
            return None
        return Reading(totals, _counter(found, self._generated))


def _counter(found: dict[str, list[float] | None], names: tuple[str, ...]) -> float:
    """The first of the counters `names` present, added over label sets; 0 where none is (or its
    values are not finite numbers)."""
    for name in names:
        if values := found.get(name):
            total = sum(values)
            return total if math.isfinite(total) and total >= 0 else 0.0
    return 0.0


def _grew(earlier: Reading, later: Reading) -> bool:
    """Whether the counters only went up (a restarted server resets them)."""
    return later.latency.tokens >= earlier.latency.tokens and later.generated >= earlier.generated
