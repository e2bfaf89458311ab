"""Pooling windows into one round: processes on one GPU add their rates, windows of one process are
pooled over time, GPUs of unnamed processes stay apart, and kernels beyond the top K fold."""

from __future__ import annotations

import pytest

from support.exportkit import device, kernel, window
from warpwatch.export.builder import OTHER
from warpwatch.export.pooling import fold, merge_round


def test_two_processes_on_one_gpu_add_their_rates() -> None:
    a = window([kernel("gemm", 300_000.0, samples=3, warps_per_sm=8.0)], [device(busy=0.5, resident=10.0)])
    b = window(
        [kernel("gemm", 100_000.0, samples=1, warps_per_sm=4.0), kernel("copy", 50_000.0)],
        [device(busy=0.7, resident=60.0)],
    )
    merged = merge_round([("p1", a), ("p2", b)])[0]
    gemm = next(k for k in merged.kernels if k.name == "gemm")
    assert gemm.time_share == pytest.approx(0.3 + 0.1)
    assert gemm.launch_rate == pytest.approx(3 + 1)
    assert gemm.warps_per_sm == pytest.approx((8.0 * 300_000 + 4.0 * 100_000) / 400_000)
    assert gemm.samples == 4
    assert merged.device.busy_ratio == pytest.approx(1.2)  # 0.5 + 0.7: not capped (a cap biases pooling)
    assert merged.device.resident_warps_per_sm == 70.0  # 10 + 60
    assert merged.device.estimated_occupancy == pytest.approx(70 / 64)
    assert [k.name for k in merged.kernels] == ["gemm", "copy"]


def test_windows_of_one_process_are_pooled_over_time() -> None:
    w1 = window([kernel("gemm", 500_000.0, window_us=1e6, samples=5)], [device(busy=0.5)], window_us=1e6)
    w2 = window([kernel("copy", 300_000.0, window_us=3e6, samples=6)], [device(busy=0.1)], window_us=3e6)
    merged = merge_round([("p", w1), ("p", w2)])[0]
    by = {k.name: k for k in merged.kernels}
    assert by["gemm"].time_share == pytest.approx(0.5 * 1 / 4)  # (0.5 * 1 s + 0 * 3 s) / 4 s
    assert by["gemm"].launch_rate == pytest.approx(5 / 4)
    assert by["copy"].time_share == pytest.approx(0.1 * 3 / 4)
    assert merged.device.busy_ratio == pytest.approx((0.5 * 1 + 0.1 * 3) / 4)


def test_unnamed_processes_on_different_gpus_are_not_diluted_by_each_other() -> None:
    """Files with neither a worker name nor a rank share one identity; each GPU pools only the
    windows that saw it."""
    w0 = window([kernel("gemm", 500_000.0)], [device(0, busy=0.5)], window_us=1e6)
    w1 = window([kernel("gemm", 250_000.0, device=1)], [device(1, busy=0.25)], window_us=1e6)
    merged = merge_round([("dir:/t||rank=", w0), ("dir:/t||rank=", w1)])
    assert merged[0].device.busy_ratio == 0.5
    assert merged[1].device.busy_ratio == 0.25
    assert merged[1].kernels[0].time_share == 0.25


def test_fold_keeps_the_members_and_sums_the_rest_into_other() -> None:
    ks = [kernel("a", 2.0), kernel("b", 1.0)]
    assert fold(ks, {"a", "b", "c"}) == (ks, None, 0)
    top, other, folded = fold(ks, {"a"})
    assert (top, folded) == ([ks[0]], 1)
    assert other is not None
    assert other.name == OTHER
    assert other.time_share == ks[1].time_share
