"""The window bounds' pieces, by hand (docs/metrics.md, "Physical bounds")."""

from __future__ import annotations

import random

import pytest

from warpwatch.analysis.windowbounds import device_bounds, project_excess, union_length


def test_one_stream_allows_the_union_plus_the_idle_edges() -> None:
    # [10, 20) and [30, 90) in [0, 100): union 70, idle 10 before and 10 after
    b = device_bounds([(30.0, 90.0), (10.0, 20.0)], {7: [10.0, 90.0]}, 0.0, 100.0)
    assert (b.observed, b.busy_high, b.room, b.slots, b.streams) == (70.0, 90.0, 20.0, 2, 1)


def test_two_streams_allow_the_edges_up_to_the_latest_first_and_earliest_last_launch() -> None:
    # stream a: [10, 40); stream b: [50, 60). A left straddler on b may run up to 50, one on a up to 10;
    # a right one on a from 40, on b from 60: busy within [40, 100] minus what U covers there.
    b = device_bounds([(10.0, 40.0), (50.0, 60.0)], {"a": [10.0, 40.0], "b": [50.0, 60.0]}, 0.0, 100.0)
    assert b.observed == 40.0
    assert b.busy_high == 100.0  # first_max 50 >= last_min 40: every gap can hide a straddler
    b = device_bounds([(10.0, 40.0), (20.0, 90.0)], {"a": [10.0, 40.0], "b": [20.0, 90.0]}, 0.0, 100.0)
    assert b.observed == 80.0 and b.busy_high == pytest.approx(80.0 + 10.0 + 10.0)
    assert b.room == pytest.approx((10 + 60) + (20 + 10)) and b.slots == 4


def test_union_length_merges_overlaps() -> None:
    assert union_length([(5.0, 7.0), (0.0, 2.0), (1.0, 3.0), (6.0, 9.0)])[0] == 7.0


def test_projection_keeps_what_fits_and_takes_one_amount_off_the_rest() -> None:
    assert project_excess([1.0, 2.0], 5.0) == [1.0, 2.0]
    assert project_excess([3.0, 1.0], 2.0) == [2.0, 0.0]
    assert project_excess([3.0, 2.0, 0.5], 3.0) == pytest.approx([2.0, 1.0, 0.0])
    rng = random.Random(0)
    for _ in range(500):
        x = [rng.expovariate(1.0) for _ in range(rng.randrange(1, 8))]
        cap = rng.uniform(0, sum(x) * 1.2)
        y = project_excess(x, cap)
        assert all(v >= 0 for v in y) and sum(y) <= cap * (1 + 1e-12) + 1e-12
        if sum(x) > cap:  # KKT: every component still positive lost the same amount
            cuts = {round(a - b, 9) for a, b in zip(x, y, strict=True) if b > 0}
            assert len(cuts) <= 1 and all(b == 0 or a - b >= 0 for a, b in zip(x, y, strict=True))
            assert sum(y) == pytest.approx(cap)
