"""The benchmark's loss per window (benchmarks/overheadkit/timeline.py) against a known truth: a
client stream of constant rate with stalls of known lengths placed by hand around windows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from overheadkit.timeline import Work, far_rate, interval, window_losses

RATE = 100.0  # tokens per second, one token every 10 ms


def stream(t0: float, t1: float, holes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A token every 1/RATE s over [t0, t1), none inside the holes; the tokens a hole held arrive
    at its end (a stall delays them, the stream then goes on at its rate)."""
    out, held = [], 0
    for i in range(round((t1 - t0) * RATE)):
        t = t0 + i / RATE
        if any(a <= t < b for a, b in holes):
            held += 1
        else:
            out.append((t, 1.0 + held))
            held = 0
    return out


def test_a_stall_whose_held_tokens_arrive_in_the_same_part_costs_that_part_nothing() -> None:
    # windows every 30 s of 2 s; the first stalls 1.5 s inside, the second 0.8 s after its end,
    # the third 1 s inside and 0.5 s after; a burst of held tokens arrives at each hole's end, so
    # what is lost is only where the hole and its burst fall in different parts.
    windows = [(20.0, 22.0), (50.0, 52.0), (80.0, 82.0)]
    holes = [(20.3, 21.8), (52.5, 53.3), (80.5, 81.5), (84.0, 84.5)]
    work = Work(stream(0.0, 110.0, holes))
    rate = far_rate(work, windows, 0.0, 110.0)
    assert rate == pytest.approx(RATE, rel=0.01)
    losses = window_losses(work, windows, rate, 0.0, 110.0)
    assert len(losses) == 3
    # each hole's tokens come at its end, inside the same part: a part loses nothing net...
    assert [x.total for x in losses] == pytest.approx([0.0, 0.0, 0.0], abs=0.015)  # a token is 0.01 s


def test_tokens_that_never_come_are_lost_seconds_of_the_far_rate() -> None:
    # a closed-loop client: a stall's tokens are never made up (nothing held arrives later)
    windows = [(20.0, 22.0), (50.0, 52.0), (80.0, 82.0)]
    holes = [(20.3, 21.8), (52.5, 53.3), (80.5, 81.5), (84.0, 84.5)]
    events = [(t, 1.0) for t, _ in stream(0.0, 110.0, holes)]
    work = Work(events)
    rate = far_rate(work, windows, 0.0, 110.0)
    losses = window_losses(work, windows, rate, 0.0, 110.0)
    assert [x.inside for x in losses] == pytest.approx([1.5, 0.0, 1.0], abs=0.015)
    assert [x.after for x in losses] == pytest.approx([0.0, 0.8, 0.5], abs=0.015)
    assert [x.before for x in losses] == pytest.approx([0.0, 0.0, 0.0], abs=0.015)
    total = interval([x.total for x in losses])
    # 1.5, 0.8, 1.5: mean 1.267, sd 0.404, t(2) = 4.30: half-width 4.30 * 0.404 / sqrt(3) = 1.003
    assert total.mean == pytest.approx(3.8 / 3, abs=0.01)
    assert total.high - total.mean == pytest.approx(1.003, abs=0.01)


def test_windows_too_near_the_arms_edges_are_left_out() -> None:
    work = Work([(t / RATE, 1.0) for t in range(int(60 * RATE))])
    assert window_losses(work, [(1.0, 2.0), (30.0, 31.0), (56.0, 57.0)], RATE, 0.0, 60.0) == [
        window_losses(work, [(30.0, 31.0)], RATE, 0.0, 60.0)[0]
    ]
