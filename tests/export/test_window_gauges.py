"""One window's analysis as exported: the gauges, unknown values, folding into `other`, failed and
empty windows, GPUs missing from a round, NVML, kernel labels.

Every test builds a fresh CollectorRegistry and reads samples with `get_sample_value`.
"""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from support.exportkit import device, gauged, kernel, ok, publish, value, window
from warpwatch.export import metricdefs as md
from warpwatch.export.builder import OTHER, GpuInfo, NvmlSample, WindowResult


def test_a_single_window_is_exported_exactly_as_analysed() -> None:
    k = kernel(
        "ampere_sgemm_32x32_sliced1x4_tn",
        250_000.0,
        samples=40,
        warps_per_sm=19.5,
        resident_warps_per_sm=9.75,
        theoretical_occupancy=0.25,
        estimated_occupancy=0.15,
        waves_per_sm=1.2,
        reported_warps_per_sm_min=-3.0,
    )
    reg = publish(gauged(top_kernels=50), ok(window([k], [device(busy=0.4, resident=12.0)])))
    labels = {"gpu": "0", "kernel": "ampere_sgemm_32x32_sliced1x4_tn"}
    assert value(reg, md.KERNEL_WARPS_PER_SM, **labels) == 19.5
    assert value(reg, md.KERNEL_RESIDENT_WARPS_PER_SM, **labels) == 9.75
    assert value(reg, md.KERNEL_THEORETICAL_OCCUPANCY, **labels) == 0.25
    assert value(reg, md.KERNEL_ESTIMATED_OCCUPANCY, **labels) == 0.15
    assert value(reg, md.KERNEL_WAVES_PER_SM, **labels) == 1.2
    assert value(reg, md.KERNEL_TIME_SHARE, **labels) == 0.25
    assert value(reg, md.KERNEL_LAUNCH_RATE, **labels) == 40.0
    assert value(reg, md.KERNEL_REPORTED_WARPS_MIN, **labels) == -3.0
    assert value(reg, md.KERNEL_LAUNCHES_OBSERVED, **labels) == 0.0  # counters start at 0 (below)
    assert value(reg, md.GPU_BUSY, gpu="0") == 0.4
    assert value(reg, md.GPU_RESIDENT_WARPS_PER_SM, gpu="0") == 12.0
    assert value(reg, md.GPU_ESTIMATED_OCCUPANCY, gpu="0") == 12.0 / 64
    assert (
        value(
            reg,
            md.GPU_INFO,
            gpu="0",
            name="NVIDIA H100 80GB HBM3",
            compute_capability="9.0",
            sms="132",
            vendor="nvidia",
            uuid="",
        )
        == 1.0
    )
    # From the label to the full name in one step.
    assert (
        value(
            reg,
            md.KERNEL_INFO,
            gpu="0",
            kernel="ampere_sgemm_32x32_sliced1x4_tn",
            name="ampere_sgemm_32x32_sliced1x4_tn",
        )
        == 1.0
    )


def test_unknown_values_export_no_sample_never_zero() -> None:
    k = kernel("rocm_kernel", 1000.0)  # every mean unknown, as for a kernel without grid/block
    reg = publish(gauged(top_kernels=50), ok(window([k], [device(resident=None, props=None)])))
    labels = {"gpu": "0", "kernel": "rocm_kernel"}
    for m in (
        md.KERNEL_WARPS_PER_SM,
        md.KERNEL_RESIDENT_WARPS_PER_SM,
        md.KERNEL_THEORETICAL_OCCUPANCY,
        md.KERNEL_ESTIMATED_OCCUPANCY,
        md.KERNEL_WAVES_PER_SM,
        md.KERNEL_REPORTED_WARPS_MIN,
    ):
        assert value(reg, m, **labels) is None, m.name
    assert value(reg, md.KERNEL_TIME_SHARE, **labels) == 0.001
    assert value(reg, md.GPU_RESIDENT_WARPS_PER_SM, gpu="0") is None
    assert value(reg, md.GPU_BUSY, gpu="0") == 0.5
    text = generate_latest(reg).decode()
    assert 'warpwatch_kernel_warps_per_sm{gpu="0"' not in text
    assert "warpwatch_gpu_info{" not in text


