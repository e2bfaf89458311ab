"""The `_total` counters of corrected window sums (docs/metrics.md, "Aggregation over time and
across pods"): what one round adds, what a GPU counts as observed, and the stable top-K.

Expected values are written as arithmetic on the inputs. Every series is first published at 0
(Prometheus counts increases from a series' first sample), so the first round of a GPU only
creates its counters; the tests publish a warm-up round first.
"""

from __future__ import annotations

import pytest

from support.exportkit import device, gauged, kernel, kernel_seconds, ok, publish, value, window
from warpwatch.export import metricdefs as md
from warpwatch.export.builder import OTHER, SnapshotBuilder, WindowResult
from warpwatch.export.pooling import StableTopK

W = 1e6  # a 1 s window, in trace microseconds


def empty_window(window_us: float = W) -> WindowResult:
    return WindowResult("replay:t", "p0", "empty", 0.01, window([], [], window_us))


def three_kernels() -> WindowResult:
    return ok(
        window(
            [
                kernel("gemm", 300_000.0, launches=30.0, warps_per_sm=8.0, estimated_occupancy=0.5),
                kernel("attn", 100_000.0, launches=10.0, warps_per_sm=16.0),
                kernel("copy", 20_000.0, launches=400.0),
            ],
            [device(busy=0.4, resident=6.0, longest=90_000.0)],
        )
    )


def test_a_round_adds_its_corrected_sums_and_other_completes_every_gpus_kernel_time() -> None:
    builder = SnapshotBuilder(top_kernels=1)
    first = publish(builder, three_kernels())
    assert value(first, md.GPU_OBSERVED_SECONDS, gpu="0") == 0.0  # created, not counted
    assert kernel_seconds(first) == {"gemm": 0.0, OTHER: 0.0}
    publish(builder, three_kernels())
    reg = publish(builder, three_kernels())
    assert value(reg, md.GPU_OBSERVED_SECONDS, gpu="0") == pytest.approx(2 * 1.0)
    assert value(reg, md.GPU_BUSY_SECONDS, gpu="0") == pytest.approx(2 * 0.4)
    assert value(reg, md.GPU_RESIDENT_WARPS_SECONDS, gpu="0") == pytest.approx(2 * 6.0)
    assert value(reg, md.GPU_EMPTY_SECONDS, gpu="0") == 0.0
    seconds = kernel_seconds(reg)
    assert seconds == pytest.approx({"gemm": 2 * 0.3, OTHER: 2 * (0.1 + 0.02)})
    assert sum(seconds.values()) == pytest.approx(2 * (0.3 + 0.1 + 0.02))  # whatever the top-K
    gemm = {"gpu": "0", "kernel": "gemm"}
    assert value(reg, md.KERNEL_LAUNCHES_ESTIMATED, **gemm) == pytest.approx(2 * 30)
    assert value(reg, md.KERNEL_WARPS_PER_SM_SECONDS, **gemm) == pytest.approx(2 * 0.3 * 8.0)
    assert value(reg, md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, **gemm) == pytest.approx(2 * 0.3 * 0.5)
    other = {"gpu": "0", "kernel": OTHER}
    assert value(reg, md.KERNEL_WARPS_PER_SM_SECONDS, **other) == pytest.approx(2 * 0.1 * 16.0)
    assert value(reg, md.KERNEL_LAUNCHES_ESTIMATED, **other) == pytest.approx(2 * 410)
    # a kernel's mean is the ratio of its counters: 8 warps per SM for gemm
    assert value(reg, md.KERNEL_WARPS_PER_SM_SECONDS, **gemm) / value(reg, md.KERNEL_SECONDS, **gemm) == pytest.approx(
        8.0
    )
    assert value(reg, md.GPU_LONGEST_KERNEL_RATIO, gpu="0") == pytest.approx(0.09)


def test_empty_windows_count_as_observed_time_for_the_gpus_the_process_uses() -> None:
    builder = SnapshotBuilder(top_kernels=5)
    publish(builder, three_kernels())
    publish(builder, three_kernels())
    reg = publish(builder, empty_window(), empty_window(0.5e6))
    assert value(reg, md.GPU_OBSERVED_SECONDS, gpu="0") == pytest.approx(1.0 + 1.0 + 0.5)
    assert value(reg, md.GPU_EMPTY_SECONDS, gpu="0") == pytest.approx(1.5)
    assert kernel_seconds(reg)["gemm"] == pytest.approx(0.3)
    # time share over the three windows: 0.3 s of gemm in 2.5 s watched, not 0.3 in 1 s
    assert kernel_seconds(reg)["gemm"] / value(reg, md.GPU_OBSERVED_SECONDS, gpu="0") == pytest.approx(0.12)


