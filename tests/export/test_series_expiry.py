"""Issue 24: a kernel that leaves the top-K stops costing series after `ABSENT_ROUNDS` rounds, and
the per-kernel last-round gauges are opt-in (`kernel_gauges`).

Expected values are arithmetic on the inputs: kernel "a" runs 0.3 s per round until it stops, "b"
0.2 s per round throughout, top-1. The increases over any span of rounds, summed over the
exported kernels (`other` included), equal the kernel time those rounds held.
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from prometheus_client import CollectorRegistry

from support.exportkit import device, kernel, kernel_seconds, ok, publish, value, window
from warpwatch.export import metricdefs as md
from warpwatch.export.builder import OTHER, SnapshotBuilder, WindowResult
from warpwatch.export.seriesbound import ABSENT_ROUNDS


def round_of(*kernels: tuple[str, float]) -> WindowResult:
    return ok(window([kernel(n, us, launches=10.0) for n, us in kernels], [device(busy=0.5, resident=4.0)]))


def test_a_kernel_out_of_the_top_k_loses_its_series_after_absent_rounds_and_no_increase_changes() -> None:
    builder = SnapshotBuilder(top_kernels=1, absent_rounds=ABSENT_ROUNDS)
    for _ in range(4):
        publish(builder, round_of(("a", 300_000.0), ("b", 200_000.0)))
    before = kernel_seconds(publish(builder, round_of(("a", 300_000.0), ("b", 200_000.0))))
    assert set(before) == {"a", OTHER}
    # "a" stops; "b" takes its place once its decayed score beats a's by the hysteresis
    history = [before]
    for _ in range(40):
        history.append(kernel_seconds(publish(builder, round_of(("b", 200_000.0)))))
    assert "a" not in history[-1], "a kernel out of the top-K for good keeps its series"
    assert set(history[-1]) == {"b", OTHER}
    # wherever "a" was dropped, every round's increase over the kernels present in both rounds
    # (series that vanished contribute nothing: they were flat) is the round's 0.2 s of kernel time
    for prev, cur in pairwise(history):
        increase = sum(cur[k] - prev.get(k, 0.0) for k in cur if k in prev)
        fresh = sum(v for k, v in cur.items() if k not in prev)
        assert fresh == 0.0  # a new series starts at 0
        assert increase == pytest.approx(0.2)
    dropped_at = next(i for i, h in enumerate(history) if "a" not in h)
    last_with_a = history[dropped_at - 1]
    assert history[dropped_at - 1]["a"] == history[max(0, dropped_at - ABSENT_ROUNDS)]["a"]  # flat before
    assert last_with_a["a"] == pytest.approx(4 * 0.3)  # the first round only creates the series


def test_kernel_gauges_are_opt_in_but_a_negative_reported_minimum_is_always_exported() -> None:
    def rounds(builder: SnapshotBuilder) -> CollectorRegistry:
        publish(
            builder,
            ok(
                window(
                    [kernel("a", 300_000.0), kernel("b", 100_000.0, reported_warps_per_sm_min=-5.0)],
                    [device(busy=0.5, resident=4.0)],
                )
            ),
        )
        return publish(
            builder,
            ok(
                window(
                    [kernel("a", 300_000.0), kernel("b", 100_000.0, reported_warps_per_sm_min=-5.0)],
                    [device(busy=0.5, resident=4.0)],
                )
            ),
        )

    plain = rounds(SnapshotBuilder(top_kernels=5))
    assert value(plain, md.KERNEL_TIME_SHARE, gpu="0", kernel="a") is None
    assert value(plain, md.KERNEL_ESTIMATED_OCCUPANCY, gpu="0", kernel="a") is None
    assert value(plain, md.KERNEL_REPORTED_WARPS_MIN, gpu="0", kernel="b") == -5.0
    assert value(plain, md.KERNEL_REPORTED_WARPS_MIN, gpu="0", kernel="a") is None
    full = rounds(SnapshotBuilder(top_kernels=5, kernel_gauges=True))
    assert value(full, md.KERNEL_TIME_SHARE, gpu="0", kernel="a") == pytest.approx(0.3)