def test_kernels_beyond_top_k_fold_into_other() -> None:
    ks = [
        kernel("a", 400.0, samples=4, warps_per_sm=10.0),
        kernel("b", 300.0, samples=3, warps_per_sm=20.0),
        kernel("c", 20.0, samples=2, warps_per_sm=0.6, reported_warps_per_sm_min=5.0, artifacts={"unrounded_warps": 2}),
        kernel(
            "d",
            50.0,
            samples=5,
            warps_per_sm=1.0,
            reported_warps_per_sm_min=-1.0,
            artifacts={"unrounded_warps": 1, "negative_warps_per_sm": 5},
        ),
        kernel("e", 10.0, samples=1),  # warps unknown: no weight in the mean
    ]
    builder = gauged(top_kernels=2)
    publish(builder, ok(window(ks, [device()])))  # the GPU's first round only creates its counters
    reg = publish(builder, ok(window(ks, [device()])))
    other = {"gpu": "0", "kernel": OTHER}
    assert value(reg, md.KERNEL_WARPS_PER_SM, gpu="0", kernel="a") == 10.0
    assert value(reg, md.KERNEL_WARPS_PER_SM, gpu="0", kernel="c") is None
    assert value(reg, md.KERNEL_WARPS_PER_SM, **other) == pytest.approx((0.6 * 20 + 1.0 * 50) / (20 + 50))
    assert value(reg, md.KERNEL_TIME_SHARE, **other) == pytest.approx((20 + 50 + 10) / 1e6)
    assert value(reg, md.KERNEL_LAUNCH_RATE, **other) == pytest.approx(2 + 5 + 1)
    assert value(reg, md.KERNEL_REPORTED_WARPS_MIN, **other) == -1.0
    assert value(reg, md.KERNEL_LAUNCHES_OBSERVED, **other) == 8.0
    assert value(reg, md.PROFILER_ARTIFACTS, **other, artifact="unrounded_warps") == 3.0
    assert value(reg, md.PROFILER_ARTIFACTS, **other, artifact="negative_warps_per_sm") == 5.0
    assert value(reg, md.KERNELS_FOLDED, gpu="0") == 6.0  # 3 in each of the two rounds


def test_label_count_is_bounded_by_top_k_plus_other() -> None:
    ks = [kernel(f"kernel_{i:03d}", 1000.0 - i) for i in range(200)]
    reg = publish(gauged(top_kernels=50), ok(window(ks, [device()])))
    samples = [s for fam in reg.collect() if fam.name == md.KERNEL_TIME_SHARE.name for s in fam.samples]
    assert len(samples) == 51
    assert {s.labels["kernel"] for s in samples} == {f"kernel_{i:03d}" for i in range(50)} | {OTHER}


def test_kernels_that_disappear_are_gone_from_the_next_snapshot_but_their_counters_stay() -> None:
    builder = gauged(top_kernels=50)
    first = publish(builder, ok(window([kernel("a", 10.0, samples=3), kernel("b", 5.0, samples=2)], [device()])))
    assert value(first, md.KERNEL_TIME_SHARE, gpu="0", kernel="b") == 5e-6
    second = publish(builder, ok(window([kernel("a", 20.0, samples=4)], [device()])))
    assert value(second, md.KERNEL_TIME_SHARE, gpu="0", kernel="b") is None
    assert value(second, md.KERNEL_TIME_SHARE, gpu="0", kernel="a") == 2e-5
    assert value(second, md.KERNEL_LAUNCHES_OBSERVED, gpu="0", kernel="a") == 4.0  # round 1 created it at 0
    assert value(second, md.KERNEL_LAUNCHES_OBSERVED, gpu="0", kernel="b") == 0.0
    assert value(second, md.WINDOWS, outcome="ok") == 2.0


