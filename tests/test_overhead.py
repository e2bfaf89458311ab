"""The cost ledger (`warpwatch.overhead`): slowdown, server time lost per round, the period within
the budget. Expected figures are worked by hand in each test's comment."""

from __future__ import annotations

import math

import pytest

from warpwatch.overhead import STOP_BUCKETS, LatencySplit, OverheadLedger, StopHistogram, slowdown


def test_slowdown_is_the_ratio_of_mean_latencies_minus_one() -> None:
    # inside: 30 tokens in 0.9 s -> 30 ms each; outside: 100 tokens in 2 s -> 20 ms each: 1.5x
    assert slowdown(LatencySplit(0.9, 30, 2.0, 100)) == pytest.approx(0.5)
    assert slowdown(LatencySplit(0.9, 0, 2.0, 100)) is None  # no token inside
    assert slowdown(LatencySplit(0.9, 30, 0.0, 0)) is None  # nothing outside yet


def test_a_stall_alone_stretches_the_period_to_stall_over_budget() -> None:
    ledger = OverheadLedger(0.01, 60.0, 86400.0)
    ledger.observe("vllm:a", [2.0], None)
    # 2 s lost per round at a 60 s period is 3.3 %; within 1 % the period must be 2 / 0.01 = 200 s
    assert ledger.cost() == pytest.approx(2.0 / 60.0)
    assert ledger.replan() == pytest.approx(200.0)
    assert ledger.period == pytest.approx(200.0)
    assert ledger.cost() == pytest.approx(0.01)
    assert ledger.replan() is None  # stable


def test_the_served_slowdown_counts_the_time_inside_windows_once() -> None:
    ledger = OverheadLedger(0.01, 10.0, 86400.0)
    ledger.observe("vllm:a", [], LatencySplit())
    # Two windows of 1.5 s wall each; inside 40 ms per token, outside 20 ms: slowdown 1, so each
    # stream served 0.75 s worth of tokens in 1.5 s: 0.75 s lost per round (the 0.5 s stall is inside it).
    ledger.observe("vllm:a", [0.5], LatencySplit(2.0, 50, 4.0, 200, 3.0, 2))
    assert ledger.view().slowdown == {"vllm:a": pytest.approx(1.0)}
    assert ledger.lost() == pytest.approx(0.75)
    assert ledger.replan() == pytest.approx(75.0)


def test_the_first_windows_are_charged_whole_until_the_slowdown_is_known() -> None:
    ledger = OverheadLedger(0.01, 60.0, 86400.0)
    # The first window of a source that measures served latency: 2.5 s of wall time inside it, no
    # span between windows yet, so no slowdown; a 0.2 s stop. Charged: the whole 2.5 s (as if it
    # served nothing), so the period goes to 2.5 / 0.01 = 250 s.
    ledger.observe("vllm:a", [0.2], LatencySplit(0.5, 10, 0.0, 0.0, 2.5, 1))
    assert ledger.view().slowdown == {}
    assert ledger.lost() == pytest.approx(2.5)
    assert ledger.replan() == pytest.approx(250.0)
    # The second window: 2.5 s again; outside, 200 tokens in 4 s (20 ms each); inside both windows
    # 20 tokens in 0.8 s (40 ms each): slowdown 1, so half of each 2.5 s window is lost: 1.25 s,
    # counted from the first window on (the split starts at zero). 1.25 / 0.01 = 125 s.
    ledger.observe("vllm:a", [0.2], LatencySplit(0.8, 20, 4.0, 200, 5.0, 2))
    assert ledger.view().slowdown == {"vllm:a": pytest.approx(1.0)}
    assert ledger.lost() == pytest.approx(1.25)
    assert ledger.replan() == pytest.approx(125.0)


def test_the_largest_source_counts_and_a_quiet_ledger_keeps_the_configured_period() -> None:
    ledger = OverheadLedger(0.05, 60.0, 86400.0)
    assert ledger.cost() is None and ledger.replan() is None
    ledger.observe("a", [1.0], None)
    ledger.observe("b", [4.0], None)
    assert ledger.lost() == 4.0
    assert ledger.replan() == pytest.approx(80.0)  # 4 / 0.05
    for _ in range(5):  # five quick rounds push the slow ones out of the last rounds
        ledger.observe("a", [0.01], None)
        ledger.observe("b", [0.01], None)
    assert ledger.replan() == 60.0  # back to --period, never below it