def test_a_process_that_never_ran_a_kernel_on_a_gpu_does_not_observe_it() -> None:
    builder = SnapshotBuilder(top_kernels=5)
    publish(builder, three_kernels())
    publish(builder, three_kernels())
    idle = WindowResult("replay:t", "other-process", "empty", 0.01, window([], [], W))
    gpu1 = ok(window([kernel("k", 1000.0, device=1)], [device(1)]), process="p0")
    reg = publish(builder, idle, gpu1)
    assert value(reg, md.GPU_OBSERVED_SECONDS, gpu="0") == pytest.approx(1.0 + 1.0)  # p0 watched gpu 0 too
    assert value(reg, md.GPU_EMPTY_SECONDS, gpu="0") == pytest.approx(1.0)
    assert value(reg, md.GPU_OBSERVED_SECONDS, gpu="1") == 0.0  # first seen: created


def test_processes_side_by_side_on_one_gpu_add_their_kernel_time_but_not_their_windows() -> None:
    builder = SnapshotBuilder(top_kernels=5)

    def both() -> list[WindowResult]:
        return [
            ok(window([kernel("gemm", 200_000.0)], [device(busy=0.2)]), process="rank0"),
            ok(window([kernel("gemm", 300_000.0)], [device(busy=0.3)]), process="rank1"),
        ]

    publish(builder, *both())
    reg = publish(builder, *both())
    assert value(reg, md.GPU_OBSERVED_SECONDS, gpu="0") == pytest.approx(1.0)  # one second, watched twice
    assert kernel_seconds(reg)["gemm"] == pytest.approx(0.5)
    assert value(reg, md.GPU_BUSY_SECONDS, gpu="0") == pytest.approx(0.5)


def test_low_confidence_windows_are_counted_and_flagged() -> None:
    builder = SnapshotBuilder(top_kernels=5)
    low = ok(window([kernel("long", 600_000.0)], [device(low=True, longest=600_000.0)]))
    publish(builder, low)
    reg = publish(builder, low)
    assert value(reg, md.GPU_LOW_CONFIDENCE_SECONDS, gpu="0") == pytest.approx(1.0)
    assert value(reg, md.GPU_LOW_CONFIDENCE, gpu="0") == 1.0
    assert value(reg, md.GPU_LONGEST_KERNEL_RATIO, gpu="0") == pytest.approx(0.6)


def test_a_kernel_admitted_later_counts_under_other_in_its_first_round_then_under_its_own_name() -> None:
    builder = SnapshotBuilder(top_kernels=5)
    publish(builder, ok(window([kernel("a", 1000.0)], [device()])))
    publish(builder, ok(window([kernel("a", 1000.0)], [device()])))
    reg = publish(builder, ok(window([kernel("a", 1000.0), kernel("b", 500.0)], [device()])))
    assert kernel_seconds(reg) == pytest.approx({"a": 0.002, "b": 0.0, OTHER: 0.0005})
    reg = publish(builder, ok(window([kernel("a", 1000.0), kernel("b", 500.0)], [device()])))
    assert kernel_seconds(reg) == pytest.approx({"a": 0.003, "b": 0.0005, OTHER: 0.0005})


def test_top_k_membership_does_not_flip_between_kernels_of_similar_weight() -> None:
    top = StableTopK(k=1)
    flips = 0
    members_before: frozenset[str] = frozenset()
    for i in range(50):
        heavy, light = ("a", "b") if i % 2 else ("b", "a")
        members, _ = top.update({heavy: 1.1, light: 1.0})
        flips += members != members_before and bool(members_before)
        members_before = members
    assert flips == 0
    # a kernel that really takes over replaces the member after a few rounds
    for _ in range(5):
        members, _ = top.update({"c": 10.0, "a": 1.0, "b": 1.0})
    assert members == {"c"}


def test_top_k_fills_free_places_at_once_and_forgets_kernels_that_stop() -> None:
    top = StableTopK(k=2, max_tracked=3)
    members, admitted = top.update({"a": 1.0, "b": 0.5, "c": 0.1})
    assert members == admitted == {"a", "b"}
    for i in range(10):
        top.update({f"x{i}": 0.01})
    assert len(top.scores) <= 3
    assert top.members == {"a", "b"}


def test_counters_never_go_back_when_series_are_bounded() -> None:
    builder = gauged(top_kernels=3, max_counter_series=4)
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for i in range(30):
        reg = publish(builder, ok(window([kernel(f"k{i % 12}", 1.0 + i % 5, samples=2)], [device()])))
        samples = [
            (fam.name, s)
            for fam in reg.collect()
            if fam.name.startswith("warpwatch_kernel_") and fam.type == "counter"
            for s in fam.samples
            if s.name.endswith("_total")
        ]
        for name in {n for n, _ in samples}:
            assert len([s for n, s in samples if n == name]) <= 4
        for name, s in samples:
            key = (name, tuple(sorted(s.labels.items())))
            assert s.value >= seen.get(key, 0.0), key
            seen[key] = s.value