def test_a_failed_window_changes_no_gauge_and_counts_once() -> None:
    builder = gauged(top_kernels=50)
    good = publish(builder, ok(window([kernel("a", 10.0)], [device(busy=0.7)])), now=100.0)
    assert value(good, md.GPU_BUSY, gpu="0") == 0.7
    bad = publish(builder, WindowResult("dir:/x", "p0", "failed", 0.002), now=160.0)
    assert value(bad, md.GPU_BUSY, gpu="0") == 0.7
    assert value(bad, md.KERNEL_TIME_SHARE, gpu="0", kernel="a") == 1e-5
    assert value(bad, md.WINDOWS, outcome="failed") == 1.0
    assert value(bad, md.WINDOWS, outcome="ok") == 1.0
    assert value(bad, md.WINDOWS, outcome="timed_out") == 0.0
    assert value(bad, md.LAST_WINDOW_TIMESTAMP) == 160.0
    assert value(bad, md.WINDOW_PROCESSING, "_count") == 2.0
    assert value(bad, md.WINDOW_PROCESSING, "_bucket", le="0.005") == 1.0


def test_an_empty_window_changes_no_gauge() -> None:
    builder = gauged(top_kernels=50)
    publish(builder, ok(window([kernel("a", 10.0)], [device(busy=0.7)])))
    empty = window([], [])
    reg = publish(builder, WindowResult("dir:/x", "p0", "empty", 0.001, empty))
    assert value(reg, md.GPU_BUSY, gpu="0") == 0.7
    assert value(reg, md.WINDOWS, outcome="empty") == 1.0


def test_gpus_not_in_a_round_keep_their_last_window() -> None:
    builder = gauged(top_kernels=50)
    publish(builder, ok(window([kernel("a", 10.0, device=1)], [device(1, busy=0.3)]), process="rank1"))
    reg = publish(builder, ok(window([kernel("b", 10.0)], [device(0, busy=0.6)]), process="rank0"))
    assert value(reg, md.GPU_BUSY, gpu="1") == 0.3
    assert value(reg, md.GPU_BUSY, gpu="0") == 0.6
    assert value(reg, md.KERNEL_TIME_SHARE, gpu="1", kernel="a") == 1e-5


def test_nvml_is_down_by_default_and_reports_when_up() -> None:
    builder = gauged(top_kernels=5)
    reg = publish(builder)
    assert value(reg, md.NVML_UP) == 0.0
    assert value(reg, md.NVML_SM_OCCUPANCY, gpu="0") is None
    builder.set_nvml(
        True,
        [NvmlSample("0", sm_occupancy=0.42, utilization=0.9)],
        {"0": GpuInfo("0", "NVIDIA H200", "9.0", "132", "nvidia", "GPU-1")},
    )
    reg = publish(builder)
    assert value(reg, md.NVML_UP) == 1.0
    assert value(reg, md.NVML_SM_OCCUPANCY, gpu="0") == 0.42
    assert value(reg, md.NVML_GPU_UTILIZATION, gpu="0") == 0.9
    assert (
        value(
            reg,
            md.GPU_INFO,
            gpu="0",
            name="NVIDIA H200",
            compute_capability="9.0",
            sms="132",
            vendor="nvidia",
            uuid="GPU-1",
        )
        == 1.0
    )
    # The traced process's own device properties win for its gpu index.
    reg = publish(builder, ok(window([kernel("a", 1.0)], [device()])))
    assert (
        value(
            reg,
            md.GPU_INFO,
            gpu="0",
            name="NVIDIA H100 80GB HBM3",
            compute_capability="9.0",
            sms="132",
            vendor="nvidia",
            uuid="",
        )
        == 1.0
    )
    assert (
        value(
            reg,
            md.GPU_INFO,
            gpu="0",
            name="NVIDIA H200",
            compute_capability="9.0",
            sms="132",
            vendor="nvidia",
            uuid="GPU-1",
        )
        is None
    )


def test_long_and_colliding_kernel_names_get_bounded_distinct_labels() -> None:
    a = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1> >(int)"
    )
    b = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>, "
        "at::detail::Array<char*, 2> >(int)"
    )
    reg = publish(gauged(top_kernels=5), ok(window([kernel(a, 2.0), kernel(b, 1.0)], [device()])))
    labels = {s.labels["kernel"] for fam in reg.collect() if fam.name == md.KERNEL_TIME_SHARE.name for s in fam.samples}
    assert labels == {  # the functor tells them apart (warpwatch.names.labels)
        "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1>>",
        "at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>, at::detail::Array<char*, 2>>",
    }