def test_a_slow_stop_among_quick_ones_costs_its_share_of_the_rounds() -> None:
    ledger = OverheadLedger(0.01, 10.0, 86400.0)
    # One round of two processes stopping side by side (0.2 s and 4 s: the round lost 4 s), then
    # four rounds of 0.5 s: 4 + 4 x 0.5 = 6 s over five rounds, 1.2 s a round; 120 s at 1 %.
    ledger.observe("kineto-daemon", [0.2, 4.0], None)
    for _ in range(4):
        ledger.observe("kineto-daemon", [0.5], None)
    assert ledger.lost() == pytest.approx(1.2)
    assert ledger.replan() == pytest.approx(120.0)
    # a sixth round pushes the slow one out of the last five: 0.5 s a round
    ledger.observe("kineto-daemon", [0.5], None)
    assert ledger.lost() == pytest.approx(0.5)


def test_the_period_is_capped_and_small_changes_are_ignored() -> None:
    ledger = OverheadLedger(0.01, 60.0, 3600.0)
    ledger.observe("a", [100.0], None)
    assert ledger.replan() == 3600.0  # 100 / 0.01 = 10,000 s, capped
    ledger = OverheadLedger(0.01, 60.0, 3600.0)
    ledger.observe("a", [0.65], None)
    assert ledger.replan() is None  # 65 s is within 10 % of 60 s


def test_bad_measures_are_ignored() -> None:
    ledger = OverheadLedger(0.01, 60.0, 3600.0)
    ledger.observe("a", [math.inf, math.nan, -1.0], None)
    assert ledger.cost() is None
    with pytest.raises(ValueError, match="budget"):
        OverheadLedger(0.0, 60.0, 3600.0)


def test_the_stop_histogram_is_cumulative_with_inf_last() -> None:
    h = StopHistogram()
    for s in (0.005, 0.3, 0.3, 20.0, 1000.0):
        h.observe(s)
    buckets = dict(h.cumulative())
    assert list(buckets)[-1] == "+Inf" and len(buckets) == len(STOP_BUCKETS) + 1
    assert buckets["0.01"] == 1 and buckets["0.25"] == 1 and buckets["0.5"] == 3
    assert buckets["30.0"] == 4 and buckets["+Inf"] == 5
    assert h.total == pytest.approx(1020.605)


def test_tokens_the_engine_did_not_generate_inside_windows_are_charged_when_latency_misses_them() -> None:
    ledger = OverheadLedger(0.01, 60.0, 86400.0)
    ledger.observe("vllm:a", [], LatencySplit())
    # Two windows of 3 s wall each (6 s). Between them the engine generated 6,000 tokens in 10 s
    # (600/s); inside, 1,800: at 600/s that is 3 s of generation in 6 s, so 3 s lost, 1.5 s per
    # window. The latency per token says less: 40 ms inside against 30 ms outside is a slowdown of
    # 1/3, a quarter of the windows' time (0.75 s per window): the larger, 1.5 s, is charged.
    split = LatencySplit(0.4, 10, 0.3, 10, 6.0, 2, inside_generated=1800, outside_generated=6000, outside_wall_s=10.0)
    ledger.observe("vllm:a", [0.2], split)
    assert ledger.lost() == pytest.approx(1.5)
    assert ledger.replan() == pytest.approx(150.0)


def test_the_throughput_loss_needs_a_span_between_windows_and_never_goes_below_zero() -> None:
    from warpwatch.overhead import throughput_loss

    assert throughput_loss(LatencySplit(inside_wall_s=2.0, windows=1, inside_generated=100)) is None
    # faster inside than between (a quiet spell before): nothing lost, not a negative cost
    faster = LatencySplit(
        inside_wall_s=2.0, windows=1, inside_generated=2000, outside_generated=500, outside_wall_s=1.0
    )
    assert throughput_loss(faster) == 0.0
    # 2 s inside at 500/s would have made 1,000 tokens; 600 were made: 0.8 s lost
    slower = LatencySplit(inside_wall_s=2.0, windows=1, inside_generated=600, outside_generated=500, outside_wall_s=1.0)
    assert throughput_loss(slower) == pytest.approx(0.8)


def test_a_cost_the_source_measured_itself_is_charged_in_place_of_its_stop() -> None:
    ledger = OverheadLedger(0.01, 10.0, 86400.0)
    # kineto-daemon: the stops took 1.6 s and 1.9 s (mostly the wait for Kineto's next poll), the
    # traces took 0.3 s and 0.4 s to finish once recorded: their mean, 0.35 s per round, is charged,
    # 35 s at 1 %.
    ledger.observe("kineto-daemon", [1.6], None, [0.3])
    ledger.observe("kineto-daemon", [1.9], None, [0.4, float("nan")])
    assert ledger.lost() == pytest.approx(0.35)
    assert ledger.replan() == pytest.approx(35.0)
    # the stop histogram still shows the stops
    assert ledger.view().stops["kineto-daemon"].total == pytest.approx(3.5)
